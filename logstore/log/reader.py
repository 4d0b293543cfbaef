"""Reading a partition's records: fetch a slice by offset, pruned by file statistics.

A reader sees one Delta version at a time — never beyond the high watermark
of that version — and reads only the data files whose ``[min, max]`` offset
statistics overlap the requested slice, and within them only row groups with
offsets at or above the start (Parquet statistics).

Files need not hold disjoint offset ranges one after the other: Delta's
``OPTIMIZE`` bins files by size, so one file may hold offsets [0, 39] while
[10, 19] stays in a file of its own. Whatever plans by files asks
:func:`offset_cuts` / :func:`offset_runs` where it may split a partition.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from logstore.common.lru import LruDict
from logstore.errors import KafkaStorageError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from logstore.log import _delta
from logstore.log._tail import LogTail
from logstore.log.catalog import Catalog, high_watermark, log_start_offset, partition_count_in
from logstore.log.files import offsets_sorted, parquet_file, read_parquet
from logstore.log.schema import TOPIC_SCHEMA
from logstore.structs import FetchResult, TopicInfo

__all__ = [
    "FetchPlan",
    "PartitionView",
    "TopicReader",
    "offset_cuts",
    "offset_for_timestamp",
    "offset_runs",
    "read_files",
    "read_plan",
]


class OffsetRange(Protocol):
    """Anything with a file's offset statistics (a :class:`logstore.log._delta.DataFile`, a maintenance file)."""

    @property
    def min_offset(self) -> int: ...
    @property
    def max_offset(self) -> int: ...


_F = TypeVar("_F", bound=OffsetRange)


def offset_cuts(min_offsets: Sequence[int] | np.ndarray, max_offsets: Sequence[int] | np.ndarray) -> np.ndarray:
    """Where files sorted by min offset may be split by offset: ``n + 1`` booleans for ``n`` files.

    ``cuts[k]`` is True when every offset of the first ``k`` files is below
    every offset of the others (so ``cuts[0]`` and ``cuts[n]`` always are).
    Files logstore writes make every ``k`` a cut; after a rewrite that bins
    files by size, a file holding [0, 39] beside one holding [10, 19] allows
    no cut between them. Splitting only at cuts is what keeps retention, the
    compactions and the Spark source's slices from skipping or repeating a
    record.
    """
    lo = np.asarray(min_offsets, np.int64)
    hi = np.asarray(max_offsets, np.int64)
    cuts = np.ones(len(lo) + 1, np.bool_)
    if len(lo) > 1:
        cuts[1:-1] = np.maximum.accumulate(hi)[:-1] < lo[1:]
    return cuts


def offset_runs(files: Sequence[_F]) -> list[list[_F]]:
    """``files`` grouped into runs between :func:`offset_cuts`, in offset order.

    Runs hold disjoint offset ranges, each above the one before; the files of
    one run overlap (a run of one file is the usual case).
    """
    ordered = sorted(files, key=lambda f: f.min_offset)
    cuts = offset_cuts([f.min_offset for f in ordered], [f.max_offset for f in ordered])
    bounds = np.flatnonzero(cuts)
    return [ordered[a:b] for a, b in itertools.pairwise(bounds.tolist())]


@dataclass(frozen=True)
class PartitionView:
    """A partition's files and bounds at one table version."""

    partition: int
    files: tuple[_delta.DataFile, ...]
    """The partition's live files, sorted by min offset; their offset ranges may overlap."""
    log_start_offset: int
    """See :func:`logstore.log.catalog.log_start_offset`: moved only by retention."""
    high_watermark: int
    topic_id: str | None = None
    """The ID of the topic these offsets are of (:mod:`logstore.log.topic_id`); None: created before IDs."""


