"""Reading a partition's records: fetch a slice by offset, pruned by file statistics.

A reader sees one Delta version at a time — never beyond the high watermark
of that version — and reads only the data files whose ``[min, max]`` offset
statistics overlap the requested slice, and within them only row groups with
offsets at or above the start (Parquet statistics).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from logstore import _delta
from logstore.catalog import Catalog, high_watermark
from logstore.errors import KafkaStorageError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from logstore.schema import TOPIC_SCHEMA
from logstore.structs import FetchResult

__all__ = ["PartitionView", "TopicReader", "offset_for_timestamp", "read_files"]


@dataclass(frozen=True)
class PartitionView:
    """A partition's files and bounds at one table version."""

    partition: int
    files: tuple[_delta.DataFile, ...]
    log_start_offset: int
    high_watermark: int


class TopicReader:
    """Reads one topic. Keeps its table handle warm; refreshes it per fetch.

    Not thread-safe; cheap to build (one per thread or request handler).
    """

    def __init__(self, catalog: Catalog, topic: str) -> None:
        self.topic = topic
        self._catalog = catalog
        self._dt: DeltaTable = catalog.table(topic)
        self._views: dict[int, PartitionView] = {}
        self._view_version = -1
        self._num_partitions = 0

    @property
    def table(self) -> DeltaTable:
        """The topic's table handle, at the version last loaded."""
        return self._dt

    def refresh(self) -> int:
        """Load the newest table version; returns it."""
        try:
            _delta.refresh(self._dt)
        except (DeltaError, OSError) as e:
            raise KafkaStorageError(f"cannot read topic '{self.topic}': {e}") from e
        return self._dt.version()

    def partition_view(self, partition: int) -> PartitionView:
        """Files, log start offset and HW of ``partition`` at the loaded version.

        Raises:
            UnknownTopicOrPartitionError: the partition does not exist.
        """
        version = self._dt.version()
        if version != self._view_version:
            count, _ = self._catalog.topic_config(self.topic, self._dt)
            files = _delta.data_files(self._dt)
            views = {}
            for p in range(count):
                mine = tuple(f for f in files if f.partition == p)
                hw = high_watermark(self._dt, p, list(mine))
                views[p] = PartitionView(p, mine, mine[0].min_offset if mine else hw, hw)
            self._views, self._view_version, self._num_partitions = views, version, count
        view = self._views.get(partition)
        if view is None:
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic '{self.topic}' does not exist "
                f"(partitions: 0..{self._num_partitions - 1})"
            )
        return view

    def fetch(
        self,
        partition: int,
        offset: int,
        *,
        max_records: int = 500,
        max_bytes: int = 1024 * 1024,
        refresh: bool = True,
    ) -> FetchResult:
        """Records of ``partition`` from ``offset`` on, at most ``max_records``.

        ``max_bytes`` bounds the keys and values returned, but the first record
        is always returned whole (as Kafka does), so a consumer never stalls.
        ``offset == high watermark`` returns no records.

        Raises:
            OffsetOutOfRangeError: ``offset`` outside [log start offset, high watermark].
            UnknownTopicOrPartitionError: no such partition.
        """
        if refresh:
            self.refresh()
        view = self.partition_view(partition)
        if not view.log_start_offset <= offset <= view.high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} of topic '{self.topic}' partition {partition} is outside "
                f"[{view.log_start_offset}, {view.high_watermark}]"
            )
        end = min(view.high_watermark, offset + max(0, max_records))
        try:
            records = read_files(view.files, partition, offset, end)
        except FileNotFoundError:
            # The topic was deleted and recreated, or vacuumed past this version: start over once.
            self._dt = self._catalog.table(self.topic)
            self._view_version = -1
            view = self.partition_view(partition)
            if not view.log_start_offset <= offset <= view.high_watermark:
                raise OffsetOutOfRangeError(
                    f"offset {offset} of topic '{self.topic}' partition {partition} is outside "
                    f"[{view.log_start_offset}, {view.high_watermark}]"
                ) from None
            try:
                records = read_files(view.files, partition, min(offset, view.high_watermark), end)
            except FileNotFoundError as e:
                raise KafkaStorageError(f"topic '{self.topic}' partition {partition}: {e}") from e
        if len(records) > 1 and max_bytes > 0:
            sizes = pc.add(
                pc.fill_null(pc.binary_length(records["key"]), 0), pc.fill_null(pc.binary_length(records["value"]), 0)
            )
            cumulative = pc.cumulative_sum(sizes)
            keep = max(1, pc.sum(pc.less_equal(cumulative, max_bytes)).as_py())
            records = records.slice(0, keep)
        return FetchResult(records, view.high_watermark, view.log_start_offset)


def offset_for_timestamp(view: PartitionView, timestamp_ms: int) -> int:
    """The first offset whose timestamp is at or after ``timestamp_ms``; the HW if none is.

    Like Kafka's ``ListOffsets`` by timestamp. Reads the ``offset`` and
    ``timestamp`` columns of the partition's files in offset order, stopping
    at the first file that holds a match.
    """
    threshold = pa.scalar(timestamp_ms * 1000, pa.timestamp("us", tz="UTC"))
    for f in view.files:
        t = pq.read_table(f.path, columns=["offset", "timestamp"], filters=[("timestamp", ">=", threshold)])
        if len(t):
            return int(pc.min(t["offset"]).as_py())
    return view.high_watermark


def read_files(
    files: tuple[_delta.DataFile, ...] | list[_delta.DataFile], partition: int, start: int, end: int
) -> pa.Table:
    """Records of ``partition`` with ``start <= offset < end`` from ``files``, offsets ascending.

    Only files whose offset range overlaps the slice are opened. Runs anywhere
    the files are reachable (a server thread, a Spark executor).
    """
    tables = []
    for f in files:
        if f.partition != partition or f.max_offset < start or f.min_offset >= end:
            continue
        t = pq.read_table(f.path, filters=[("offset", ">=", start), ("offset", "<", end)], schema=_FILE_SCHEMA)
        tables.append(t)
    if not tables:
        return TOPIC_SCHEMA.empty_table()
    data = pa.concat_tables(tables)
    data = data.add_column(0, TOPIC_SCHEMA.field("partition"), pa.repeat(pa.scalar(partition, pa.int32()), len(data)))
    if len(tables) > 1 or _unsorted(data["offset"]):
        data = data.sort_by("offset")
    return data.cast(TOPIC_SCHEMA)


_FILE_SCHEMA = pa.schema([f for f in TOPIC_SCHEMA if f.name != "partition"])


def _unsorted(col: pa.ChunkedArray) -> bool:
    arr = col.combine_chunks()
    return len(arr) > 1 and pc.any(pc.less(arr[1:], arr[:-1])).as_py()
