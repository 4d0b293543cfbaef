"""The topic table's columns, as Arrow types (the Delta schema follows from them).

A topic is one Delta table partitioned by ``partition``. Column meanings:

=================  =====================================  ===========================================
column             Arrow type (Delta type)                meaning
=================  =====================================  ===========================================
``partition``      int32 (INT)                            partition number, 0..N-1
``offset``         int64 (BIGINT)                         position in the partition, gap-free at write
``timestamp``      timestamp[us, UTC] (TIMESTAMP)         CreateTime from the producer or LogAppendTime
``timestamp_type`` int32 (INT)                            0 = CreateTime, 1 = LogAppendTime
``key``            binary, nullable (BINARY)              record key; null = no key
``value``          binary, nullable (BINARY)              record value; null = tombstone
``headers``        list<struct<key, value>> (ARRAY)       record headers, in producer order
=================  =====================================  ===========================================
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = [
    "HEADERS_TYPE",
    "INPUT_SCHEMA",
    "MAX_TIMESTAMP_MS",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TOPIC_SCHEMA",
    "input_table",
    "record_sizes",
]

MAX_TIMESTAMP_MS = 253_402_300_799_999
"""The latest record timestamp, in ms since the epoch: 9999-12-31T23:59:59.999Z.

A Parquet/Delta TIMESTAMP holds microseconds in an int64, and Delta's file
statistics write it as an ISO-8601 date whose year has four digits; a later
timestamp cannot be stored (its statistics cannot be built)."""

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

HEADERS_TYPE = pa.list_(
    pa.field(
        "element",
        pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]),
        nullable=False,
    )
)

TOPIC_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("timestamp_type", pa.int32(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
    ]
)
"""Columns of every topic table, in storage order."""

INPUT_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
    ]
)
"""Records handed to the writer: partitions chosen; a null timestamp means "now".

Offsets and ``timestamp_type`` are the writer's to assign.
"""


def input_table(
    partitions: list[int] | pa.Array,
    values: list[bytes | None] | pa.Array,
    keys: list[bytes | None] | pa.Array | None = None,
    timestamps_ms: list[int | None] | None = None,
    headers: list[list[tuple[str, bytes | None]]] | None = None,
) -> pa.Table:
    """Records in :data:`INPUT_SCHEMA` from Python values (or Arrow arrays).

    ``timestamps_ms`` are milliseconds since the epoch (Kafka's unit); a
    missing timestamp means "stamp at commit".
    """
    n = len(values)
    ts = None
    if timestamps_ms is not None:
        ts = pa.array([None if t is None else t * 1000 for t in timestamps_ms], pa.int64()).cast(
            pa.timestamp("us", tz="UTC")
        )
    hdrs = None
    if headers is not None:
        hdrs = pa.array([[{"key": k, "value": v} for k, v in h] for h in headers], HEADERS_TYPE)
    return pa.Table.from_arrays(
        [
            pa.array(partitions, pa.int32()),
            ts if ts is not None else pa.nulls(n, pa.timestamp("us", tz="UTC")),
            pa.array(keys, pa.binary()) if keys is not None else pa.nulls(n, pa.binary()),
            pa.array(values, pa.binary()),
            hdrs if hdrs is not None else pa.nulls(n, HEADERS_TYPE),
        ],
        schema=INPUT_SCHEMA,
    )


def record_sizes(records: pa.Table) -> pa.Array:
    """Bytes of each record as ``message.max.bytes`` counts them: key + value + headers."""
    import numpy as np
    import pyarrow.compute as pc

    size = _byte_lengths(records["key"]) + _byte_lengths(records["value"])
    headers = (
        records["headers"].combine_chunks() if isinstance(records["headers"], pa.ChunkedArray) else records["headers"]
    )
    if headers.null_count < len(headers):
        flat = pc.list_flatten(headers)
        if len(flat):
            parents = pc.list_parent_indices(headers).to_numpy()
            hk = pc.fill_null(pc.binary_length(pc.struct_field(flat, "key")), 0).to_numpy(zero_copy_only=False)
            hv = pc.fill_null(pc.binary_length(pc.struct_field(flat, "value")), 0).to_numpy(zero_copy_only=False)
            size += np.bincount(parents, weights=hk + hv, minlength=len(size)).astype(np.int64)
    return pa.array(size, pa.int64())


def _byte_lengths(column: pa.Array | pa.ChunkedArray) -> Any:
    """Bytes of each value of a binary or string column, 0 for a null (an int64 NumPy array).

    Read from the offsets when the column has no nulls (or only nulls): a request's
    keys and values, checked on the ingest node's event loop for every produce.
    """
    import numpy as np
    import pyarrow.compute as pc

    arr = column.chunk(0) if isinstance(column, pa.ChunkedArray) and column.num_chunks == 1 else column
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    if arr.null_count == n:
        return np.zeros(n, np.int64)
    if arr.null_count == 0 and arr.type in (pa.binary(), pa.string()):
        return np.diff(np.frombuffer(arr.buffers()[1], np.int32, n + 1, arr.offset * 4)).astype(np.int64)
    return pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