class TopicReader:
    """Reads one topic. Keeps its table handle warm; refreshes it per fetch.

    Not thread-safe; cheap to build (one per thread or request handler).
    """

    def __init__(self, catalog: Catalog, topic: str) -> None:
        self.topic = topic
        self._catalog = catalog
        self._tail = LogTail(catalog.table(topic))
        self._views: dict[int, PartitionView] = {}
        self._view_version: tuple[int, int] = (-1, -1)
        """(the tail's loads, its version) the views are of: a re-created table may be at the old version."""
        self._num_partitions = 0

    @property
    def table(self) -> DeltaTable:
        """A delta-rs handle of the topic's table, at or before the version last loaded (:meth:`refresh`)."""
        return self._tail.table

    @property
    def version(self) -> int:
        """The table version last loaded."""
        return self._tail.version

    @property
    def topic_id(self) -> str | None:
        """The topic's ID at the version last loaded; a re-created topic has a new one (:meth:`refresh` loads it)."""
        return self._tail.topic_id

    def refresh(self) -> int:
        """Load the newest table version (reading only the commits since the last); returns it.

        Raises:
            UnknownTopicOrPartitionError: the topic was deleted.
            KafkaStorageError: its table could not be read.
        """
        try:
            return self._tail.advance()
        except FileNotFoundError:
            raise UnknownTopicOrPartitionError(f"topic '{self.topic}' does not exist") from None
        except (DeltaError, OSError) as e:
            raise KafkaStorageError(f"cannot read topic '{self.topic}': {e}") from e

    def num_partitions(self) -> int:
        """The topic's partition count at the loaded version."""
        return partition_count_in(self._tail.configuration)

    def describe(self) -> TopicInfo:
        """The topic at the loaded version, as :meth:`Catalog.describe_topic` describes it (no I/O)."""
        return self._catalog.describe_topic(self.topic, self._tail)

    def partition_view(self, partition: int) -> PartitionView:
        """Files, log start offset and HW of ``partition`` at the loaded version.

        Raises:
            UnknownTopicOrPartitionError: the partition does not exist, or the topic was
                deleted since the loaded version (:meth:`refresh` then says which).
        """
        version = (self._tail.loads, self._tail.version)
        if version != self._view_version:
            try:
                self._load_views(version)
            except FileNotFoundError:
                raise UnknownTopicOrPartitionError(f"topic '{self.topic}' was deleted while it was read") from None
        view = self._views.get(partition)
        if view is None:
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic '{self.topic}' does not exist "
                f"(partitions: 0..{self._num_partitions - 1})"
            )
        return view

    def _load_views(self, version: tuple[int, int]) -> None:
        count = self.num_partitions()
        by_partition: dict[int, list[_delta.DataFile]] = {p: [] for p in range(count)}
        for f in self._tail.files.values():
            by_partition.setdefault(f.partition, []).append(f)
        views = {}
        for p in range(count):
            mine = sorted(by_partition[p], key=lambda f: f.min_offset)
            hw = high_watermark(self._tail, p, mine)
            views[p] = PartitionView(p, tuple(mine), log_start_offset(self._tail, p, hw), hw, self.topic_id)
        self._views, self._view_version, self._num_partitions = views, version, count

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

        Gaps key compaction left are stepped over: a fetch from any offset in
        [log start offset, high watermark) returns the next records kept.

        ``max_bytes`` bounds the keys and values returned, but the first record
        is always returned whole (as Kafka does), so a consumer never stalls;
        ``max_bytes <= 0`` does not bound them. The bound also holds while
        reading: files are decoded a batch at a time in offset order and
        reading stops once ``max_bytes`` is reached, so a fetch holds about
        ``max_bytes`` plus a data page per open row group, whatever
        ``max_records`` is. ``offset == high watermark`` returns no records.

        It is :meth:`plan` then :func:`read_plan`; a caller that reads from
        many threads plans under its lock and reads outside it.

        Raises:
            OffsetOutOfRangeError: ``offset`` outside [log start offset, high watermark].
            UnknownTopicOrPartitionError: no such partition.
        """
        if refresh:
            self.refresh()
        try:
            return read_plan(self.plan(partition, offset, max_records), max_bytes)
        except FileNotFoundError:
            # The topic was deleted and recreated, or vacuumed past this version: start over once.
            self._tail = LogTail(self._catalog.table(self.topic))
            self._view_version = (-1, -1)
            try:
                return read_plan(self.plan(partition, offset, max_records), max_bytes)
            except FileNotFoundError as e:
                raise KafkaStorageError(f"topic '{self.topic}' partition {partition}: {e}") from e

    def plan(self, partition: int, offset: int, max_records: int) -> FetchPlan:
        """What a fetch of ``partition`` from ``offset`` reads at the loaded version (no data is read).

        Raises:
            OffsetOutOfRangeError: ``offset`` outside [log start offset, high watermark].
            UnknownTopicOrPartitionError: no such partition.
        """
        view = self.partition_view(partition)
        if not view.log_start_offset <= offset <= view.high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} of topic '{self.topic}' partition {partition} is outside "
                f"[{view.log_start_offset}, {view.high_watermark}]"
            )
        return FetchPlan(view, offset, _fetch_end(view, offset, max_records))


@dataclass(frozen=True)
class FetchPlan:
    """A fetch decided at one table version (:meth:`TopicReader.plan`): the records of ``view`` in
    [``offset``, ``end``). Reading it (:func:`read_plan`) needs no reader: data files never change."""

    view: PartitionView
    offset: int
    end: int


def read_plan(plan: FetchPlan, max_bytes: int) -> FetchResult:
    """The records ``plan`` names, at most ``max_bytes`` of keys and values (the first record whole; see
    :meth:`TopicReader.fetch`). Thread-safe: any number of threads may read plans at once.

    Raises:
        FileNotFoundError: a file of the plan's version is gone (vacuumed, or the topic deleted): plan again.
    """
    view = plan.view
    records = _read_bounded(view.files, view.partition, plan.offset, plan.end, max_bytes)
    return FetchResult(records, view.high_watermark, view.log_start_offset)


def _read_consecutive(
    files: tuple[_delta.DataFile, ...], partition: int, start: int, end: int, max_bytes: int
) -> tuple[list[pa.Table], int, int]:
    """The leading part of a bounded read that lies in files one after another: ``(tables, next offset, bytes)``.

    The common case — files as commits wrote them, each one row group holding
    every offset of its range in order, the next file starting where it ends —
    needs no merge: each file is decoded whole and sliced by position. The
    first file that is not like that (a gap key compaction left, files that
    overlap after OPTIMIZE, a large file of several row groups) ends this part
    at its offset, and :func:`_read_bounded` reads on from there. The tables
    are ``_FILE_SCHEMA``; the next offset is ``end`` when the slice is done,
    and past the ``max_bytes`` cut when it stopped there.
    """
    tables: list[pa.Table] = []
    offset, total = start, 0
    for f in files:
        if f.partition != partition or f.max_offset < offset:
            continue
        if offset >= end or f.min_offset > offset:  # done, or a gap: the merge reads on
            break
        if f.num_records != f.max_offset - f.min_offset + 1:
            break
        pf = _open(f)
        meta = pf.metadata
        if meta.num_row_groups != 1 or meta.row_group(0).total_byte_size > _WHOLE_ROW_GROUP_BYTES:
            break
        present = set(pf.schema_arrow.names)
        rows = _conform(
            pf.read_row_group(0, columns=[n for n in _FILE_SCHEMA.names if n in present], use_threads=False)
        )
        offsets = rows["offset"].to_numpy()
        if len(offsets) != f.num_records or (len(offsets) and (np.diff(offsets) != 1).any()):
            break  # not in order after all: the merge reads it
        first, stop = offset - f.min_offset, min(end, f.max_offset + 1) - f.min_offset
        kept, total, cut = _within(rows.slice(first, stop - first), total, max_bytes, nothing_yet=not tables)
        tables.append(kept)
        if cut:
            return tables, end, total
        offset = f.min_offset + stop
    return tables, offset, total


def _fetch_end(view: PartitionView, offset: int, max_records: int) -> int:
    """Where a fetch of at most ``max_records`` records from ``offset`` ends (exclusive, at most the HW).

    ``offset + max_records`` when the files' statistics show every offset there
    is present (files one after another, each holding its whole range); else,
    past gaps key compaction left or files that overlap, the offset after the
    ``max_records``-th record, found from the ``offset`` column of the files
    from ``offset`` on, run by run until enough are seen.
    """
    hw = view.high_watermark
    end = min(hw, offset + max(0, max_records))
    if end <= offset:
        return end
    covered, dense = offset, True
    for f in view.files:
        if f.max_offset < offset:
            continue
        if f.min_offset >= end:
            break
        dense = dense and f.min_offset <= covered and f.num_records == f.max_offset - f.min_offset + 1
        covered = max(covered, f.max_offset + 1)
    if dense and covered >= end:
        return end
    seen: list[np.ndarray] = []
    for run in offset_runs([f for f in view.files if f.max_offset >= offset]):
        seen += [
            read_parquet(f.path, columns=["offset"], filters=[("offset", ">=", offset), ("offset", "<", hw)])[
                "offset"
            ].to_numpy()
            for f in run
        ]
        if sum(len(a) for a in seen) >= max_records:
            return int(np.sort(np.concatenate(seen))[max_records - 1]) + 1
    return hw


def offset_for_timestamp(view: PartitionView, timestamp_ms: int) -> int:
    """The first offset whose timestamp is at or after ``timestamp_ms``; the HW if none is.

    Like Kafka's ``ListOffsets`` by timestamp. Reads the ``offset`` and
    ``timestamp`` columns of the partition's files run by run in offset order
    (:func:`offset_runs`: files whose ranges overlap are read together),
    stopping at the first run that holds a match.
    """
    threshold = pa.scalar(timestamp_ms * 1000, pa.timestamp("us", tz="UTC"))
    for run in offset_runs(view.files):
        found = [
            read_parquet(f.path, columns=["offset"], filters=[("timestamp", ">=", threshold)])["offset"] for f in run
        ]
        hits = [pc.min(c).as_py() for c in found if len(c)]
        if hits:
            return int(min(hits))
    return view.high_watermark


def read_files(
    files: tuple[_delta.DataFile, ...] | list[_delta.DataFile], partition: int, start: int, end: int
) -> pa.Table:
    """Records of ``partition`` with ``start <= offset < end`` from ``files``, offsets ascending.

    Only files whose offset range overlaps the slice are opened; their ranges may
    overlap one another (the records are merged by offset). Runs anywhere
    the files are reachable (a server thread, a Spark executor).
    """
    tables = []
    for f in files:
        if f.partition != partition or f.max_offset < start or f.min_offset >= end:
            continue
        t = read_parquet(f.path, filters=[("offset", ">=", start), ("offset", "<", end)], schema=_FILE_SCHEMA)
        tables.append(t)
    if not tables:
        return TOPIC_SCHEMA.empty_table()
    data = pa.concat_tables(tables)
    data = data.add_column(0, TOPIC_SCHEMA.field("partition"), pa.repeat(pa.scalar(partition, pa.int32()), len(data)))
    if len(tables) > 1 or not offsets_sorted(data["offset"]):
        data = data.sort_by("offset")
    return data.cast(TOPIC_SCHEMA)


_FILE_SCHEMA = pa.schema([f for f in TOPIC_SCHEMA if f.name != "partition"])
_NO_OFFSET = np.iinfo(np.int64).max
"""Stands for a row outside the slice in a row group's offsets: never the next one to return."""
_BATCH_BYTES = 256 * 1024
"""Bytes of rows a bounded read decodes at a time (by the row group's average row size)."""
_READ_BUFFER = 64 * 1024
"""Read buffer of a bounded read: pages are read as decoded, not whole column chunks up front."""
_WHOLE_ROW_GROUP_BYTES = 4 * _BATCH_BYTES
"""A row group of at most this many bytes (uncompressed) is decoded whole by a bounded read."""
_FOOTERS: LruDict[tuple[str, int], pq.FileMetaData] = LruDict(4096)
"""Parsed footers of data files recently read, by path and size: a data file never changes once written (its
name is new), so its footer is read once however many fetches open it; a few KB each."""
_footers_lock = threading.Lock()


