"""Partition slices and read tasks: what one Spark task reads, and how it reads it.

A slice is ``[start, end)`` of one topic partition plus every data file that
holds an offset in it at the Delta version the batch was planned on. The file
list travels inside the slice (it is pickled to the executor), so a task never
looks at the Delta log: compaction or retention committed after planning
cannot change what the batch reads.

A :class:`ReadTask` — one Spark input partition — is a slice, or several small
ones. A Python task costs Spark tens of milliseconds before it reads anything
(measured: a micro-batch of 4 partitions of a few hundred records each took
~376 ms in ``addBatch`` as 4 tasks and ~209 ms as one, on 2 cores), so slices
smaller than :data:`PACKED_TASK_RECORDS` records share tasks of up to that many
records: a low-rate stream reads each micro-batch in about one task, while a
backlog still gets a task per slice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import InputPartition

from logstore.log.files import DataFile, offsets_sorted
from logstore.log.reader import offset_runs
from logstore.log.schema import TOPIC_SCHEMA

__all__ = [
    "KAFKA_ARROW_SCHEMA",
    "KAFKA_SCHEMA_DDL",
    "PACKED_TASK_RECORDS",
    "ReadTask",
    "TopicSlice",
    "pack_slices",
    "plan_slices",
    "read_slice",
    "read_task",
]

KAFKA_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
"""Spark's Kafka source schema (``KafkaRecordToRowConverter.kafkaSchema``), all columns nullable."""
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"
"""The extra column with ``includeHeaders=true``, as the Kafka source has it."""

KAFKA_ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
)
"""The Arrow schema Spark expects of ``read()`` for :data:`KAFKA_SCHEMA_DDL` (its ``to_arrow_schema``)."""
_HEADERS_ARROW = pa.field(
    "headers", pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])))
)
_READ_BATCH_ROWS = 65_536
PACKED_TASK_RECORDS = _READ_BATCH_ROWS
"""Slices of fewer records share a task, up to this many records (at most ``maxRecordsPerPartition``)."""
_FILE_SCHEMA = pa.schema([f for f in TOPIC_SCHEMA if f.name != "partition"])


@dataclass(frozen=True)
class TopicSlice:
    """Records ``start <= offset < end`` of one partition, read from ``files`` (picklable)."""

    topic: str
    partition: int
    start: int
    end: int
    files: tuple[DataFile, ...]
    include_headers: bool


@dataclass(frozen=True)
class ReadTask(InputPartition):
    """One Spark input partition: the slices one task reads, in order (picklable)."""

    slices: tuple[TopicSlice, ...]

    @property
    def records(self) -> int:
        """Offsets the task's slices span (records, less any removed by compaction)."""
        return sum(s.end - s.start for s in self.slices)


def pack_slices(slices: Sequence[TopicSlice], max_records: int) -> list[ReadTask]:
    """``slices`` as tasks, in order: a slice of ``min(max_records, PACKED_TASK_RECORDS)`` records or more
    has a task of its own; smaller ones are packed together up to that many records a task."""
    budget = min(max_records, PACKED_TASK_RECORDS)
    tasks: list[ReadTask] = []
    group: list[TopicSlice] = []
    size = 0
    for s in slices:
        n = s.end - s.start
        if group and size + n > budget:
            tasks.append(ReadTask(tuple(group)))
            group, size = [], 0
        group.append(s)
        size += n
    if group:
        tasks.append(ReadTask(tuple(group)))
    return tasks


def plan_slices(
    topic: str,
    partition: int,
    start: int,
    end: int,
    files: Sequence[DataFile],
    *,
    max_records: int,
    include_headers: bool,
) -> list[TopicSlice]:
    """``[start, end)`` of a partition as slices of at most about ``max_records`` records.

    Slices are cut only where no file straddles the cut (:func:`logstore.log.reader.offset_cuts`),
    and each slice carries every file that holds an offset inside it: files whose
    ranges overlap (after Delta's ``OPTIMIZE``) land in one slice, so no record is
    skipped or read twice. Each file is opened by one task; a run of files larger
    than ``max_records`` is one slice of its own.
    """
    mine = sorted(
        (f for f in files if f.partition == partition and f.max_offset >= start and f.min_offset < end),
        key=lambda f: f.min_offset,
    )
    out: list[TopicSlice] = []
    lo = start
    group: list[DataFile] = []
    for run in offset_runs(mine):
        group += run
        hi = min(end, max(f.max_offset for f in run) + 1)
        if hi - lo >= max_records:
            out.append(TopicSlice(topic, partition, lo, hi, tuple(group), include_headers))
            lo, group = hi, []
    if lo < end and group:
        out.append(TopicSlice(topic, partition, lo, end, tuple(group), include_headers))
    return out


