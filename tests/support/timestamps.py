"""Record batches stamped at will, up to a timestamp a Delta TIMESTAMP's statistics cannot hold."""

from __future__ import annotations

import pyarrow as pa

from logstore.log.schema import INPUT_SCHEMA, MAX_TIMESTAMP_MS

YEAR_10000_MS = MAX_TIMESTAMP_MS + 1  # 253402300800000, below the old 2^63/1000 limit


def records(values: list[str], timestamp_ms: int | None = None) -> pa.Table:
    """An input batch of ``values`` on partition 0, without keys or headers, every record stamped ``timestamp_ms``."""
    n = len(values)
    ts = pa.array([None if timestamp_ms is None else timestamp_ms * 1000] * n, pa.int64())
    return pa.Table.from_arrays(
        [
            pa.array([0] * n, pa.int32()),
            ts.cast(pa.timestamp("us", tz="UTC")),
            pa.nulls(n, pa.binary()),
            pa.array([v.encode() for v in values], pa.binary()),
            pa.nulls(n, INPUT_SCHEMA.field("headers").type),
        ],
        schema=INPUT_SCHEMA,
    )
