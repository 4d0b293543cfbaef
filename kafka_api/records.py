"""Kafka's record batch v2 ⇄ Arrow columns, whole batches at a time.

The records themselves are read and written by the compiled kernels of
``logstore_native`` (``native/src/batch.rs``), one pass over a batch with the
interpreter lock released; this module reads and writes the batches around
them and turns the kernels' buffers into Arrow arrays and back, without a
Python step per record.

Produce: :func:`decode_batches` checks each batch's CRC-32C, decompresses it
(gzip, snappy — raw or Java's framed form —, lz4 frame, zstd) and decodes its
records into Arrow arrays, each record's fields held to its declared length as
Kafka's brokers hold them.

Fetch: :func:`encode_batches` builds uncompressed batches from a slice of a
topic table, straight from its Arrow buffers.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct

import cramjam
import logstore_native as native
import numpy as np
import pyarrow as pa

from logstore.config import CompressionType
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
_COMPRESSION: dict[int, CompressionType] = {0: "uncompressed", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
"""A batch's codec (its attributes' low 3 bits) by Kafka's ``compression.type`` name."""


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
    compression: CompressionType
    """The codec the batch came in (``uncompressed`` … ``zstd``)."""
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
        if native.crc32c(view[pos + _CRC_FROM : end]) != crc:
            raise CorruptMessageError("a record batch's CRC-32C does not match its bytes: it was corrupted in transit")
        body = _decompress(attributes & 0x7, view[pos + BATCH_HEADER_SIZE : end])
        out.append(_decode_records(body, count, base_ts, pid, epoch, base_seq, attributes))
        pos = end
    return out


def _decompress(codec: int, body: memoryview) -> bytes | memoryview:
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


