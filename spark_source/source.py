"""``format("logstore")``: the Python data source Spark reads topics (and writes them) through.

Where each piece runs:

* :class:`LogstoreDataSource` is pickled by Spark and rebuilt in every Python
  worker that needs it; building it does no I/O.
* :class:`LogstoreStreamReader`'s ``initialOffset``, ``latestOffset``,
  ``partitions``, ``commit`` and ``stop`` run in one long-lived Python worker
  the driver starts per query (no SparkSession there). That worker reads the
  topics' Delta logs, commits the group's offsets and holds the group's lease.
* ``read`` runs on executors, one call per :class:`~spark_source._slices.ReadTask`
  (a partition's slice, or several small ones); it reads only the slices' files,
  listed at planning time, and is stateless.

Reading on the driver. With ``maxRecordsReadOnDriver`` N > 0 the stream reader
is a :class:`PrefetchingStreamReader`: a micro-batch of at most N records is
read by the planning worker while it plans the batch (in ``latestOffset``), and
Spark takes those records from that worker's memory into its block manager
instead of starting a Python task on an executor to read them. A Python task
costs Spark tens of milliseconds whatever it reads, so a low-rate stream's
micro-batch ends that much sooner; a larger batch (a backlog, a burst) is read
in tasks as usual. This rides on the protocol Spark's planning worker speaks
with ``SimpleDataSourceStreamReader`` (``pyspark.sql.datasource_internal``):
Spark then asks such a reader for no ``reportLatestOffset``, so the progress
report of such a query has no ``latestOffset``.

Consumer groups. With ``group``, a new query starts from the group's committed
offsets (``startingOffsets`` for partitions it never committed) and the group's
offsets reach the end of every completed batch: ``latestOffset(start, …)`` is
called only after the batch ending at ``start`` has completed (Spark runs
micro-batches one after another and plans the next one after committing the
previous one), so it commits ``start`` before it plans. That includes the last
batch of an ``availableNow`` run, which ends with a ``latestOffset`` call that
finds nothing new. Spark's own ``commit(end)`` comes one batch later and
commits too (a no-op when already there). The query's checkpoint, not the
group, is where a restarted query resumes. A group's topic has one live query
at a time (:class:`~logstore.groups.leases.GroupLease`); every commit of the group's
offsets checks the lease first, so a query that lost its topic to another
query of the group fails with ``GROUP_SUBSCRIBED_TO_TOPIC`` instead of moving
the group's offsets back.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper

from logstore.common.logs import describe
from logstore.groups.leases import GroupLease
from logstore.groups.offsets import OffsetsStore
from spark_source._compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
    require_admission_control,
)
from spark_source._options import SourceOptions
from spark_source._planner import (
    Offsets,
    Planner,
    TopicIds,
    Views,
    canonical,
    ids_of,
    rate_limited,
    split_ids,
    with_ids,
)
from spark_source._slices import HEADERS_DDL, KAFKA_SCHEMA_DDL, ReadTask, read_task

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter
    from pyspark.sql.types import StructType

__all__ = ["LogstoreBatchReader", "LogstoreDataSource", "LogstoreStreamReader", "PrefetchingStreamReader"]

log = logging.getLogger("spark_source")
_PLANS_KEPT = 8


class LogstoreDataSource(DataSource):
    """The ``logstore`` data source: Kafka-source-compatible reads, exactly-once writes.

    Options (reads): ``subscribe`` / ``subscribePattern`` / ``assign`` / ``topic``, ``group``,
    ``startingOffsets``, ``startingTimestamp``, ``endingOffsets`` (batch),
    ``maxOffsetsPerTrigger``, ``maxRecordsPerPartition``, ``maxRecordsReadOnDriver``,
    ``failOnDataLoss``, ``includeHeaders``, ``logstore.root``; a Kafka job's ``kafka.*`` and consumer
    options are ignored (logged). Writes: see :mod:`spark_sink`.
    """

    @classmethod
    def name(cls) -> str:
        return "logstore"

    def schema(self) -> str:
        headers = str(self.options.get("includeHeaders", "false")).lower() == "true"
        return KAFKA_SCHEMA_DDL + (", " + HEADERS_DDL if headers else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogstoreBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = SourceOptions.parse(self.options, streaming=True)
        if options.max_offsets_per_trigger is not None:
            require_admission_control("maxOffsetsPerTrigger")
        reader = LogstoreStreamReader(options)
        if options.max_records_read_on_driver > 0:
            return PrefetchingStreamReader(reader, options.max_records_read_on_driver)
        return reader

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_sink import LogstoreBatchWriter

        return LogstoreBatchWriter(dict(self.options), schema, overwrite=overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from spark_sink import LogstoreStreamWriter

        return LogstoreStreamWriter(dict(self.options), schema)


class LogstoreBatchReader(DataSourceReader):
    """``spark.read.format("logstore")``: ``startingOffsets`` to ``endingOffsets`` at the newest versions."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        planner = Planner(self.options)
        views = planner.views()
        return planner.tasks(planner.starting_offsets(views), planner.ending_offsets(views), views)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadTask):  # nothing to read: Spark plans one InputPartition(None) for no tasks
            return iter(())
        return read_task(partition)


class LogstoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("logstore")`` (see the module docstring for where each method runs)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        # Built on first use: the reader is also pickled to executors for read().
        self._planner: Planner | None = None
        self._offsets: OffsetsStore | None = None
        self._lease: GroupLease | None = None
        self._fenced: dict[str, int] = {}
        """Topic → the lease generation this reader wrote as the group's fence in ``_offsets``."""
        self._committed: dict[tuple[str, str], int] = {}
        self._target: dict[tuple[str, int], int] | None = None
        self._plans: dict[str, Views] = {}
        self._available: dict[str, Any] | None = None
        self._initial: dict[str, Any] | None = None
        """Where this run of the query starts when Spark has no committed position (resolved once, with IDs)."""
        self._committed_ids: TopicIds = {}
        """The topic IDs the entries of ``_committed`` are of."""
        self._current_ids: TopicIds = {}
        """The topics' IDs as the newest plan read them."""
        self._last_end: dict[str, Any] | None = None
        """The end of the batch planned last: the next one's start where Spark does not say (4.0, 4.1)."""

    # -- Spark's methods (driver-side worker) --------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        # Spark asks more than once before the first batch is committed: for the start of its
        # latestOffset, then again for the start of its input partitions. Both must be the same
        # position: "latest" resolved again a moment later would start past the end just planned.
        if self._initial is None:
            planner = self._planner_()
            views = planner.views()
            self._hold(views)
            start = planner.starting_offsets(views)
            if self.options.group is not None:
                for (_, t, p), (offset, _, _) in self._offsets_().committed(self.options.group).items():
                    if t in start and str(p) in start[t]:
                        start[t][str(p)] = offset
                        self._committed[(t, str(p))] = offset
            self._committed_ids = self._current_ids = ids_of(views)
            self._initial = with_ids(start, self._current_ids)
        return canonical(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        views = self._planner_().views()
        self._target = {(t, p): v.high_watermark for t, parts in views.items() for p, v in parts.items()}

    def latestOffset(self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None) -> dict[str, Any]:
        # Spark 4.0 and 4.1 call latestOffset() alone: the batch that ends where the last one planned ended
        # is the one that has completed (micro-batches run one after another).
        start = self.batch_start(start)
        if limit is None:
            limit = self.getDefaultReadLimit()
        end = self._latest(start, limit)
        self._last_end = end
        return end

    def batch_start(self, start: dict[str, Any] | None) -> dict[str, Any]:
        """The next batch's start: ``start`` as Spark 4.2 gives it, else where the last planned batch ended."""
        if start is not None:
            return start
        return self._last_end if self._last_end is not None else self.initialOffset()

    def _latest(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        planner = self._planner_()
        # failOnDataLoss=false: a topic deleted under the query is skipped while it is gone (read from its
        # start when it is back), as the Kafka source does; true: the query fails, as on any data loss.
        views = planner.views(missing_ok=not self.options.fail_on_data_loss)
        positions, ids = split_ids(start)
        self._current_ids = ids_of(views)
        # The batch ending at `start` has completed: make the group's offsets reach it first.
        self._commit_group(start, self._current_ids)
        self._hold(views)
        begin: dict[tuple[str, int], int] = {}
        until: dict[tuple[str, int], int] = {}
        for t, parts in views.items():
            for p, v in parts.items():
                b = planner.begin(t, p, positions.get(t, {}).get(str(p)), v, ids)
                u = v.high_watermark
                if self._target is not None:
                    u = min(u, self._target.get((t, p), b))  # a partition added after the start waits
                begin[(t, p)], until[(t, p)] = b, max(b, u)
        if isinstance(limit, ReadMaxRows):
            until = rate_limited(begin, until, limit.max_rows)
        end: Offsets = {}
        for (t, p), o in until.items():
            end.setdefault(t, {})[str(p)] = o
        end = with_ids(end, self._current_ids)
        self._remember(end, views)
        self._available = _high_watermarks(views)
        return end

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Spark asks right after latestOffset, for the progress report only: the high watermarks latestOffset
        # read a moment ago answer it without reading every topic's log a second time per micro-batch.
        if self._available is None:
            self._available = _high_watermarks(self._planner_().views())
        return self._available

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        planner = self._planner_()
        views = self._plans.get(_key(end))
        if views is None:  # planned by an earlier run of the query (a replay after a restart)
            views = planner.views()
        (start_at, ids), (end_at, _) = split_ids(start), split_ids(end)
        return planner.tasks(start_at, end_at, views, ids)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReadTask)
        return read_task(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_group(end, self._current_ids)

    def stop(self) -> None:
        if self._lease is not None:
            self._lease.release()

    # -- internals --------------------------------------------------------------

    def _planner_(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
        return self._planner

    def _offsets_(self) -> OffsetsStore:
        if self._offsets is None:
            self._offsets = OffsetsStore(self.options.root)
        return self._offsets

    def _hold(self, views: Views) -> None:
        self._hold_topics(set(views))

    def _hold_topics(self, topics: set[str]) -> None:
        """Hold (take or renew) the group's leases of ``topics``; raises GroupSubscribedToTopicError if lost."""
        if self.options.group is None:
            return
        if self._lease is None:
            self._lease = GroupLease(self.options.root, self.options.group)
        self._lease.acquire(topics)
        for t in sorted(topics):
            # A lease newly taken fences the previous holder's commits before this reader reads the offsets.
            generation = self._lease.generation(t)
            if self._fenced.get(t) != generation:
                self._offsets_().fence(self.options.group, t, generation)
                self._fenced[t] = generation

    def _commit_group(self, offsets: dict[str, Any], current: TopicIds) -> None:
        """Commit ``offsets`` as the group's; not those of a topic whose ID is no longer ``current``'s.

        A position of a topic deleted and created again is not a position in the new one.
        """
        if self.options.group is None:
            return
        positions, ids = split_ids(offsets)
        for t, parts in positions.items():
            if t not in current or (ids is not None and t in ids and ids[t] != current[t]):
                continue  # deleted since (its offsets with it), or deleted and created again
            if t in current and self._committed_ids.get(t) != current[t]:
                self._committed = {k: v for k, v in self._committed.items() if k[0] != t}
                self._committed_ids[t] = current[t]
            changed = {int(p): int(o) for p, o in parts.items() if self._committed.get((t, p)) != o}
            if changed:
                # A query that lost the topic to another query of its group must not move the
                # group's offsets back to its own (older) position: check the lease right before.
                self._hold_topics({t})
                fence = self._lease.generation(t) if self._lease is not None else None
                self._offsets_().commit(self.options.group, t, changed, metadata="spark", fence=fence)
                for p, o in changed.items():
                    self._committed[(t, str(p))] = o

    def _remember(self, end: Offsets, views: Views) -> None:
        self._plans[_key(end)] = views
        while len(self._plans) > _PLANS_KEPT:
            self._plans.pop(next(iter(self._plans)))


class PrefetchingStreamReader(_SimpleStreamReaderWrapper):
    """A :class:`LogstoreStreamReader` that reads a micro-batch of at most ``max_records`` records itself,
    while Spark plans it, and hands the records to Spark from memory (``maxRecordsReadOnDriver``).

    Spark's planning worker sends a reader of this class (``_SimpleStreamReaderWrapper``) the records
    ``getCache(start, end)`` returns together with its one input partition, and Spark's tasks read them
    from its block manager: no Python task. When ``getCache`` returns None (a larger batch, or a batch
    planned by an earlier run of the query) the batch's tasks are read on executors as
    :class:`LogstoreStreamReader` reads them. Offsets, group commits, leases, ``maxOffsetsPerTrigger`` and
    ``availableNow`` are the wrapped reader's; it holds the records of one batch at most, from
    ``latestOffset`` until Spark takes them. A read that fails there with an ``OSError`` (storage) leaves
    the batch to tasks, which Spark retries, instead of failing the query. Spark's driver keeps the last
    batch it took in its block manager until it takes another or the query stops.
    """

    def __init__(self, reader: LogstoreStreamReader, max_records: int) -> None:
        super().__init__(reader)  # type: ignore[arg-type]  # Spark's checks for availableNow look at .simple_reader
        self.reader = reader
        self.max_records = max_records
        self._prefetched: tuple[str, list[pa.RecordBatch]] | None = None
        """(the batch's start and end offsets, :func:`_key` of each; its records) until Spark takes them."""

    def initialOffset(self) -> dict[str, Any]:
        return self.reader.initialOffset()

    def getDefaultReadLimit(self) -> ReadLimit:
        return self.reader.getDefaultReadLimit()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None) -> dict[str, Any]:
        start = self.reader.batch_start(start)
        end = self.reader.latestOffset(start, limit)
        self._prefetched = None
        tasks = self._tasks(start, end)
        if 0 < sum(t.records for t in tasks) <= self.max_records:
            try:
                self._prefetched = (_key(start) + _key(end), [rb for t in tasks for rb in read_task(t)])
            except OSError as err:
                # Here a failed read would fail the query; in tasks Spark retries it (spark.task.maxFailures).
                log.warning(
                    "maxRecordsReadOnDriver: reading batch %s..%s failed (%s); tasks read it", start, end, describe(err)
                )
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        tasks = self._tasks(start, end)
        if self._holds(start, end):
            # Spark takes prefetched records as one input partition's; the task reads them only if
            # Spark lost them (its block manager evicted them), then as any task.
            return [ReadTask(tuple(s for t in tasks for s in t.slices))]
        return tasks

    def getCache(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[pa.RecordBatch] | None:
        if self._prefetched is None or not self._holds(start, end):
            return None
        batches = self._prefetched[1]
        self._prefetched = None
        return iter(batches)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReadTask)
        return read_task(partition)

    def commit(self, end: dict[str, Any]) -> None:
        self.reader.commit(end)

    def stop(self) -> None:
        self.reader.stop()

    def _holds(self, start: dict[str, Any], end: dict[str, Any]) -> bool:
        return self._prefetched is not None and self._prefetched[0] == _key(start) + _key(end)

    def _tasks(self, start: dict[str, Any], end: dict[str, Any]) -> list[ReadTask]:
        return [t for t in self.reader.partitions(start, end) if isinstance(t, ReadTask)]


def _high_watermarks(views: Views) -> dict[str, Any]:
    return with_ids(
        {t: {str(p): v.high_watermark for p, v in parts.items()} for t, parts in views.items()}, ids_of(views)
    )


def _key(offsets: dict[str, Any]) -> str:
    return json.dumps(canonical(offsets))
