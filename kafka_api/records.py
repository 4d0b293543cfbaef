"""Kafka's record batch v2 ⇄ Arrow columns, whole batches at a time.

Produce: :func:`decode_batches` checks each batch's CRC-32C, decompresses it
(gzip, snappy — raw or Java's framed form —, lz4 frame, zstd) and reads its
records into Arrow arrays. Only finding where each record starts walks the
records one by one (each starts where the previous one's length says); every
field inside them — attributes, timestamp and offset deltas, key and value
lengths, the bytes themselves — is then read for all records at once with
numpy gathers. Headers are read per record, and only for records that have
them.

Fetch: :func:`encode_batch` builds one uncompressed batch from a slice of a
topic table: each field of every record is an Arrow binary column (varints
encoded with numpy), joined element-wise into records by one Arrow kernel,
so no Python runs per record unless records carry headers.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct

import cramjam
import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import CorruptMessageError, InvalidRequestError, RecordListTooLargeError
from logstore.log.schema import HEADERS_TYPE
from logstore.wire.json_produce import ParsedRecords

__all__ = ["BATCH_HEADER_SIZE", "DecodedBatch", "decode_batches", "encode_batch", "encode_batches", "engine_records"]

BATCH_HEADER_SIZE = 61
"""Bytes of a v2 batch before its records (base offset … record count)."""

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_FROM = 21
"""The CRC covers the batch from its attributes (byte 21) to its end."""
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_COMPRESSION = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


@dataclasses.dataclass(frozen=True)
class DecodedBatch:
    """One record batch of a produce request, its records as Arrow arrays."""

    producer_id: int
    """Kafka's producer id; -1 = not idempotent."""
    producer_epoch: int
    base_sequence: int
    """Sequence of the batch's first record; -1 = not idempotent."""
    transactional: bool
    control: bool
    keys: pa.Array
    """binary, null = no key."""
    values: pa.Array
    """binary, null = tombstone."""
    headers: pa.Array
    """:data:`~logstore.log.schema.HEADERS_TYPE`."""
    timestamps: pa.Array
    """timestamp[us, UTC]: the batch's base timestamp plus each record's delta (ms → µs)."""
    sizes: np.ndarray
    """Bytes of each record as encoded (its length prefix excluded)."""

    def __len__(self) -> int:
        return len(self.values)


def decode_batches(data: bytes) -> list[DecodedBatch]:
    """Every record batch in a produce request's ``records`` field.

    Raises:
        CorruptMessageError: a batch's CRC does not match, or it is truncated or malformed
            (nothing of the partition's data should be written).
        InvalidRequestError: a magic other than 2 (message formats v0/v1 are not accepted).
    """
    out = []
    pos = 0
    view = memoryview(data)
    while pos < len(data):
        if len(data) - pos < BATCH_HEADER_SIZE:
            raise CorruptMessageError(f"a record batch is truncated: {len(data) - pos} bytes left of its header")
        (_, length, _, magic, crc, attributes, _, base_ts, _, pid, epoch, base_seq, count) = _HEADER.unpack_from(
            data, pos
        )
        end = pos + 12 + length
        if magic != 2:
            raise InvalidRequestError(f"record batch magic {magic}: only message format v2 (magic 2) is accepted")
        if length < BATCH_HEADER_SIZE - 12 or end > len(data):
            raise CorruptMessageError(f"a record batch declares {length} bytes, {len(data) - pos - 12} arrived")
        if crc32c.crc32c(view[pos + _CRC_FROM : end]) != crc:
            raise CorruptMessageError("a record batch's CRC-32C does not match its bytes: it was corrupted in transit")
        body = _decompress(attributes & 0x7, bytes(view[pos + BATCH_HEADER_SIZE : end]))
        out.append(_decode_records(body, count, base_ts, pid, epoch, base_seq, attributes))
        pos = end
    return out