def _snappy(body: memoryview) -> bytes:
    """Snappy as librdkafka sends it (one raw block) or as the Java client does (xerial's framing)."""
    if body[: len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(body))
    pos, parts = 16, []  # magic, version and compatible version
    while pos < len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        parts.append(bytes(cramjam.snappy.decompress_raw(body[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    return b"".join(parts)


def _decode_records(
    body: bytes | memoryview, count: int, base_ts: int, pid: int, epoch: int, base_seq: int, attributes: int
) -> DecodedBatch:
    if count < 0:
        raise CorruptMessageError(f"a record batch declares {count} records")
    try:
        sizes, stamps, keys, values, headers = native.decode_records(body, count, base_ts)
    except native.CorruptRecords as e:
        raise CorruptMessageError(str(e)) from None
    except native.RecordsTooLarge as e:
        raise RecordListTooLargeError(f"a record batch of {len(body)} bytes: {e}") from None
    return DecodedBatch(
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=base_seq,
        transactional=bool(attributes & 0x10),
        control=bool(attributes & 0x20),
        compression=_COMPRESSION[attributes & 0x7],
        keys=_binary_array(pa.binary(), count, keys),
        values=_binary_array(pa.binary(), count, values),
        headers=_headers_array(count, headers),
        timestamps=pa.Array.from_buffers(_TIMESTAMP, count, [None, pa.py_buffer(stamps)]),
        sizes=np.frombuffer(memoryview(sizes), np.int64),
    )


_TIMESTAMP = pa.timestamp("us", tz="UTC")


def _binary_array(type_: pa.DataType, n: int, column: native.Column) -> pa.Array:
    validity, offsets, data, nulls = column
    bitmap = None if validity is None else pa.py_buffer(validity)
    return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def _headers_array(n: int, headers: tuple[native.Buffer, native.Column, native.Column] | None) -> pa.Array:
    """The records' headers as :data:`~logstore.log.schema.HEADERS_TYPE` (every list empty for None)."""
    if headers is None:
        offsets = pa.py_buffer(np.zeros(n + 1, np.int32))
        return pa.ListArray.from_buffers(HEADERS_TYPE, n, [None, offsets], children=[_NO_HEADERS])
    list_offsets, keys, values = headers
    m = len(keys[1]) // 4 - 1  # header entries: one offset each, and the end
    entries = pa.StructArray.from_arrays(
        [_binary_array(pa.string(), m, keys), _binary_array(pa.binary(), m, values)],
        fields=list(HEADERS_TYPE.value_type),
    )
    return pa.ListArray.from_buffers(HEADERS_TYPE, n, [None, pa.py_buffer(list_offsets)], children=[entries])


_NO_HEADERS = pa.array([], HEADERS_TYPE.value_type)


# -- fetch -------------------------------------------------------------------------


def _binary_in(array: pa.Array) -> native.BinaryIn:
    """An Arrow binary or UTF-8 array's buffers, as the kernels take them."""
    validity, offsets, data = array.buffers()[:3]
    return (validity if array.null_count else None, offsets, data, array.offset)


def _headers_in(headers: pa.Array) -> native.HeadersIn | None:
    """The headers column's buffers, as the kernels take them; None when no record has any."""
    if len(headers) == 0 or headers.offsets[-1].as_py() == headers.offsets[0].as_py():
        return None
    entries = headers.values  # the struct array the list's offsets index (its own offset applied)
    return (
        headers.buffers()[0] if headers.null_count else None,
        headers.buffers()[1],
        headers.offset,
        _binary_in(entries.field("key")),
        _binary_in(entries.field("value")),
    )


def _batch(records: pa.RecordBatch, attributes: int) -> native.BatchIn:
    """One Kafka batch of ``records`` (contiguous columns), as the kernel takes it."""
    offsets = records.column("offset")
    stamps = records.column("timestamp").cast(pa.int64())
    return (
        records.num_rows,
        np.ascontiguousarray(offsets.to_numpy()),
        np.ascontiguousarray(stamps.to_numpy()),
        _binary_in(records.column("key")),
        _binary_in(records.column("value")),
        _headers_in(records.column("headers")),
        attributes,
    )


def _timestamp_type(records: pa.RecordBatch) -> int:
    return 0x08 if records.column("timestamp_type")[0].as_py() == 1 else 0


def encode_batch(records: pa.Table, leader_epoch: int = 0) -> bytes:
    """One uncompressed v2 batch of ``records`` (topic-table columns, one partition, offsets ascending).

    Offset deltas are taken from the records' own offsets (a compacted slice
    keeps its gaps, as Kafka's compacted batches do). Timestamps are each
    record's own, the batch's type CreateTime or LogAppendTime as its first
    record's ``timestamp_type``.
    """
    [whole] = records.combine_chunks().to_batches()
    return native.encode_batches([_batch(whole, _timestamp_type(whole))], leader_epoch)


def encode_batches(records: pa.Table) -> bytes:
    """``records`` as uncompressed v2 batches, one after another: a batch per chunk of the table (a row group
    read), cut further wherever one batch could not say their timestamps.

    A batch has one timestamp type, and a LogAppendTime batch one timestamp
    (its max timestamp: Kafka's clients give it to every record of the
    batch). So a run of CreateTime records is one batch, and LogAppendTime
    records are one batch per commit time. The kernel sizes every batch, then
    writes them all into one ``bytes``: the records are copied once.
    """
    batches = []
    for chunk in records.to_batches():
        n = chunk.num_rows
        if not n:
            continue
        kinds = chunk.column("timestamp_type").to_numpy()
        stamps = chunk.column("timestamp").cast(pa.int64()).to_numpy()
        appended = kinds == 1
        cut = np.flatnonzero((kinds[1:] != kinds[:-1]) | (appended[1:] & (stamps[1:] != stamps[:-1]))) + 1
        for a, b in itertools.pairwise([0, *cut.tolist(), n]):
            batches.append(_batch(chunk.slice(a, b - a), 0x08 if appended[a] else 0))
    return native.encode_batches(batches, 0)


def engine_records(
    batches: list[DecodedBatch], partition: int, producer_id: str | None = None, sequence: int | None = None
) -> ParsedRecords:
    """One partition's decoded batches as one engine request (the records of every batch, in order), with their
    codec when every batch came in the same one."""
    codecs = {b.compression for b in batches}

    def joined(column: str) -> pa.Array:
        arrays = [getattr(b, column) for b in batches]
        return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)  # one batch per partition, usually

    return ParsedRecords(
        keys=joined("keys"),
        values=joined("values"),
        headers=joined("headers"),
        timestamps=joined("timestamps"),
        partitions=pa.repeat(pa.scalar(partition, pa.int32()), sum(len(b) for b in batches)),
        producer_id=producer_id,
        sequence=sequence,
        compression=codecs.pop() if len(codecs) == 1 else None,
    )