class _Piece:
    """One row group that may hold offsets of the slice, read forward a batch at a time.

    A row group of at most ``_WHOLE_ROW_GROUP_BYTES`` (what a commit writes:
    one partition's records of one commit) is decoded whole, once. A larger
    one (a compacted file's) has its offset column read first (8 bytes a
    row), then the rest a batch at a time, so a bounded fetch stops decoding
    once it has enough. Either way the smallest offset it has yet to yield is
    known exactly, and reading stops once it has nothing more of the slice.
    Decoding runs on the calling thread (``use_threads=False``): a fetch
    reads one partition per thread, and handing a small row group's columns
    to pyarrow's pool costs more than decoding them.
    """

    def __init__(self, pf: pq.ParquetFile, row_group: int, start: int, end: int) -> None:
        meta = pf.metadata.row_group(row_group)
        present = set(pf.schema_arrow.names)
        columns = [name for name in _FILE_SCHEMA.names if name in present]
        whole: pa.Table | None = None
        if meta.total_byte_size <= _WHOLE_ROW_GROUP_BYTES:
            whole = _conform(pf.read_row_group(row_group, columns=columns, use_threads=False))
            offsets = whole["offset"].to_numpy().astype(np.int64)
            self._batches: Iterator[pa.Table] = iter([whole])
        else:
            offsets = (
                pf.read_row_group(row_group, columns=["offset"], use_threads=False)
                .column(0)
                .to_numpy()
                .astype(np.int64)
            )
            row_bytes = max(1, meta.total_byte_size // max(1, meta.num_rows))
            batches = pf.iter_batches(
                batch_size=max(1, min(65_536, _BATCH_BYTES // row_bytes)),
                row_groups=[row_group],
                columns=columns,
                use_threads=False,
            )
            self._batches = (_conform(pa.Table.from_batches([b])) for b in batches)
        wanted = np.where((offsets >= start) & (offsets < end), offsets, _NO_OFFSET)
        self._suffix_min = np.minimum.accumulate(wanted[::-1])[::-1]
        self._pos = 0

    @property
    def next_offset(self) -> int:
        """The smallest offset of the slice still unread here; ``_NO_OFFSET`` when none is left."""
        return int(self._suffix_min[self._pos]) if self._pos < len(self._suffix_min) else _NO_OFFSET

    def read(self, start: int, end: int) -> pa.Table:
        """The next batch's rows of the slice, as ``_FILE_SCHEMA``."""
        table = next(self._batches)
        self._pos += table.num_rows
        offsets = table["offset"]
        inside = pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end))
        return table if pc.all(inside).as_py() else table.filter(inside)


def _open(f: _delta.DataFile) -> pq.ParquetFile:
    """A data file for a bounded read, its footer parsed once per process (:data:`_FOOTERS`)."""
    key = (f.path, f.size_bytes)
    with _footers_lock:
        meta = _FOOTERS.get(key)
    pf = parquet_file(f.path, metadata=meta, pre_buffer=False, buffer_size=_READ_BUFFER)
    if meta is None:
        with _footers_lock:
            _FOOTERS[key] = pf.metadata
    return pf


def _read_bounded(files: tuple[_delta.DataFile, ...], partition: int, start: int, end: int, max_bytes: int) -> pa.Table:
    """Records of ``partition`` with ``start <= offset < end`` in offset order, stopping at ``max_bytes``.

    Reads the row groups that may hold the slice in offset order, merging them
    when their ranges overlap (files that Spark's OPTIMIZE or compaction
    rewrote). Buffered rows are returned once no unread row can come before
    them; reading stops as soon as the keys and values returned exceed
    ``max_bytes`` (the first record is returned whole regardless). A file is
    opened only once reading reaches its smallest offset (its statistics say
    which), so a fetch that fills ``max_bytes`` from its first few files does
    not open the others its offset range covers.
    """
    out, start, out_bytes = _read_consecutive(files, partition, start, end, max_bytes)
    if start < end:
        out += _merge_bounded(files, partition, start, end, max_bytes, out_bytes, first=not out)
    data = out[0] if len(out) == 1 else pa.concat_tables(out) if out else _FILE_SCHEMA.empty_table()
    data = data.add_column(0, TOPIC_SCHEMA.field("partition"), pa.repeat(pa.scalar(partition, pa.int32()), len(data)))
    return data if data.schema.equals(TOPIC_SCHEMA, check_metadata=True) else data.cast(TOPIC_SCHEMA)


def _merge_bounded(
    files: tuple[_delta.DataFile, ...],
    partition: int,
    start: int,
    end: int,
    max_bytes: int,
    out_bytes: int,
    *,
    first: bool,
) -> list[pa.Table]:
    """:func:`_read_bounded` through a merge by offset of every row group that may hold the slice.

    ``out_bytes``: what was read before (counts toward ``max_bytes``); ``first``: nothing was, so the first
    record is returned whole.
    """
    # (smallest offset, tie-break, what): a DataFile not opened yet, or a row group (file, index) of one opened.
    heap: list[tuple[int, int, _delta.DataFile | tuple[pq.ParquetFile, int]]] = []
    tie = itertools.count()
    for f in files:
        if f.partition == partition and f.max_offset >= start and f.min_offset < end:
            heap.append((max(f.min_offset, start), next(tie), f))
    heapq.heapify(heap)
    pieces: list[_Piece] = []
    buffered = _FILE_SCHEMA.empty_table()
    out: list[pa.Table] = []
    while True:
        frontier = min([p.next_offset for p in pieces] + ([heap[0][0]] if heap else [_NO_OFFSET]))
        if len(buffered):
            below = pc.less(buffered["offset"], frontier)
            if pc.all(below).as_py():  # the common case, files in offset order: no copies
                ready, buffered = buffered, _FILE_SCHEMA.empty_table()
            else:
                ready, buffered = buffered.filter(below), buffered.filter(pc.invert(below))
            if not offsets_sorted(ready["offset"]):
                ready = ready.sort_by("offset")
            if len(ready):
                kept, out_bytes, cut = _within(ready, out_bytes, max_bytes, nothing_yet=first and not out)
                out.append(kept)
                if cut:
                    break
        if frontier == _NO_OFFSET:
            break
        if heap and heap[0][0] == frontier and all(p.next_offset > frontier for p in pieces):
            _, _, what = heapq.heappop(heap)
            if isinstance(what, _delta.DataFile):  # reached: its row groups that may hold the slice join the heap
                pf = _open(what)
                for rg in range(pf.metadata.num_row_groups):
                    lo, hi = _offset_range(pf, rg, what)
                    if hi >= start and lo < end:
                        heapq.heappush(heap, (max(lo, start), next(tie), (pf, rg)))
                continue
            pf, rg = what
            pieces = [p for p in [*pieces, _Piece(pf, rg, start, end)] if p.next_offset != _NO_OFFSET]
            continue
        piece = min(pieces, key=lambda p: p.next_offset)
        buffered = pa.concat_tables([buffered, piece.read(start, end)])
        pieces = [p for p in pieces if p.next_offset != _NO_OFFSET]
    return out


def _within(rows: pa.Table, before: int, max_bytes: int, *, nothing_yet: bool) -> tuple[pa.Table, int, bool]:
    """The leading ``rows`` whose keys and values fit in ``max_bytes`` after the ``before`` bytes a read already
    returned (all of them when ``max_bytes`` <= 0; the first record whole, whatever its size, when
    ``nothing_yet``): ``(those rows, the bytes returned with them, whether rows were left out)``."""
    sizes = pc.add(
        pc.fill_null(pc.binary_length(rows["key"]), 0), pc.fill_null(pc.binary_length(rows["value"]), 0)
    ).to_numpy()
    running = before + np.cumsum(sizes, dtype=np.int64)
    fits = len(rows) if max_bytes <= 0 else int(np.searchsorted(running, max_bytes, side="right"))
    if fits == len(rows):
        return rows, int(running[-1]) if fits else before, False
    fits = fits or int(nothing_yet)
    return rows.slice(0, fits), int(running[fits - 1]) if fits else before, True


def _offset_range(pf: pq.ParquetFile, row_group: int, f: _delta.DataFile) -> tuple[int, int]:
    """The row group's offset range from its statistics, else the file's (always a superset)."""
    meta = pf.metadata.row_group(row_group)
    for i in range(meta.num_columns):
        column = meta.column(i)
        if column.path_in_schema == "offset":
            stats = column.statistics
            if stats is not None and stats.has_min_max:
                return int(stats.min), int(stats.max)
    return f.min_offset, f.max_offset


def _conform(table: pa.Table) -> pa.Table:
    """A file's rows as ``_FILE_SCHEMA``: columns in order, types cast, missing ones null (the files logstore
    writes already are: nothing to do)."""
    if table.schema.equals(_FILE_SCHEMA):
        return table
    names = set(table.column_names)
    columns = [
        _cast(table[field.name], field.type) if field.name in names else pa.nulls(len(table), field.type)
        for field in _FILE_SCHEMA
    ]
    return pa.Table.from_arrays(columns, schema=_FILE_SCHEMA)


def _cast(column: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray:
    return column if column.type.equals(to) else column.cast(to)
