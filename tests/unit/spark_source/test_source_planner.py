"""The source's planner (``spark_source._planner``) and stream reader, which run in the Python process Spark starts
per query: driven here in-process, without a JVM."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from logstore.config import LogstoreConfig, load_config
from logstore.errors import UnknownTopicOrPartitionError
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from spark_source import LogstoreDataSource, LogstoreStreamReader
from spark_source._options import SourceOptions
from spark_source._planner import Planner
from spark_source._slices import ReadTask


def _store(root: Path) -> LogStore:
    return LogStore(load_config(environ={}, overrides={"logstore.root": str(root)}))


def test_a_topic_deleted_and_created_again_is_planned_as_the_new_topic(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.create_topic("t", 2)
    for _ in range(5):
        store.append("t", [ProducerBatch(input_table([0, 1], [b"a", b"b"]))])
    planner = Planner(SourceOptions.parse({"logstore.root": str(tmp_path), "subscribe": "t"}, streaming=True))
    assert {p: v.high_watermark for p, v in planner.views()["t"].items()} == {0: 5, 1: 5}
    store.delete_topic("t")
    with pytest.raises(UnknownTopicOrPartitionError):
        planner.views()
    store.create_topic("t", 3)
    for _ in range(7):  # past the old table's version: read as the old table, these would be commits 6 and 7
        store.append("t", [ProducerBatch(input_table([2], [b"c"]))])
    assert {p: v.high_watermark for p, v in planner.views()["t"].items()} == {0: 0, 1: 0, 2: 7}


def test_a_pattern_skips_a_topic_deleted_between_listing_and_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path)
    for name in ("logs-a", "logs-b"):
        store.create_topic(name, 1)
        store.append(name, [ProducerBatch(input_table([0], [b"x"]))])
    planner = Planner(
        SourceOptions.parse({"logstore.root": str(tmp_path), "subscribePattern": "logs-.*"}, streaming=True)
    )
    assert sorted(planner.views()) == ["logs-a", "logs-b"]
    listed = planner.catalog.list_topics()  # what a listing just before the delete saw
    store.delete_topic("logs-b")
    monkeypatch.setattr(planner.catalog, "list_topics", lambda: listed)
    assert sorted(planner.views()) == ["logs-a"]


def test_a_query_from_latest_starts_its_first_batch_where_it_planned_it(tmp_path: Path) -> None:
    """Spark asks for the initial offset twice before the first batch commits, records arriving in between.

    The calls below are in the order Spark's micro-batch loop makes them: the initial offset as the start
    of the first ``latestOffset``, then again as the start of that batch's input partitions.
    """
    store = _store(tmp_path)
    store.create_topic("t", 1)

    def produce(n: int) -> None:
        store.append("t", [ProducerBatch(input_table([0] * n, [b"v"] * n))])

    produce(3)
    reader = LogstoreStreamReader(
        SourceOptions.parse({"logstore.root": str(tmp_path), "subscribe": "t"}, streaming=True)
    )
    first = reader.initialOffset()
    ids = {"@topic_ids": {"t": store.catalog.topic_id("t")}}  # the topic each position is of
    assert first == {"t": {"0": 3}} | ids  # startingOffsets=latest, the default
    produce(2)
    end = reader.latestOffset(first, ReadAllAvailable())
    assert end == {"t": {"0": 5}} | ids
    produce(2)
    assert reader.initialOffset() == first
    tasks = reader.partitions(reader.initialOffset(), end)
    assert [(s.start, s.end) for task in tasks if isinstance(task, ReadTask) for s in task.slices] == [(3, 5)]


def test_the_reported_latest_offset_is_the_one_the_batch_was_planned_on(
    config: LogstoreConfig, store: LogStore, make_topic: Callable[..., str]
) -> None:
    # Spark asks reportLatestOffset right after latestOffset (for the progress report): the answer is the high
    # watermarks latestOffset read, as Spark's Kafka source reports, not a second read of every topic's log.
    t = make_topic(partitions=2)
    store.append(t, [ProducerBatch(input_table([0, 1, 1], [b"a", b"b", b"c"]))])
    reader = LogstoreDataSource({"logstore.root": config.root, "subscribe": t}).streamReader(None)  # type: ignore[arg-type]
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())  # type: ignore[call-arg]
    store.append(t, [ProducerBatch(input_table([0], [b"d"]))])

    ids = {"@topic_ids": {t: store.catalog.topic_id(t)}}
    assert end == {t: {"0": 1, "1": 2}} | ids
    assert reader.reportLatestOffset() == end
    assert reader.latestOffset(end, ReadAllAvailable()) == {t: {"0": 2, "1": 2}} | ids  # type: ignore[call-arg]
    assert reader.reportLatestOffset() == {t: {"0": 2, "1": 2}} | ids
    reader.stop()
