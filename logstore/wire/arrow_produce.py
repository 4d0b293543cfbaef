"""The Arrow IPC form of a produce request (``POST /v1/topics/{t}/records``).

A client that has Arrow sends ``Content-Type: application/vnd.apache.arrow.stream``
and one Arrow IPC *stream* (not the file format) instead of the JSON body: no
base64, no per-record JSON on either side. Its columns are any of
:data:`PRODUCE_SCHEMA`'s, by name, in any order:

* ``partition`` — an integer type (null: the partitioner chooses, as for a JSON record without one);
* ``timestamp`` — a timestamp of any unit (a zone-less one is UTC), or an integer of ms since the epoch,
  in ``0..MAX_TIMESTAMP_MS`` (null: stamped at commit);
* ``key``, ``value`` — binary or string (null: no key / a tombstone);
* ``headers`` — a list of ``{key: string, value: binary or string}`` (null or empty: none).

A column left out is null for every record. At least one record. The idempotent
producer's id and sequence travel in the ``X-Logstore-Producer-Id`` and
``X-Logstore-Sequence`` request headers (:data:`PRODUCER_ID_HEADER`,
:data:`SEQUENCE_HEADER`), with the JSON body's rules. The answer is the same as
for a JSON body. Nodes of a cluster forward records to their leaders in this
form, with every partition chosen.

The stream's buffers may be compressed (LZ4 frame or ZSTD, Arrow's
``BodyCompression``), so a few KB of body can stand for GBs of records. Before
anything is decompressed, :func:`decoded_size` adds up what decoding the stream
will allocate — from each batch's metadata: its buffers' uncompressed lengths
(the 8-byte prefix of a compressed buffer), or 8 bytes per record when that is
more (a column of type null has no buffer at all; a record costs at least its
8-byte timestamp once decoded) — and :func:`decode_produce` refuses a body
whose decoded form would exceed ``max.request.size`` with 413
``RECORD_LIST_TOO_LARGE``: the records may take no more room decoded than an
uncompressed body could. Encodings that share
bytes between records (dictionary and view types) are measured before they are
cast to plain binary, against the same limit; ``headers`` must be a list of
structs of plain binary or string (no dictionary, view or run-end encoding).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import InvalidRequestError, InvalidTimestampError, RecordListTooLargeError
from logstore.log.schema import HEADERS_TYPE, MAX_TIMESTAMP_MS
from logstore.wire.arrow_fetch import ARROW_STREAM

__all__ = [
    "ARROW_STREAM",
    "PRODUCER_ID_HEADER",
    "PRODUCE_SCHEMA",
    "SEQUENCE_HEADER",
    "decode_produce",
    "decoded_size",
    "encode_produce",
]

PRODUCER_ID_HEADER = "x-logstore-producer-id"
"""Request header of an Arrow produce body: the idempotent producer's id (the JSON body's ``producer_id``)."""
SEQUENCE_HEADER = "x-logstore-sequence"
"""Request header of an Arrow produce body: the request's sequence (the JSON body's ``sequence``)."""

PRODUCE_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
    ]
)
"""The columns of an Arrow produce body, as :func:`decode_produce` returns them."""

_MAX_TIMESTAMP_US = MAX_TIMESTAMP_MS * 1000 + 999


def encode_produce(table: pa.Table) -> bytes:
    """``table`` (any of :data:`PRODUCE_SCHEMA`'s columns) as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def decode_produce(body: bytes, *, max_bytes: int) -> pa.Table:
    """An Arrow produce body as a table of :data:`PRODUCE_SCHEMA` (one chunk per column).

    ``max_bytes`` (the node's ``max.request.size``) bounds the body's decoded size
    (:func:`decoded_size`), checked before any buffer is decompressed.

    Raises:
        RecordListTooLargeError: the body decodes to more than ``max_bytes``.
        InvalidRequestError: not an Arrow IPC stream, no records, an unknown or repeated
            column, a column of a type that does not convert, a header without a key.
        InvalidTimestampError: a timestamp before the epoch or after year 9999.
    """
    size = decoded_size(body)
    if size > max_bytes:
        raise RecordListTooLargeError(
            f"the Arrow body ({len(body)} bytes) decodes to {size} bytes of records, over max.request.size={max_bytes}"
        )
    try:
        table = pa.ipc.open_stream(body).read_all()
        # Every offset, view and dictionary index within its buffers: casting or measuring a column that
        # points outside them reads memory it does not own (a view past its data buffer crashed the node).
        table.validate(full=True)
    except (pa.ArrowException, OSError) as e:
        raise InvalidRequestError(f"request body is not a valid Arrow IPC stream: {e}") from None
    names = table.column_names
    unknown = sorted(set(names) - set(PRODUCE_SCHEMA.names))
    if unknown:
        raise InvalidRequestError(
            f"unknown column(s) in the Arrow produce body: {', '.join(unknown)}; "
            f"columns are {', '.join(PRODUCE_SCHEMA.names)}"
        )
    if len(set(names)) != len(names):
        raise InvalidRequestError("a column of the Arrow produce body appears twice")
    n = table.num_rows
    if n == 0:
        raise InvalidRequestError("the Arrow produce body holds no records")
    columns = []
    for field in PRODUCE_SCHEMA:
        if field.name not in names:
            columns.append(pa.nulls(n, field.type))
            continue
        column = table[field.name].combine_chunks()
        if field.name == "timestamp":
            columns.append(_timestamps(column))
            continue
        _check_expansion(field.name, column, max_bytes)
        try:
            column = column.cast(field.type)
        except pa.ArrowException as e:
            raise InvalidRequestError(f"column '{field.name}' cannot be read as {field.type}: {e}") from None
        if field.name == "headers" and pc.list_flatten(column).field("key").null_count:
            raise InvalidRequestError("every header needs a key (column 'headers' has a null key)")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=PRODUCE_SCHEMA)


