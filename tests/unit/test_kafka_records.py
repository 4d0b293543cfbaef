"""Kafka record batch v2 ⇄ Arrow (kafka_api.records): every codec, nulls, headers, and the checks on bad batches."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import cramjam
import crc32c
import logstore_native as native
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    """Records of one size and of varied sizes are read alike, each record's size as it was encoded."""
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
    with pytest.raises(CorruptMessageError, match="key of 63 bytes runs past the end of its record"):
        decode_batches(bytes(data))


# -- the compiled codec against a reference written record by record -------------------------------------------


def _zigzag(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    return bytes(out + bytes([z]))


def _field(b: bytes | None) -> bytes:
    return _zigzag(-1) if b is None else _zigzag(len(b)) + b


def _reference_records(table: pa.Table) -> bytes:
    """The records section of a v2 batch of ``table``, as Kafka's ``DefaultRecord.writeTo`` lays it out."""
    rows = table.to_pylist()
    stamps_ms = [t // 1000 for t in table["timestamp"].cast(pa.int64()).to_pylist()]
    base_offset, base_ts = rows[0]["offset"], min(stamps_ms)
    out = b""
    for r, ms in zip(rows, stamps_ms, strict=True):
        body = b"\x00" + _zigzag(ms - base_ts) + _zigzag(r["offset"] - base_offset)
        body += _field(r["key"]) + _field(r["value"]) + _zigzag(len(r["headers"] or []))
        for h in r["headers"] or []:
            body += _field(h["key"].encode()) + _field(h["value"])
        out += _zigzag(len(body)) + body
    return out


_records = st.lists(
    st.fixed_dictionaries(
        {
            "key": st.none() | st.binary(max_size=40),
            "value": st.none() | st.binary(max_size=300),
            "headers": st.lists(
                st.fixed_dictionaries({"key": st.text(max_size=8), "value": st.none() | st.binary(max_size=8)}),
                max_size=3,
            ),
            "gap": st.integers(1, 3),
            "ms": st.integers(0, 2**40),
        }
    ),
    min_size=1,
    max_size=60,
)


def _table_of(records: list[dict[str, Any]]) -> pa.Table:
    offsets = list(itertools.accumulate(r["gap"] for r in records))
    return pa.table(
        {
            "partition": pa.array([0] * len(records), pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array([r["ms"] * 1000 for r in records], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "timestamp_type": pa.array([0] * len(records), pa.int32()),
            "key": pa.array([r["key"] for r in records], pa.binary()),
            "value": pa.array([r["value"] for r in records], pa.binary()),
            "headers": pa.array([r["headers"] for r in records], HEADERS_TYPE),
        },
        schema=TOPIC_SCHEMA,
    )


@settings(max_examples=150, deadline=None)
@given(_records, st.integers(0, 5), st.integers(0, 5))
def test_encoded_records_are_kafkas_bytes_and_decode_back(records: list[dict[str, Any]], cut: int, tail: int) -> None:
    """Byte for byte what Kafka's writer makes, for a slice of a table too (Arrow arrays with an offset), and the
    decoder reads every field back."""
    whole = _table_of(records)
    table = whole.slice(min(cut, len(records) - 1), max(1, len(records) - cut - tail))
    data = encode_batch(table)
    assert data[BATCH_HEADER_SIZE:] == _reference_records(table)
    assert struct.unpack_from(">I", data, 17)[0] == crc32c.crc32c(data[21:])
    [decoded] = decode_batches(data)
    assert decoded.keys.to_pylist() == table["key"].to_pylist()
    assert decoded.values.to_pylist() == table["value"].to_pylist()
    assert decoded.headers.to_pylist() == table["headers"].to_pylist()
    assert decoded.timestamps.to_pylist() == table["timestamp"].to_pylist()
    decoded.headers.validate(full=True)
    decoded.keys.validate(full=True)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_bytes_under_a_right_crc_decode_or_are_corrupt_message(data: st.DataObject) -> None:
    """A producer's own bytes (its CRC right) that are wrong anywhere in the records: decoded whole, or refused
    as CORRUPT_MESSAGE — never another error, never a crash."""
    batch = bytearray(encode_batch(_table_of(data.draw(_records))))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(BATCH_HEADER_SIZE, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del batch[data.draw(st.integers(BATCH_HEADER_SIZE, len(batch) - 1)) :]
        struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    try:
        [decoded] = decode_batches(bytes(batch))
    except CorruptMessageError:
        return
    decoded.keys.validate(full=True)
    decoded.values.validate(full=True)
    decoded.headers.validate(full=True)


def _with_record(body: bytes, count: int = 1) -> bytes:
    """A batch around a hand-made records section, its length, count and CRC right."""
    head = bytearray(encode_batch(_values_of([1]))[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", head, 8, BATCH_HEADER_SIZE - 12 + len(body))
    struct.pack_into(">i", head, 57, count)
    struct.pack_into(">I", head, 17, crc32c.crc32c(bytes(head[21:]) + body))
    return bytes(head) + body


@pytest.mark.parametrize(
    ("record", "error"),
    [
        (b"\x00\x00\x00\x01\x02v\x00" + b"\x00", "take 7 of its declared 8 bytes"),  # Kafka: a record's size is exact
        (b"\x00\x00\x00\x01\x02v\x02\x01\x00", "a record header has a null key"),
        (b"\x00\x00\x00\x01\x02v\x02\x02\xff\x00", "a record header's key is not UTF-8"),
        (b"\x00\x00\x00\x01\x02v\x01", "declares -1 headers"),
        (b"\x00\x00\x00\x03", "key length is -2"),
        (b"\x00\x00\xff\xff\xff\xff\xff\x01", "offset delta is a varint longer than 5 bytes"),
    ],
    ids=["slack", "null-header-key", "header-key-not-utf8", "negative-headers", "key-length", "long-varint"],
)
def test_a_malformed_record_is_corrupt_message_naming_the_field(record: bytes, error: str) -> None:
    with pytest.raises(CorruptMessageError, match=error):
        decode_batches(_with_record(_zigzag(len(record) - (1 if "slack" in error else 0)) + record))


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=40))
def test_the_crc_by_instruction_and_by_table_are_crc32c(head: bytes, tail: bytes) -> None:
    assert native.crc32c(head + tail) == native.crc32c_portable(head + tail) == crc32c.crc32c(head + tail)
    assert native.crc32c(tail, native.crc32c(head)) == crc32c.crc32c(head + tail)


def test_a_table_of_several_chunks_is_a_batch_per_chunk_in_one_answer() -> None:
    """A fetch's records come as several row groups: each is a batch, written together, read back whole."""
    table = _table(30)
    chunked = pa.concat_tables([table.slice(0, 7), table.slice(7, 1), table.slice(8, 22)])
    data = encode_batches(chunked)
    counts, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        counts.append(struct.unpack_from(">i", data, pos + 57)[0])
        assert struct.unpack_from(">I", data, pos + 17)[0] == crc32c.crc32c(data[pos + 21 : pos + 12 + length])
        pos += 12 + length
    assert counts == [7, 1, 22]
    decoded = decode_batches(data)
    assert [v for b in decoded for v in b.values.to_pylist()] == table["value"].to_pylist()
    assert [h for b in decoded for h in b.headers.to_pylist()] == table["headers"].to_pylist()
