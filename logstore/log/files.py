"""A topic table's data files as the Delta log describes them: the one data-file model of logstore.

The core's reader and writer, ``maintenance`` and ``spark_source`` all plan from
this: :func:`data_files` reads only the Delta log (add actions and their
statistics); :func:`file_stats` builds the statistics every data file logstore
writes carries, so both engines can prune by offset and timestamp. Runs
wherever the table directory is reachable (driver, Spark executor, server).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from logstore.storage import is_object_store, join, storage_for

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = [
    "DataFile",
    "data_files",
    "file_stats",
    "offset_range",
    "offsets_sorted",
    "parquet_file",
    "read_parquet",
    "table_path",
]


@dataclass(frozen=True)
class DataFile:
    """One live data file of a partition, with the offset range its statistics give."""

    path: str
    """Absolute local path, or ``s3://`` URI."""
    partition: int
    min_offset: int
    max_offset: int
    num_records: int
    size_bytes: int
    modification_time_ms: int
    """When the file was written, ms since the epoch (the add action's ``modificationTime``)."""
    log_path: str
    """The path exactly as the add action spells it (relative, URL-encoded); a remove action must match it."""
    max_timestamp_ms: int | None
    """Newest record timestamp in ms (statistics keep ms), or None without a timestamp statistic."""


def table_path(table: DeltaTable) -> str:
    """The table's root as a local path, or its URI on an object store (without a trailing slash)."""
    uri = table.table_uri
    return uri[len("file://") :] if uri.startswith("file://") else uri.rstrip("/")


def data_files(table: DeltaTable) -> list[DataFile]:
    """The table's live data files, ordered by (partition, min offset); empty files are left out.

    Reads only the Delta log (add actions and their statistics). A file without
    offset statistics (written by an engine that skipped them) has its offset
    column read once, from that file alone. Offset ranges of one partition's
    files may overlap (Delta's ``OPTIMIZE`` bins files by size). A reader that
    plans after every commit follows the log with :mod:`logstore.log._tail`
    instead, which turns only the new add actions into files.
    """
    # Through the Arrow C stream, not pa.table(): pa.table() first asks whether its argument is a
    # pandas DataFrame, which imports pandas (~0.4 s) in every process that plans, e.g. the Python
    # process Spark starts for each streaming query of the logstore source.
    actions = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()
    if actions.num_rows == 0:
        return []
    out: list[DataFile] = []
    root = table_path(table)
    n = actions.num_rows

    def col(name: str) -> list[object]:
        return actions[name].to_pylist() if name in actions.column_names else [None] * n

    for log_path, part, lo, hi, num, size, mtime, ts in zip(
        col("path"),
        col("partition.partition"),
        col("min.offset"),
        col("max.offset"),
        col("num_records"),
        col("size_bytes"),
        col("modification_time"),
        _epoch_ms(actions["max.timestamp"]) if "max.timestamp" in actions.column_names else [None] * n,
        strict=True,
    ):
        assert isinstance(log_path, str)
        full = join(root, unquote(log_path))
        if lo is None or hi is None or num is None:
            lo, hi, num = offset_range(full)
        if num == 0:
            continue
        out.append(
            DataFile(
                path=full,
                partition=int(part),
                min_offset=int(lo),
                max_offset=int(hi),
                num_records=int(num),
                size_bytes=int(size),
                modification_time_ms=int(mtime),
                log_path=log_path,
                max_timestamp_ms=ts,
            )
        )
    out.sort(key=lambda f: (f.partition, f.min_offset))
    return out


def _epoch_ms(column: pa.ChunkedArray) -> list[int | None]:
    """A timestamp column as ms since the epoch (floored), None where null.

    As integers, not ``datetime``: converting timestamps to Python objects imports pandas.
    """
    if not pa.types.is_timestamp(column.type):  # no timestamp statistics in any file (a null column)
        return [None] * len(column)
    per_ms = {"s": 0, "ms": 1, "us": 1_000, "ns": 1_000_000}[column.type.unit]
    raw = column.cast(pa.int64()).to_pylist()
    if per_ms == 0:
        return [None if v is None else v * 1000 for v in raw]
    return [None if v is None else v // per_ms for v in raw]


def offset_range(path: str) -> tuple[int, int, int]:
    """(min offset, max offset, record count) of one data file, read from its ``offset`` column; (0, -1, 0) if empty."""
    column = read_parquet(path, columns=["offset"])["offset"]
    if len(column) == 0:
        return 0, -1, 0
    mm = pc.min_max(column)
    return mm["min"].as_py(), mm["max"].as_py(), len(column)


def read_parquet(path: str, **kwargs: Any) -> pa.Table:
    """``pyarrow.parquet.read_table`` of one data file, local or on an object store (pyarrow's own file system)."""
    import pyarrow.parquet as pq

    fs, where = storage_for(path).arrow(path)
    return pq.read_table(where, filesystem=fs, **kwargs)


def parquet_file(path: str, **kwargs: Any) -> pq.ParquetFile:
    """``pyarrow.parquet.ParquetFile`` of one data file, local or on an object store."""
    import pyarrow.parquet as pq

    if not is_object_store(path):
        return pq.ParquetFile(path, **kwargs)
    fs, where = storage_for(path).arrow(path)
    return pq.ParquetFile(fs.open_input_file(where), **kwargs)


def offsets_sorted(offsets: pa.Array | pa.ChunkedArray) -> bool:
    """Whether ``offsets`` never decrease (a data file's rows, a fetch's records); true for 0 or 1 value."""
    arr = offsets.combine_chunks() if isinstance(offsets, pa.ChunkedArray) else offsets
    return len(arr) < 2 or not pc.any(pc.less(arr[1:], arr[:-1])).as_py()


def file_stats(data: pa.Table) -> str:
    """The Delta ``stats`` JSON of a topic data file (its columns, without ``partition``).

    ``numRecords``; min/max of ``offset``, ``timestamp`` (ISO-8601, ms — the
    maximum rounded up so it is never below a record's timestamp) and
    ``timestamp_type``; null counts. Both engines prune with these.
    """
    ts = _min_max(data["timestamp"])
    tt = _min_max(data["timestamp_type"])
    off = _min_max(data["offset"])
    stats = {
        "numRecords": len(data),
        "minValues": {
            "offset": off[0],
            "timestamp": _iso_ms(ts[0]),
            "timestamp_type": tt[0],
        },
        "maxValues": {
            "offset": off[1],
            "timestamp": _iso_ms(ts[1], ceil=True),
            "timestamp_type": tt[1],
        },
        "nullCount": {
            "offset": 0,
            "timestamp": 0,
            "timestamp_type": 0,
            "key": data["key"].null_count,
            "value": data["value"].null_count,
        },
    }
    return json.dumps(stats)


def _min_max(column: pa.ChunkedArray | pa.Array) -> tuple[int, int]:
    """The smallest and largest value of a non-null integer or timestamp column (timestamps in µs), with NumPy
    over the column's own buffer: a commit computes these for every file it writes, on the committer."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.int64())
    values = arr.to_numpy(zero_copy_only=False)
    return int(values.min()), int(values.max())


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _iso_ms(us: int, *, ceil: bool = False) -> str:
    """``us`` (µs since the epoch) as Delta's ISO-8601 statistics, in ms (rounded up with ``ceil``)."""
    if ceil and us % 1000:
        us += 1000 - us % 1000
    ts = _EPOCH + dt.timedelta(microseconds=us)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"
