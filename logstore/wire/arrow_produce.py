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
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import InvalidRequestError, InvalidTimestampError
from logstore.log.schema import HEADERS_TYPE, MAX_TIMESTAMP_MS
from logstore.wire.arrow_fetch import ARROW_STREAM

__all__ = [
    "ARROW_STREAM",
    "PRODUCER_ID_HEADER",
    "PRODUCE_SCHEMA",
    "SEQUENCE_HEADER",
    "decode_produce",
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


def decode_produce(body: bytes) -> pa.Table:
    """An Arrow produce body as a table of :data:`PRODUCE_SCHEMA` (one chunk per column).

    Raises:
        InvalidRequestError: not an Arrow IPC stream, no records, an unknown or repeated
            column, a column of a type that does not convert, a header without a key.
        InvalidTimestampError: a timestamp before the epoch or after year 9999.
    """
    try:
        table = pa.ipc.open_stream(body).read_all()
    except (pa.ArrowException, OSError) as e:
        raise InvalidRequestError(f"request body is not an Arrow IPC stream: {e}") from None
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
        try:
            column = column.cast(field.type)
        except pa.ArrowException as e:
            raise InvalidRequestError(f"column '{field.name}' cannot be read as {field.type}: {e}") from None
        if field.name == "headers" and pc.list_flatten(column).field("key").null_count:
            raise InvalidRequestError("every header needs a key (column 'headers' has a null key)")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=PRODUCE_SCHEMA)


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
