"""Key compaction keeps the latest record per key, expires old tombstones, spares the active tail."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from logstore.errors import OffsetOutOfRangeError
from logstore.log import tables
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from maintenance import run_key_compaction, run_retention
from tests.support.server import Server
from tests.support.spark_helpers import drain, read_stream

pytestmark = pytest.mark.spark

HOUR_MS = 3600 * 1000
NOW_MS = 1_800_000_000_000
Record = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value


def produce(w: TopicWriter, records: list[tuple[int, bytes | None, bytes | None]], ts_ms: int) -> list[Record]:
    """One commit of (partition, key, value) records; returns them with their offsets."""
    parts = [r[0] for r in records]
    (res,) = w.append(
        [
            ProducerBatch(
                input_table(
                    parts, [r[2] for r in records], keys=[r[1] for r in records], timestamps_ms=[ts_ms] * len(records)
                )
            )
        ]
    )
    assert not isinstance(res, Exception)
    offsets = res.offsets.to_pylist()
    return [(p, o, k, v) for (p, k, v), o in zip(records, offsets, strict=True)]


def latest_per_key(records: list[Record]) -> list[Record]:
    latest: dict[tuple[int, bytes], int] = {}
    for p, o, k, _ in records:
        if k is not None:
            latest[(p, k)] = max(o, latest.get((p, k), -1))
    return [r for r in records if r[2] is None or latest[(r[0], r[2])] == r[1]]


def live(spark: SparkSession, store: LogStore, topic: str) -> list[Record]:
    rows = (
        spark.read.format("delta").load(store.catalog.topic_path(topic)).select("partition", "offset", "key", "value")
    )
    return sorted((r[0], r[1], r[2], r[3]) for r in rows.collect())


def test_keeps_exactly_the_latest_record_per_key(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2, cleanup_policy="compact", delete_retention_ms=24 * HOUR_MS)
    w = TopicWriter(store.catalog, t)
    written: list[Record] = []
    for c in range(6):
        batch: list[tuple[int, bytes | None, bytes | None]] = [
            (i % 2, f"k{(c + i) % 4}".encode(), f"v{c}-{i}".encode()) for i in range(6)
        ]
        batch.append((0, None, f"unkeyed-{c}".encode()))
        written += produce(w, batch, NOW_MS - 2 * HOUR_MS)
    written += produce(w, [(1, b"k1", None)], NOW_MS - 2 * HOUR_MS)  # a young tombstone: kept
    hw = [store.describe_topic(t).partitions[p].high_watermark for p in (0, 1)]
    epoch = tables.txn_version(store.catalog.table(t), tables.APP_EPOCH)

    reports = run_key_compaction(store.catalog, t, spark=spark, now_ms=NOW_MS, progress=lambda _: None)

    expected = sorted(latest_per_key(written))
    got = live(spark, store, t)
    schema = "partition int, offset long, key binary, value binary"
    assert_df_equality(spark.createDataFrame(got, schema), spark.createDataFrame(expected, schema))
    assert sum(r.records_removed for r in reports) == len(written) - len(expected)
    info = store.describe_topic(t)
    assert [p.high_watermark for p in info.partitions] == hw
    assert [p.num_files for p in info.partitions] == [1, 1]
    dt = store.catalog.table(t)
    assert tables.txn_version(dt, tables.APP_EPOCH) == epoch
    assert dt.protocol().min_writer_version == 2
    # consumers see gaps, not renumbering; the writer keeps counting from the high watermark
    fetched = store.fetch(t, 1, info.partitions[1].log_start_offset, max_records=100).records
    assert fetched["offset"].to_pylist() == [r[1] for r in expected if r[0] == 1]
    w.append([ProducerBatch(input_table([0], [b"next"], keys=[b"k0"]))])
    assert store.describe_topic(t).partitions[0].high_watermark == hw[0] + 1


def test_tombstones_expire_after_delete_retention_ms(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=1, cleanup_policy="compact", delete_retention_ms=HOUR_MS)
    w = TopicWriter(store.catalog, t)
    produce(w, [(0, b"a", b"1"), (0, b"b", b"1"), (0, b"c", b"1")], NOW_MS - 5 * HOUR_MS)
    produce(w, [(0, b"a", None)], NOW_MS - 3 * HOUR_MS)  # old tombstone: a disappears entirely
    produce(w, [(0, b"b", None)], NOW_MS - 10 * 60 * 1000)  # young tombstone: kept until it ages

    (report,) = run_key_compaction(store.catalog, t, spark=spark, now_ms=NOW_MS, progress=lambda _: None)

    assert live(spark, store, t) == [(0, 2, b"c", b"1"), (0, 4, b"b", None)]
    assert report.records_removed == 3
    assert report.log_start_offset == 0  # compaction leaves gaps; it never moves the log start
    (again,) = run_key_compaction(store.catalog, t, spark=spark, now_ms=NOW_MS + 2 * HOUR_MS, progress=lambda _: None)
    assert live(spark, store, t) == [(0, 2, b"c", b"1")]
    assert again.records_removed == 1
    assert store.describe_topic(t).partitions[0].high_watermark == 5


def test_records_younger_than_the_lag_are_never_touched(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=1, cleanup_policy="compact,delete", min_compaction_lag_ms=HOUR_MS)
    w = TopicWriter(store.catalog, t)
    produce(w, [(0, b"a", b"old-1"), (0, b"a", b"old-2")], NOW_MS - 2 * HOUR_MS)
    produce(w, [(0, b"a", b"young-1"), (0, b"a", b"young-2")], NOW_MS - 10 * 60 * 1000)

    run_key_compaction(store.catalog, t, spark=spark, now_ms=NOW_MS, progress=lambda _: None)

    # the old file is cleaned (superseded even by the tail); the tail keeps its duplicates
    assert live(spark, store, t) == [(0, 2, b"a", b"young-1"), (0, 3, b"a", b"young-2")]


def test_delete_only_topics_are_left_alone(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=1)
    w = TopicWriter(store.catalog, t)
    produce(w, [(0, b"a", b"1"), (0, b"a", b"2")], NOW_MS - HOUR_MS)
    assert run_key_compaction(store.catalog, t, spark=spark, now_ms=NOW_MS, progress=lambda _: None) == []
    assert len(live(spark, store, t)) == 2


def test_compaction_never_moves_the_log_start_offset(
    spark: SparkSession,
    store: LogStore,
    make_topic: Callable[..., str],
    server: Callable[..., Server],
    tmp_path: Path,
) -> None:
    t = make_topic(partitions=1, cleanup_policy="compact,delete", delete_retention_ms=24 * HOUR_MS)
    w = TopicWriter(store.catalog, t)
    produce(w, [(0, b"a", b"1"), (0, b"b", b"1")], NOW_MS - 2 * HOUR_MS)  # offsets 0, 1
    query = read_stream(spark, store, subscribe=t, startingOffsets="earliest", failOnDataLoss="true")
    rows, _ = drain(query, tmp_path)
    assert rows.count() == 2  # the query's position is 2
    produce(w, [(0, b"a", b"2"), (0, b"b", b"2"), (0, b"x", b"1")], NOW_MS - 2 * HOUR_MS)  # 2, 3, 4
    produce(w, [(0, b"a", b"3"), (0, b"b", b"3")], NOW_MS - 2 * HOUR_MS)  # 5, 6
    produce(w, [(0, b"y", b"1")], NOW_MS)  # 7: younger than the lag, the active tail

    (report,) = run_key_compaction(store.catalog, t, spark=spark, now_ms=NOW_MS, progress=lambda _: None)

    assert report.records_removed == 4  # 0..3 are superseded; the first record kept is 4
    assert report.log_start_offset == 0
    info = store.describe_topic(t).partitions[0]
    assert (info.log_start_offset, info.high_watermark) == (0, 8)
    # a fetch from any offset at or above the log start returns the next record kept
    api = server(Path(store.config.root)).client()
    fetched = api.get(f"/v1/topics/{t}/partitions/0/records", params={"offset": 0, "max_records": 2}).json()
    assert [r["offset"] for r in fetched["records"]] == [4, 5] and fetched["log_start_offset"] == 0
    assert store.fetch(t, 0, 2, max_records=1).records["value"].to_pylist() == [b"1"]
    # the query resumes at 2 without seeing data loss, and reads exactly the records kept
    rows, _ = drain(read_stream(spark, store, subscribe=t, failOnDataLoss="true"), tmp_path)
    assert sorted(r.offset for r in rows.select("offset").collect()) == [0, 1, 4, 5, 6, 7]

    # only retention moves it: keeping the newest file deletes 4..6, and the log then starts at 7
    store.alter_topic(t, config={"retention.bytes": 0})
    (retained,) = run_retention(store.catalog, t, progress=lambda _: None)
    assert retained.log_start_offset == store.describe_topic(t).partitions[0].log_start_offset == 7
    with pytest.raises(OffsetOutOfRangeError):
        store.fetch(t, 0, 6)
    below = api.get(f"/v1/topics/{t}/partitions/0/records", params={"offset": 6})
    assert below.status_code == 416 and below.json()["error_code"] == "OFFSET_OUT_OF_RANGE"
    # a later compaction leaves it where retention put it
    run_key_compaction(store.catalog, t, spark=spark, now_ms=NOW_MS + 2 * HOUR_MS, progress=lambda _: None)
    assert store.describe_topic(t).partitions[0].log_start_offset == 7
