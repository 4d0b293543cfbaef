"""Kafka record batch v2 ⇄ Arrow (kafka_api.records): every codec, nulls, headers, and the checks on bad batches."""

from __future__ import annotations

import struct

import cramjam
import crc32c
import pyarrow as pa
import pytest

from kafka_api.records import BATCH_HEADER_SIZE, decode_batches, encode_batch, encode_batches
from logstore.errors import CorruptMessageError, InvalidRequestError
from logstore.log.schema import HEADERS_TYPE, TOPIC_SCHEMA


def _table(n: int = 300) -> pa.Table:
    return pa.table(
        {
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array([10 + 2 * i for i in range(n)], pa.int64()),  # gaps, as after compaction
            "timestamp": pa.array([(1_700_000_000_000 + (i * 37) % 500) * 1000 for i in range(n)], pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            ),
            "timestamp_type": pa.array([0] * n, pa.int32()),
            "key": pa.array([None if i % 5 == 0 else f"k{i}".encode() * (i % 50) for i in range(n)], pa.binary()),
            "value": pa.array([None if i % 7 == 0 else bytes([i % 256]) * (i * 3) for i in range(n)], pa.binary()),
            "headers": pa.array(
                [[{"key": "h", "value": b"1"}, {"key": "h", "value": None}] if i % 3 == 0 else [] for i in range(n)],
                HEADERS_TYPE,
            ),
        },
        schema=TOPIC_SCHEMA,
    )


def _recompress(data: bytes, codec: int) -> bytes:
    """The same batch with its records compressed by ``codec``, as a producer sends it."""
    body = data[BATCH_HEADER_SIZE:]
    packed = {
        1: lambda b: bytes(cramjam.gzip.compress(b)),
        2: lambda b: bytes(cramjam.snappy.compress_raw(b)),
        3: lambda b: bytes(cramjam.lz4.compress(b)),
        4: lambda b: bytes(cramjam.zstd.compress(b)),
        5: _xerial,
    }[codec](body)
    head = bytearray(data[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", head, 8, BATCH_HEADER_SIZE - 12 + len(packed))
    (attributes,) = struct.unpack_from(">h", head, 21)
    struct.pack_into(">h", head, 21, attributes | (2 if codec == 5 else codec))
    out = bytes(head) + packed
    struct.pack_into(">I", head, 17, crc32c.crc32c(out[21:]))
    return bytes(head) + packed


def _xerial(body: bytes) -> bytes:
    """Snappy in the Java client's framing: magic, two versions, then length-prefixed raw blocks."""
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for i in range(0, len(body), 1000):
        block = bytes(cramjam.snappy.compress_raw(body[i : i + 1000]))
        out += struct.pack(">i", len(block)) + block
    return out


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4, 5], ids=["none", "gzip", "snappy", "lz4", "zstd", "snappy-java"])
def test_a_batch_round_trips_through_every_codec(codec: int) -> None:
    table = _table()
    data = encode_batch(table)
    if codec:
        data = _recompress(data, codec)
    [decoded] = decode_batches(data + data)[:1]
    assert decoded.keys.to_pylist() == table["key"].to_pylist()
    assert decoded.values.to_pylist() == table["value"].to_pylist()
    assert decoded.headers.to_pylist() == table["headers"].to_pylist()
    assert decoded.timestamps.to_pylist() == table["timestamp"].to_pylist()
    assert (decoded.producer_id, decoded.base_sequence) == (-1, -1)
    assert len(decode_batches(data + data)) == 2


def test_encode_stamps_base_offset_last_delta_and_record_offsets() -> None:
    table = _table(4)
    data = encode_batch(table)
    base_offset, length, _, magic = struct.unpack_from(">qiib", data)
    (last_delta,) = struct.unpack_from(">i", data, 23)
    (count,) = struct.unpack_from(">i", data, 57)
    assert (base_offset, length, magic, last_delta, count) == (10, len(data) - 12, 2, 6, 4)
    assert struct.unpack_from(">I", data, 17)[0] == crc32c.crc32c(data[21:])


def test_a_flipped_bit_is_corrupt_message() -> None:
    data = bytearray(encode_batch(_table(10)))
    data[-3] ^= 0x01
    with pytest.raises(CorruptMessageError, match="CRC-32C does not match"):
        decode_batches(bytes(data))


def test_a_truncated_batch_is_corrupt_message() -> None:
    data = encode_batch(_table(10))
    with pytest.raises(CorruptMessageError, match="declares"):
        decode_batches(data[:-5])
    with pytest.raises(CorruptMessageError, match="truncated"):
        decode_batches(data[:30])