def read_slice(s: TopicSlice) -> Iterator[pa.RecordBatch]:
    """The slice's records as Arrow batches in the Kafka source schema, offsets ascending.

    Runs on an executor. A file wholly inside the slice, with no other file
    overlapping its offsets, is read whole; other files are read with an offset
    filter (Parquet statistics skip row groups outside it), and files whose
    ranges overlap are merged by offset. Small files (a low-rate topic commits
    one or two requests' records per file) are read in one call each and sent
    to Spark together, up to ``_READ_BATCH_ROWS`` rows a batch: per file and per
    batch costs, not bytes, set a streaming query's read time there. A large
    file is streamed batch by batch, so a task's memory stays about one batch.
    """
    columns = ["offset", "timestamp", "timestamp_type", "key", "value"]
    if s.include_headers:
        columns.append("headers")
    constants = _Constants(s.topic, s.partition)
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for run in offset_runs(s.files):
        whole = len(run) == 1 and run[0].min_offset >= s.start and run[0].max_offset < s.end
        if whole and run[0].num_records <= _READ_BATCH_ROWS:
            t = pq.ParquetFile(run[0].path).read(columns=columns, use_threads=False)
            pending += [_to_kafka(rb, s, constants) for rb in t.to_batches()]
            pending_rows += t.num_rows
            if pending_rows >= _READ_BATCH_ROWS:
                yield _concat(pending)
                pending, pending_rows = [], 0
            continue
        if pending:
            yield _concat(pending)
            pending, pending_rows = [], 0
        if whole:
            pf = pq.ParquetFile(run[0].path)
            for rb in pf.iter_batches(batch_size=_READ_BATCH_ROWS, columns=columns):
                yield _to_kafka(rb, s, constants)
            continue
        filters = [("offset", ">=", s.start), ("offset", "<", s.end)]
        # One schema for every file: another engine's rewrite may store types differently.
        t = pa.concat_tables(
            [pq.read_table(f.path, columns=columns, filters=filters, schema=_FILE_SCHEMA) for f in run]
        )
        if not offsets_sorted(t["offset"]):
            t = t.sort_by("offset")
        for rb in t.to_batches(max_chunksize=_READ_BATCH_ROWS):
            yield _to_kafka(rb, s, constants)
    if pending:
        yield _concat(pending)


def read_task(task: ReadTask) -> Iterator[pa.RecordBatch]:
    """The task's slices' records (:func:`read_slice`, slice after slice), small batches sent to Spark together."""
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for s in task.slices:
        for rb in read_slice(s):
            pending.append(rb)
            pending_rows += rb.num_rows
            if pending_rows >= _READ_BATCH_ROWS:
                yield _concat(pending)
                pending, pending_rows = [], 0
    if pending:
        yield _concat(pending)


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


class _Constants:
    """The ``topic`` and ``partition`` columns of a slice: built once, then sliced (zero-copy) to each batch.

    Built from buffers: ``pa.array`` and ``pa.scalar`` import pandas on first use
    (pyarrow checks Python values for pandas' missing-value markers), which
    would cost every new Python worker ~0.4 s of CPU on its first batch.
    """

    def __init__(self, topic: str, partition: int) -> None:
        self._topic = topic.encode()
        self._partition = partition
        self._size = 0
        self.topic = _strings(self._topic, 0)
        self.partition = _int32s(partition, 0)

    def columns(self, n: int) -> tuple[pa.Array, pa.Array]:
        """The two columns for a batch of ``n`` rows."""
        if n > self._size:
            self._size = max(n, _READ_BATCH_ROWS)
            self.topic = _strings(self._topic, self._size)
            self.partition = _int32s(self._partition, self._size)
        return self.topic.slice(0, n), self.partition.slice(0, n)


def _strings(value: bytes, n: int) -> pa.Array:
    # int32 offsets hold n * len(value): a topic name is at most 249 bytes, a batch _READ_BATCH_ROWS rows.
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(value))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(value * n))


def _int32s(value: int, n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(np.full(n, value, np.int32))])


def _to_kafka(rb: pa.RecordBatch, s: TopicSlice, constants: _Constants) -> pa.RecordBatch:
    topic, partition = constants.columns(rb.num_rows)
    arrays = [
        rb.column("key"),
        rb.column("value"),
        topic,
        partition,
        rb.column("offset"),
        rb.column("timestamp").cast(pa.timestamp("us", tz="UTC")),
        rb.column("timestamp_type").cast(pa.int32()),
    ]
    schema = KAFKA_ARROW_SCHEMA
    if s.include_headers:
        arrays.append(rb.column("headers").cast(_HEADERS_ARROW.type))
        schema = schema.append(_HEADERS_ARROW)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