def _check_expansion(name: str, column: pa.Array, max_bytes: int) -> None:
    """Refuse a column whose cast to plain binary would take more than ``max_bytes`` (shared bytes repeated).

    Raises:
        RecordListTooLargeError: ``key`` or ``value`` would decode to more than ``max_bytes``.
        InvalidRequestError: ``headers`` in an encoding that shares bytes between records.
    """
    if name == "headers":
        if not _plain_headers(column.type):
            raise InvalidRequestError(
                f"column 'headers' must be a list of structs of binary or string, without dictionary, "
                f"view or run-end encoding; got {column.type}"
            )
        return
    if not _shares_bytes(column.type):
        return
    lengths = _lengths(column)
    size = 0 if lengths is None else int(lengths.sum())
    if size > max_bytes:
        raise RecordListTooLargeError(
            f"column '{name}' of the Arrow body decodes to {size} bytes, over max.request.size={max_bytes}"
        )


def _plain_headers(t: pa.DataType) -> bool:
    """Whether ``t`` is a list of ``{key, value}`` structs whose fields are plain binary or string.

    Only such types cost body bytes for every header (an offset each), so the headers of a body that
    passed :func:`decoded_size` decode within its bound: a null-typed or zero-width field takes no
    bytes at all, and a list of a million of them would decode from a body of a few hundred bytes.
    """
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(t.value_type):
        return False
    fields = {f.name: f.type for f in t.value_type}
    plain = (pa.types.is_binary, pa.types.is_string, pa.types.is_large_binary, pa.types.is_large_string)
    return set(fields) == {"key", "value"} and all(any(is_(ft) for is_ in plain) for ft in fields.values())


def _shares_bytes(t: pa.DataType) -> bool:
    """Whether values of type ``t`` (or of a type inside it) may share bytes, so decoding may repeat them."""
    if (
        pa.types.is_dictionary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_string_view(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
        or pa.types.is_run_end_encoded(t)
    ):
        return True
    return any(_shares_bytes(t.field(i).type) for i in range(t.num_fields))


def _lengths(column: pa.Array) -> np.ndarray | None:
    """Each value's length in bytes once decoded to plain binary (a null's: 0); None when not a byte type."""
    t = column.type
    if pa.types.is_dictionary(t):
        values = _lengths(column.dictionary)
        if values is None:
            return None
        indices = column.indices.fill_null(0).to_numpy(zero_copy_only=False)
        return np.asarray(values[indices], dtype=np.int64)
    if pa.types.is_binary_view(t) or pa.types.is_string_view(t):
        views = np.frombuffer(column.buffers()[1], dtype=np.int32).reshape(-1, 4)
        lengths = views[column.offset : column.offset + len(column), 0].astype(np.int64)
    elif pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        lengths = pc.binary_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        return None
    if column.null_count:
        lengths[~column.is_valid().to_numpy(zero_copy_only=False)] = 0
    return lengths


def _timestamps(column: pa.Array) -> pa.Array:
    """ms integers or timestamps of any unit → timestamp[us, UTC], checked against 0..MAX_TIMESTAMP_MS."""
    try:
        if pa.types.is_integer(column.type):
            ms = column.cast(pa.int64())
            low, high = pc.min_max(ms).values()
            if low.is_valid and (low.as_py() < 0 or high.as_py() > MAX_TIMESTAMP_MS):
                raise InvalidTimestampError(
                    f"timestamps must be in 0..{MAX_TIMESTAMP_MS} ms (year 9999), got {low.as_py()}..{high.as_py()}"
                )
            return pc.multiply(ms, 1000).cast(pa.timestamp("us", tz="UTC"))
        if not pa.types.is_timestamp(column.type):
            raise InvalidRequestError(f"column 'timestamp' must be a timestamp or integer ms, got {column.type}")
        us = column.cast(pa.timestamp("us", tz=column.type.tz)).view(pa.int64())
    except pa.ArrowException as e:
        raise InvalidTimestampError(f"column 'timestamp' cannot be read as UTC microseconds: {e}") from None
    low, high = pc.min_max(us).values()
    if low.is_valid and (low.as_py() < 0 or high.as_py() > _MAX_TIMESTAMP_US):
        raise InvalidTimestampError(f"timestamps must be in 0..{MAX_TIMESTAMP_MS} ms (year 9999)")
    return us.cast(pa.timestamp("us", tz="UTC"))


# The IPC message metadata is a flatbuffer (format/Message.fbs, format/Schema.fbs of Apache Arrow); these
# are the fields read here, by their index in the table.
_MESSAGE_HEADER_TYPE, _MESSAGE_HEADER = 1, 2
_HEADER_DICTIONARY_BATCH, _HEADER_RECORD_BATCH = 2, 3
_DICTIONARY_BATCH_DATA = 1
_BATCH_LENGTH, _BATCH_BUFFERS, _BATCH_COMPRESSION = 0, 2, 3
_RECORD_COST = 8
"""Bytes a record costs at least once decoded (its timestamp alone is 8)."""
_UNCOMPRESSED = -1
"""The length prefix of a buffer of a compressed body that was left uncompressed."""


def decoded_size(body: bytes) -> int:
    """What decoding the Arrow IPC stream ``body`` allocates, read from its messages' metadata alone.

    The larger of: the sum of every buffer's length over its record and dictionary
    batches (a compressed buffer's uncompressed length, its first 8 bytes), and 8
    bytes for each of their records. Nothing is decompressed.

    Raises:
        InvalidRequestError: not an Arrow IPC stream, or a message whose metadata does not read.
    """
    buffers = records = 0
    try:
        reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(body))
        for message in reader:
            if message.type not in ("record batch", "dictionary"):
                continue
            meta = memoryview(message.metadata)
            batch = _record_batch(meta)
            if batch is None:
                continue
            length = _scalar(meta, batch, _BATCH_LENGTH, "<q")
            if length < 0:
                raise InvalidRequestError("a record batch of the Arrow body has a negative length")
            compressed = _field(meta, batch, _BATCH_COMPRESSION) is not None
            records += length
            buffers += _buffers_size(meta, batch, message.body, compressed)
    except (pa.ArrowException, OSError) as e:
        raise InvalidRequestError(f"request body is not an Arrow IPC stream: {e}") from None
    except (struct.error, IndexError):
        raise InvalidRequestError("request body is not an Arrow IPC stream: its metadata does not read") from None
    return max(buffers, _RECORD_COST * records)