def test_old_message_formats_are_refused_by_name() -> None:
    data = bytearray(encode_batch(_table(2)))
    data[16] = 1
    with pytest.raises(InvalidRequestError, match="magic 1"):
        decode_batches(bytes(data))


def test_log_append_time_records_get_a_batch_per_commit_time() -> None:
    """A LogAppendTime batch has one timestamp (clients give its max to every record), so each commit's own."""
    table = _table(6)
    kinds = pa.array([0, 0, 1, 1, 1, 0], pa.int32())
    stamps = pa.array([5_000, 6_000, 7_000, 7_000, 8_000, 9_000], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    table = table.set_column(3, "timestamp_type", kinds).set_column(2, "timestamp", stamps)
    data = encode_batches(table)
    batches = []
    pos = 0
    while pos < len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        (max_ts,) = struct.unpack_from(">q", data, pos + 35)
        (count,) = struct.unpack_from(">i", data, pos + 57)
        batches.append((base_offset, count, bool(attributes & 0x08), max_ts))
        pos += 12 + length
    assert batches == [(10, 2, False, 6), (14, 2, True, 7), (18, 1, True, 8), (20, 1, False, 9)]
    decoded = decode_batches(data)
    assert [t for b in decoded for t in b.timestamps.to_pylist()] == stamps.to_pylist()


def _values_of(sizes: list[int]) -> pa.Table:
    """Records with values of these sizes, null keys and no headers, at consecutive offsets a few ms apart
    (as ProducerPerformance sends them)."""
    n = len(sizes)
    stamps = pa.array([(1_700_000_000_000 + i // 500) * 1000 for i in range(n)], pa.int64())
    return (
        _table(n)
        .set_column(1, "offset", pa.array(range(n), pa.int64()))
        .set_column(2, "timestamp", stamps.cast(pa.timestamp("us", tz="UTC")))
        .set_column(5, "value", pa.array([bytes([i % 251]) * size for i, size in enumerate(sizes)], pa.binary()))
        .set_column(4, "key", pa.nulls(n, pa.binary()))
        .set_column(6, "headers", pa.array([[]] * n, HEADERS_TYPE))
    )


@pytest.mark.parametrize(
    "sizes",
    [
        [100] * 3000,
        [100] * 40 + [7] + [100] * 2000 + [300],
        [i % 3 for i in range(500)],
        [5] * 3 + [300] * 17 + [5] * 100 + [i % 200 for i in range(300)] + [64] * 50,
        [100],
    ],
    ids=["one-size", "a-run-broken", "no-runs", "runs-and-not", "one-record"],
)
def test_records_of_one_size_and_of_varied_sizes_decode_alike(sizes: list[int]) -> None:
    """Runs of equal-size records are found in bulk, other records one by one: both read the same records."""
    table = _values_of(sizes)
    [decoded] = decode_batches(encode_batch(table))
    assert decoded.values.to_pylist() == table["value"].to_pylist()
    assert decoded.keys.null_count == len(sizes)
    assert decoded.sizes.tolist() == [len(r) for r in _record_bodies(encode_batch(table))]


def _record_bodies(data: bytes) -> list[bytes]:
    """Each record's bytes after its length prefix, walked one by one (the reference)."""
    out, pos = [], BATCH_HEADER_SIZE
    while pos < len(data):
        shift = value = 0
        while True:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        length = (value >> 1) ^ -(value & 1)
        out.append(data[pos : pos + length])
        pos += length
    return out


def _recount(data: bytes, count: int) -> bytes:
    """The batch declaring ``count`` records, its CRC made right again (so only the count is wrong)."""
    out = bytearray(data)
    struct.pack_into(">i", out, 57, count)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def test_a_run_of_one_size_checks_the_declared_count() -> None:
    data = encode_batch(_values_of([100] * 500))
    with pytest.raises(CorruptMessageError, match="declares 501 records and holds 500"):
        decode_batches(_recount(data, 501))
    with pytest.raises(CorruptMessageError, match="bytes after its 499 records"):
        decode_batches(_recount(data, 499))


def test_a_key_length_past_the_batch_is_corrupt_message() -> None:
    """A length that points past the records (the batch's CRC made right: a producer's own bytes) is refused."""
    table = _values_of([3]).set_column(4, "key", pa.array([b"k"], pa.binary()))
    data = bytearray(encode_batch(table))
    at = data.index(b"\x02k", BATCH_HEADER_SIZE)  # the key's length (1, zigzag 2), then the key
    data[at] = 0x7E  # 63 bytes of key in a record of a dozen
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    with pytest.raises(CorruptMessageError, match="run past its declared length"):
        decode_batches(bytes(data))
