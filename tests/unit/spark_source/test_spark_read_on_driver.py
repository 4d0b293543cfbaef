"""``maxRecordsReadOnDriver``: small micro-batches read while Spark plans them, handed to Spark from memory.

The stream reader is driven here in-process, as Spark's planning process
drives it; queries on the session are in
``tests/integration/spark/test_spark_read_on_driver.py``.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.serializers import SpecialLengths, read_int, write_with_length
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming import python_streaming_source_runner as runner
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import StructType

from logstore.errors import GroupSubscribedToTopicError, InvalidConfigError
from logstore.groups.leases import GroupLease
from logstore.store import LogStore
from spark_source import KAFKA_ARROW_SCHEMA, LogstoreDataSource, LogstoreStreamReader, PrefetchingStreamReader
from spark_source._planner import split_ids
from spark_source._slices import ReadTask, read_task
from tests.support.spark_helpers import produce


def _reader(store: LogStore, **options: object) -> PrefetchingStreamReader:
    opts = {"logstore.root": store.config.root, **{k: str(v) for k, v in options.items()}}
    reader = LogstoreDataSource(opts).streamReader(StructType())
    assert isinstance(reader, PrefetchingStreamReader)
    return reader


def _table(batches: object) -> pa.Table:
    return pa.Table.from_batches(list(batches))  # type: ignore[call-overload]


def test_the_option_picks_the_reader(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    base = {"logstore.root": store.config.root, "subscribe": t}
    assert type(LogstoreDataSource(base).streamReader(StructType())) is LogstoreStreamReader
    zero = {**base, "maxRecordsReadOnDriver": "0"}
    assert type(LogstoreDataSource(zero).streamReader(StructType())) is LogstoreStreamReader
    assert _reader(store, subscribe=t, maxRecordsReadOnDriver=10).max_records == 10
    with pytest.raises(InvalidConfigError, match="maxRecordsReadOnDriver must be >= 0, got -1"):
        LogstoreDataSource({**base, "maxRecordsReadOnDriver": "-1"}).streamReader(StructType())


def test_a_small_batch_is_read_while_planned_and_handed_over_once(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    produce(store, t, [0, 1, 0])
    reader = _reader(store, subscribe=t, startingOffsets="earliest", maxRecordsReadOnDriver=3)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert split_ids(end)[0] == {t: {"0": 2, "1": 1}}
    # The records were read by latestOffset: they come back from memory after the files are gone.
    planned = reader.partitions(start, end)
    assert len(planned) == 1 and isinstance(planned[0], ReadTask)
    expected = _table(read_task(planned[0]))
    for f in Path(store.catalog.topic_path(t)).glob("*.parquet"):
        f.unlink()
    cached = reader.getCache(start, end)
    assert cached is not None
    assert _table(cached).equals(expected)
    assert offsets_by_partition_of(expected) == {0: [0, 1], 1: [0]}
    assert reader.getCache(start, end) is None  # handed over once; a second planning reads in tasks


def test_a_batch_over_the_limit_is_read_in_tasks(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    produce(store, t, [0, 1, 0, 1])
    reader = _reader(store, subscribe=t, startingOffsets="earliest", maxRecordsReadOnDriver=3)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert reader.getCache(start, end) is None
    tasks = reader.partitions(start, end)
    assert sum(t.records for t in tasks if isinstance(t, ReadTask)) == 4
    # maxOffsetsPerTrigger makes batches the limit allows.
    limited = _reader(store, subscribe=t, startingOffsets="earliest", maxRecordsReadOnDriver=3, maxOffsetsPerTrigger=2)
    first = limited.latestOffset(limited.initialOffset(), limited.getDefaultReadLimit())
    assert isinstance(limited.getDefaultReadLimit(), ReadMaxRows)
    assert limited.getCache(limited.initialOffset(), first) is not None


def test_a_batch_the_driver_cannot_read_is_left_to_tasks(
    store: LogStore, make_topic: Callable[..., str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A storage error while reading on the driver would fail the query; in tasks Spark retries it.
    t = make_topic(partitions=2)
    produce(store, t, [0, 1, 0])
    reader = _reader(store, subscribe=t, startingOffsets="earliest", maxRecordsReadOnDriver=3)
    start = reader.initialOffset()
    files = list(Path(store.catalog.topic_path(t)).rglob("*.parquet"))
    assert files
    for f in files:
        f.rename(tmp_path / f.name)
    with caplog.at_level("WARNING", logger="spark_source"):
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert split_ids(end)[0] == {t: {"0": 2, "1": 1}}
    assert "tasks read it" in caplog.text
    assert reader.getCache(start, end) is None
    for f in files:
        (tmp_path / f.name).rename(f)
    tasks = [p for p in reader.partitions(start, end) if isinstance(p, ReadTask)]
    assert offsets_by_partition_of(_table(rb for task in tasks for rb in reader.read(task))) == {0: [0, 1], 1: [0]}


def test_a_batch_planned_by_an_earlier_run_is_read_in_tasks(store: LogStore, make_topic: Callable[..., str]) -> None:
    """After a restart Spark plans the batch its offset log holds without asking ``latestOffset`` first."""
    t = make_topic(partitions=2)
    produce(store, t, [0, 1, 0])
    start, end = {t: {"0": 0, "1": 0}}, {t: {"0": 2, "1": 1}}
    reader = _reader(store, subscribe=t, maxRecordsReadOnDriver=10)
    # Spark first tells the new run where the query stands: an empty range, nothing read, nothing held.
    assert reader.partitions(end, end) == []
    assert reader.getCache(end, end) is None
    tasks = reader.partitions(start, end)
    assert reader.getCache(start, end) is None
    rows = _table(rb for task in tasks if isinstance(task, ReadTask) for rb in reader.read(task))
    assert offsets_by_partition_of(rows) == {0: [0, 1], 1: [0]}


def offsets_by_partition_of(table: pa.Table) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for p, o in zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True):
        out.setdefault(p, []).append(o)
    return out


def test_spark_s_planning_worker_sends_the_records_with_the_batch(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    """What Spark's planning worker writes to the JVM for this reader: one partition and the records.

    Spark's runner sends a reader's records only for its ``SimpleDataSourceStreamReader`` wrapper, and
    checks their Arrow schema against the query's: this is the protocol the option rides on.
    """
    t = make_topic(partitions=2)
    produce(store, t, [0, 1, 1])
    options = {"subscribe": t, "startingOffsets": "earliest", "maxRecordsReadOnDriver": "5"}
    source = LogstoreDataSource({"logstore.root": store.config.root, **options})
    reader = source.streamReader(StructType())
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())  # type: ignore[call-arg]
    request = io.BytesIO()
    for offsets in (start, end):
        write_with_length(runner.json.dumps(offsets).encode(), request)
    request.seek(0)
    answer = io.BytesIO()
    schema = from_arrow_schema(KAFKA_ARROW_SCHEMA)
    runner.partitions_func(reader, source, schema, 10_000, request, answer)
    answer.seek(0)
    assert read_int(answer) == 1
    answer.read(read_int(answer))  # the pickled partition
    assert read_int(answer) == runner.NON_EMPTY_PYARROW_RECORD_BATCHES
    assert read_int(answer) == SpecialLengths.START_ARROW_STREAM
    records = pa.ipc.open_stream(answer).read_all()
    assert offsets_by_partition_of(records) == {0: [0], 1: [0, 1]}
    # Spark enables availableNow for it as for the reader it wraps.
    flags = io.BytesIO()
    runner.check_support_func(reader, flags)
    flags.seek(0)
    assert read_int(flags) & runner.SUPPORTS_TRIGGER_AVAILABLE_NOW


def test_stop_releases_the_group_s_lease(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    produce(store, t, [0])
    reader = _reader(store, subscribe=t, group="g", maxRecordsReadOnDriver=10)
    reader.initialOffset()  # takes the lease
    other = GroupLease(store.config.root, "g")
    with pytest.raises(GroupSubscribedToTopicError):
        other.acquire({t})
    reader.stop()
    other.acquire({t})
    other.release()