def _record_batch(meta: memoryview) -> int | None:
    """The position of the message's RecordBatch table (a dictionary batch's data too), or None."""
    (root,) = struct.unpack_from("<I", meta, 0)
    kind = _scalar(meta, root, _MESSAGE_HEADER_TYPE, "<B")
    header = _table(meta, root, _MESSAGE_HEADER)
    if header is None:
        return None
    if kind == _HEADER_DICTIONARY_BATCH:
        return _table(meta, header, _DICTIONARY_BATCH_DATA)
    return header if kind == _HEADER_RECORD_BATCH else None


def _buffers_size(meta: memoryview, batch: int, body: pa.Buffer | None, compressed: bool) -> int:
    """The decoded bytes of a batch's buffers: as sent, or their uncompressed length when compressed."""
    at = _field(meta, batch, _BATCH_BUFFERS)
    if at is None:
        return 0
    vector = at + struct.unpack_from("<I", meta, at)[0]
    (count,) = struct.unpack_from("<I", meta, vector)
    data = memoryview(body) if body is not None else memoryview(b"")
    total = 0
    for i in range(count):
        offset, length = struct.unpack_from("<qq", meta, vector + 4 + 16 * i)
        if offset < 0 or length < 0 or offset + length > len(data):
            raise InvalidRequestError("a buffer of the Arrow body lies outside its message")
        if compressed and length:
            (uncompressed,) = struct.unpack_from("<q", data, offset)
            if uncompressed != _UNCOMPRESSED and uncompressed < 0:
                raise InvalidRequestError("a compressed buffer of the Arrow body has a negative length")
            total += length - 8 if uncompressed == _UNCOMPRESSED else uncompressed
        else:
            total += length
    return total


def _field(meta: memoryview, table: int, index: int) -> int | None:
    """Where field ``index`` of the flatbuffer table at ``table`` is stored, or None when absent."""
    (back,) = struct.unpack_from("<i", meta, table)
    vtable = table - back
    (vtable_size,) = struct.unpack_from("<H", meta, vtable)
    if 4 + 2 * index >= vtable_size:
        return None
    (at,) = struct.unpack_from("<H", meta, vtable + 4 + 2 * index)
    return table + at if at else None


def _scalar(meta: memoryview, table: int, index: int, fmt: str) -> int:
    at = _field(meta, table, index)
    return 0 if at is None else int(struct.unpack_from(fmt, meta, at)[0])


def _table(meta: memoryview, table: int, index: int) -> int | None:
    at = _field(meta, table, index)
    return None if at is None else at + int(struct.unpack_from("<I", meta, at)[0])