def _decompress(codec: int, body: bytes) -> bytes:
    try:
        if codec == 0:
            return body
        if codec == 1:
            return bytes(cramjam.gzip.decompress(body))
        if codec == 2:
            return _snappy(body)
        if codec == 3:
            return bytes(cramjam.lz4.decompress(body))
        if codec == 4:
            return bytes(cramjam.zstd.decompress(body))
    except (cramjam.DecompressionError, ValueError) as e:
        raise CorruptMessageError(f"a {_COMPRESSION[codec]} record batch does not decompress: {e}") from None
    raise CorruptMessageError(f"unknown compression codec {codec} in a record batch's attributes")


def _snappy(body: bytes) -> bytes:
    """Snappy as librdkafka sends it (one raw block) or as the Java client does (xerial's framing)."""
    if not body.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(body))
    pos, parts = 16, []  # magic, version and compatible version
    while pos < len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        parts.append(bytes(cramjam.snappy.decompress_raw(body[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    return b"".join(parts)


def _decode_records(
    body: bytes, count: int, base_ts: int, pid: int, epoch: int, base_seq: int, attributes: int
) -> DecodedBatch:
    buf = np.frombuffer(body, np.uint8)
    if count < 0:
        raise CorruptMessageError(f"a record batch declares {count} records")
    starts = _record_starts(body, buf, count)
    padded = np.concatenate([buf, np.zeros(_PAD, np.uint8)])  # varint gathers may read past the end
    p = starts
    sizes, p = _varints(padded, p)
    ends = p + sizes
    p = p + 1  # record attributes (unused)
    ts_delta, p = _varints(padded, p)
    _, p = _varints(padded, p)  # offset delta: records are kept in batch order
    key_len, p = _varints(padded, p)
    key_at = p
    p = p + np.maximum(key_len, 0)
    value_len, p = _varints(padded, p)
    value_at = p
    p = p + np.maximum(value_len, 0)
    header_count, p = _varints(padded, p)
    if np.any(p > ends) or np.any(key_len < -1) or np.any(value_len < -1) or np.any(header_count < 0):
        raise CorruptMessageError("a record's fields run past its declared length")
    keys = _binary(body, key_at, key_len)
    values = _binary(body, value_at, value_len)
    headers = _headers(body, p, header_count)
    timestamps = pa.array((base_ts + ts_delta) * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return DecodedBatch(
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=base_seq,
        transactional=bool(attributes & 0x10),
        control=bool(attributes & 0x20),
        keys=keys,
        values=values,
        headers=headers,
        timestamps=timestamps,
        sizes=sizes,
    )


_PAD = 10
"""Zero bytes after a batch's records for the varint reads: the longest varint's bytes."""
_RUN_PROBE = 16
"""Records checked at once for a run of equal-size records before the rest of the batch is."""


def _record_starts(body: bytes, buf: np.ndarray, count: int) -> np.ndarray:
    """Where each of ``count`` records starts in ``body`` (``buf``: its bytes), which they must fill exactly.

    Each record starts where the previous one's length prefix says, so
    finding them is a walk; it goes a run at a time. After one record's
    length is read, the records that follow at the same stride (the same
    length prefix, byte for byte, at each multiple of it) are found in one
    vector step: records of one size — a producer's fixed-size values —
    cost one step for the whole batch. Where no run follows, the next
    records are walked one by one, over twice as many after each miss, so a
    batch of varied sizes tries a run a few times only.

    Raises:
        CorruptMessageError: fewer records than ``count``, a length past the end, or bytes left over.
    """
    starts = np.empty(count, np.int64)
    n = len(body)
    pos = i = 0
    single = 0
    """Records left to walk one by one before trying a run again."""
    misses = 0
    while i < count:
        if pos >= n:
            raise CorruptMessageError(f"a record batch declares {count} records and holds {i}")
        length, after = _varint(body, pos, "a record's length")
        if length < 0 or after + length > n:
            raise CorruptMessageError(f"a record declares {length} bytes past the batch's end")
        stride = after + length - pos
        if single:
            starts[i] = pos
            i += 1
            pos += stride
            single -= 1
            continue
        run = _run(buf, pos, after - pos, stride, min(count - i, (n - pos) // stride))
        starts[i : i + run] = np.arange(pos, pos + run * stride, stride)
        i += run
        pos += run * stride
        if run < _RUN_PROBE:  # too short to pay for the step: walk on one by one for a while
            misses += 1
            single = min(_RUN_PROBE << misses, count)
        else:
            misses = 0
    if pos != n:
        raise CorruptMessageError(f"a record batch holds {n - pos} bytes after its {count} records")
    return starts


def _run(buf: np.ndarray, pos: int, width: int, stride: int, most: int) -> int:
    """How many records from ``pos`` on (at most ``most``, each inside the batch) start with the same
    ``width``-byte length prefix at multiples of ``stride``: a run of records of one size, the first included."""
    prefix = buf[pos : pos + width]
    checked = 0
    for limit in (min(most, _RUN_PROBE), most):
        rows = buf[pos + checked * stride : pos + limit * stride].reshape(limit - checked, stride)[:, :width]
        differ = np.flatnonzero((rows != prefix).any(axis=1))
        if len(differ):
            return checked + int(differ[0])
        checked = limit
    return checked


def _varints(padded: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints starting at ``at`` (all at once): their values and the positions after them.

    Each further byte is read only for the varints that still go on, so a
    field of one-byte varints costs one gather. ``padded`` is the records'
    bytes and :data:`_PAD` zeros, so a varint that starts inside them can
    be read without a bounds check per byte.

    Raises:
        CorruptMessageError: a varint starts outside the records (a length before it pointed past them).
    """
    if len(at) and (int(at.min()) < 0 or int(at.max()) >= len(padded) - _PAD):
        raise CorruptMessageError("a record's fields run past its declared length")
    byte = padded[at]
    value = (byte & 0x7F).astype(np.uint64)
    width = np.ones(len(at), np.int64)
    going = np.flatnonzero(byte >= 0x80)
    for k in range(1, _PAD):
        if not len(going):
            break
        byte = padded[at[going] + k]
        value[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        width[going] += 1
        going = going[byte >= 0x80]
    signed = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return signed, at + width


def _binary(body: bytes, at: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Binary array of ``body[at[i] : at[i] + lengths[i]]``; a length of -1 is null.

    The slices lie apart in ``body`` (other fields between them), so they
    and the gaps between them are one binary array over ``body`` without a
    copy — slice, gap, slice, gap… — and Arrow's ``take`` of every other
    element copies the slices out in one C++ pass.
    """
    n = len(at)
    valid = lengths >= 0
    ends = at + np.where(valid, lengths, 0)
    if n and int(ends[-1]) >= 2**31:
        raise RecordListTooLargeError(f"a record batch of {len(body)} bytes: more than 2 GiB")
    bounds = np.empty(2 * n + 1, np.int32)
    bounds[0 : 2 * n : 2] = at
    bounds[1 : 2 * n : 2] = ends
    bounds[2 * n] = ends[-1] if n else 0
    spans = pa.BinaryArray.from_buffers(pa.binary(), 2 * n, [None, pa.py_buffer(bounds), pa.py_buffer(body)])
    taken = spans.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
    if valid.all():
        return taken
    mask = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.BinaryArray.from_buffers(pa.binary(), n, [mask, *taken.buffers()[1:]])


def _headers(body: bytes, at: np.ndarray, counts: np.ndarray) -> pa.Array:
    """The records' headers; Python runs only for records that have any."""
    if not counts.any():  # every record's headers an empty list, built without a Python list per record
        offsets = pa.array(np.zeros(len(counts) + 1, np.int32))
        return pa.ListArray.from_arrays(offsets, pa.array([], HEADERS_TYPE.value_type), type=HEADERS_TYPE)
    out: list[list[dict[str, str | bytes | None]]] = []
    for pos, count in zip(at.tolist(), counts.tolist(), strict=True):
        items: list[dict[str, str | bytes | None]] = []
        for _ in range(count):
            klen, pos = _varint(body, pos)
            if klen < 0:
                raise CorruptMessageError("a record header has a null key")
            try:
                key = body[pos : pos + klen].decode()
            except UnicodeDecodeError:
                raise CorruptMessageError("a record header's key is not UTF-8") from None
            pos += klen
            vlen, pos = _varint(body, pos)
            value = None if vlen < 0 else body[pos : pos + vlen]
            pos += max(vlen, 0)
            items.append({"key": key, "value": value})
        out.append(items)
    return pa.array(out, HEADERS_TYPE)


def _varint(data: bytes, pos: int, what: str = "a varint") -> tuple[int, int]:
    """The zigzag varint at ``pos`` (``what`` it is, for the error) and where the next field starts."""
    shift = value = 0
    n = len(data)
    while True:
        if pos >= n:
            raise CorruptMessageError(f"{what} runs past the end of its record batch")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


# -- fetch -------------------------------------------------------------------------


def _varint_column(values: np.ndarray) -> pa.Array:
    """Zigzag varints of ``values`` as a binary array, one element each (encoded with numpy).

    Only as many byte positions as the widest varint needs are computed
    (deltas and lengths mostly take one to three), and when every varint
    has the same width their bytes are the rows as they stand.
    """
    v = values.astype(np.int64)
    z = ((v << 1) ^ (v >> 63)).astype(np.uint64)
    width = np.ones(len(z), np.int64)
    for k in range(1, 10):
        longer = z >= np.uint64(1 << (7 * k))
        if not longer.any():
            break
        width += longer
    top = int(width.max()) if len(z) else 1
    rows = np.empty((len(z), top), np.uint8)
    for k in range(top):
        byte = ((z >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        rows[:, k] = np.where(width > k + 1, byte | np.uint8(0x80), byte) if k + 1 < top else byte
    same = not len(z) or int(width.min()) == top
    data = rows.tobytes() if same else rows[np.arange(top)[None, :] < width[:, None]].tobytes()
    offsets = np.zeros(len(z) + 1, np.int32)
    np.cumsum(width, out=offsets[1:])
    return pa.BinaryArray.from_buffers(pa.binary(), len(z), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _headers_column(headers: pa.Array) -> pa.Array:
    """Each record's encoded header count and headers, as a binary array."""
    counts = pc.fill_null(pc.list_value_length(headers), 0).to_numpy(zero_copy_only=False)
    if not counts.any():
        return pa.repeat(pa.scalar(b"\x00", pa.binary()), len(counts))
    out = []
    for items in headers.to_pylist():
        items = items or []
        parts = [_zigzag(len(items))]
        for h in items:
            key = h["key"].encode()
            parts += [_zigzag(len(key)), key]
            value = h["value"]
            parts += [_zigzag(-1)] if value is None else [_zigzag(len(value)), value]
        out.append(b"".join(parts))
    return pa.array(out, pa.binary())


def _zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def encode_batch(records: pa.Table, leader_epoch: int = 0) -> bytes:
    """One uncompressed v2 batch of ``records`` (topic-table columns, one partition, offsets ascending).

    Offset deltas are taken from the records' own offsets (a compacted slice
    keeps its gaps, as Kafka's compacted batches do). Timestamps are each
    record's own, the batch's type CreateTime or LogAppendTime as its first
    record's ``timestamp_type``.
    """
    n = records.num_rows
    offsets = records["offset"].to_numpy()
    base_offset = int(offsets[0])
    ts_ms = pc.divide(records["timestamp"].cast(pa.int64()), 1000).to_numpy()
    base_ts = int(ts_ms.min())
    keys = records["key"].combine_chunks() if isinstance(records["key"], pa.ChunkedArray) else records["key"]
    values = records["value"].combine_chunks() if isinstance(records["value"], pa.ChunkedArray) else records["value"]
    headers = records["headers"].combine_chunks()
    key_len = np.where(
        pc.is_valid(keys).to_numpy(zero_copy_only=False),
        pc.fill_null(pc.binary_length(keys), 0).to_numpy(zero_copy_only=False),
        -1,
    )
    value_len = np.where(
        pc.is_valid(values).to_numpy(zero_copy_only=False),
        pc.fill_null(pc.binary_length(values), 0).to_numpy(zero_copy_only=False),
        -1,
    )
    empty = pa.scalar(b"", pa.binary())
    fields = [
        pa.repeat(pa.scalar(b"\x00", pa.binary()), n),  # record attributes
        _varint_column(ts_ms - base_ts),
        _varint_column(offsets - base_offset),
        _varint_column(key_len),
        pc.fill_null(keys.cast(pa.binary()), empty),
        _varint_column(value_len),
        pc.fill_null(values.cast(pa.binary()), empty),
        _headers_column(headers),
    ]
    # Each record's length is its fields' lengths summed, so records are joined with their length prefix in one pass.
    lengths = np.zeros(n, np.int64)
    for f in fields:
        lengths += pc.binary_length(f).to_numpy(zero_copy_only=False)
    framed = pc.binary_join_element_wise(_varint_column(lengths), *fields, empty)
    _, ends, data = framed.buffers()
    bounds = np.frombuffer(ends, np.int32)
    payload = memoryview(data)[int(bounds[framed.offset]) : int(bounds[framed.offset + n])]
    log_append = int(records["timestamp_type"][0].as_py()) == 1
    attributes = 0x08 if log_append else 0
    tail = struct.pack(
        ">hiqqqhii",
        attributes,
        int(offsets[-1]) - base_offset,
        base_ts,
        int(ts_ms.max()),
        -1,
        -1,
        -1,
        n,
    )
    crc = crc32c.crc32c(payload, crc32c.crc32c(tail))
    length = 4 + 1 + 4 + len(tail) + len(payload)
    return b"".join((struct.pack(">qiibI", base_offset, length, leader_epoch, 2, crc), tail, payload))


def encode_batches(records: pa.Table) -> bytes:
    """``records`` as uncompressed v2 batches, a new batch wherever one batch could not say their timestamps.

    A batch has one timestamp type, and a LogAppendTime batch one timestamp
    (its max timestamp: Kafka's clients give it to every record of the
    batch). So a run of CreateTime records is one batch, and LogAppendTime
    records are one batch per commit time.
    """
    n = records.num_rows
    kinds = records["timestamp_type"].to_numpy()
    stamps = records["timestamp"].cast(pa.int64()).to_numpy()
    appended = kinds == 1
    cut = np.flatnonzero((kinds[1:] != kinds[:-1]) | (appended[1:] & (stamps[1:] != stamps[:-1]))) + 1
    bounds = [0, *cut.tolist(), n]
    return b"".join(encode_batch(records.slice(a, b - a)) for a, b in itertools.pairwise(bounds))


def engine_records(
    batches: list[DecodedBatch], partition: int, producer_id: str | None = None, sequence: int | None = None
) -> ParsedRecords:
    """One partition's decoded batches as one engine request (the records of every batch, in order)."""
    return ParsedRecords(
        keys=pa.concat_arrays([b.keys for b in batches]),
        values=pa.concat_arrays([b.values for b in batches]),
        headers=pa.concat_arrays([b.headers for b in batches]),
        timestamps=pa.concat_arrays([b.timestamps for b in batches]),
        partitions=[partition] * sum(len(b) for b in batches),
        producer_id=producer_id,
        sequence=sequence,
    )
