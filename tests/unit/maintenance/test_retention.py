"""Retention deletes whole old files only, moves the log start offset up, keeps the newest file."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import pytest

from logstore.config import load_config
from logstore.errors import OffsetOutOfRangeError
from logstore.log.catalog import Catalog
from logstore.log.file_changes import live_files
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from maintenance import plan_retention, run_job, run_retention

HOUR_MS = 3600 * 1000
NOW_MS = 1_800_000_000_000


def commit_actions(catalog: Catalog, topic: str, version: int) -> list[str]:
    """The action kinds in one commit file of the Delta log."""
    path = os.path.join(catalog.topic_path(topic), "_delta_log", f"{version:020d}.json")
    with open(path) as f:
        return [next(iter(json.loads(line))) for line in f if line.strip()]


def produce(writer: TopicWriter, partitions: int, commits: int, ts_ms: int, per_commit: int = 3) -> None:
    """``commits`` commits, each one file per partition, records stamped ``ts_ms``."""
    for c in range(commits):
        parts = [p for p in range(partitions) for _ in range(per_commit)]
        values: list[bytes | None] = [f"v{c}-{i}".encode() for i in range(len(parts))]
        writer.append([ProducerBatch(input_table(parts, values, timestamps_ms=[ts_ms] * len(parts)))])


def test_retention_by_time_removes_only_whole_old_files(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2, retention_ms=HOUR_MS)
    w = TopicWriter(store.catalog, t)
    produce(w, 2, 4, NOW_MS - 2 * HOUR_MS)  # offsets 0..11 per partition: all older than retention.ms
    produce(w, 2, 2, NOW_MS - 10)  # offsets 12..17: young
    before = store.describe_topic(t)

    reports = run_retention(store.catalog, t, now_ms=NOW_MS, progress=lambda _: None)

    assert [r.files_removed for r in reports] == [4, 4]
    assert [r.records_removed for r in reports] == [12, 12]
    assert [r.log_start_offset for r in reports] == [12, 12]
    version = reports[0].version
    assert version is not None and reports[1].version == version
    kinds = commit_actions(store.catalog, t, version)
    assert "add" not in kinds and kinds.count("remove") == 8, kinds
    after = store.describe_topic(t)
    for p in (0, 1):
        assert after.partitions[p].log_start_offset == 12
        assert after.partitions[p].high_watermark == before.partitions[p].high_watermark == 18
        assert after.partitions[p].num_files == 2
    reader = store.reader(t)
    with pytest.raises(OffsetOutOfRangeError):
        reader.fetch(0, 11)
    assert reader.fetch(0, 12, max_records=100).records["offset"].to_pylist() == list(range(12, 18))
    assert store.catalog.table(t).protocol().min_writer_version == 2


def test_retention_never_deletes_the_newest_file(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=1, retention_ms=HOUR_MS)
    w = TopicWriter(store.catalog, t)
    produce(w, 1, 3, NOW_MS - 5 * HOUR_MS)

    (report,) = run_retention(store.catalog, t, now_ms=NOW_MS, progress=lambda _: None)

    assert report.files_removed == 2 and report.log_start_offset == 6
    info = store.describe_topic(t).partitions[0]
    assert (info.num_files, info.log_start_offset, info.high_watermark) == (1, 6, 9)
    # the writer that held the table before retention keeps appending from the high watermark
    w.append([ProducerBatch(input_table([0], [b"next"]))])
    assert store.fetch(t, 0, 6, max_records=10).records["offset"].to_pylist() == [6, 7, 8, 9]


def test_retention_by_size_deletes_oldest_files_down_to_the_limit(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=1)
    w = TopicWriter(store.catalog, t)
    produce(w, 1, 6, NOW_MS - 10)
    files = live_files(store.catalog.table(t))[0]
    sizes = [f.size_bytes for f in files]
    limit = sum(sizes[-2:]) + 1  # keeps the last three files: two are not enough
    store.alter_topic(t, config={"retention.bytes": limit})

    (report,) = run_retention(store.catalog, t, now_ms=NOW_MS, progress=lambda _: None)

    assert report.files_removed == 3
    left = live_files(store.catalog.table(t))[0]
    assert [f.min_offset for f in left] == [9, 12, 15]
    assert sum(f.size_bytes for f in left) >= limit > sum(f.size_bytes for f in left[1:])
    assert store.describe_topic(t).partitions[0].log_start_offset == 9
    with pytest.raises(OffsetOutOfRangeError):
        store.fetch(t, 0, 8)


def test_topic_settings_override_the_service_defaults(tmp_path: object) -> None:
    config = load_config(
        environ={}, path=None, overrides={"logstore.root": f"{tmp_path}/data", "retention.ms": HOUR_MS}
    )
    store = LogStore(config)
    store.create_topic("by-default", 1)
    store.create_topic("kept-forever", 1, {"retention.ms": -1})
    store.create_topic("compacted", 1, {"cleanup.policy": "compact"})
    for t in ("by-default", "kept-forever", "compacted"):
        produce(TopicWriter(store.catalog, t), 1, 3, NOW_MS - 2 * HOUR_MS)

    report = run_job("retention", store.catalog, now_ms=NOW_MS, progress=lambda _: None)

    assert report.log_start_offsets() == {"by-default": {0: 6}, "compacted": {0: 0}, "kept-forever": {0: 0}}
    assert report.files_removed == 2 and not report.errors
    assert "retention: removed 2 files" in report.summary()


def test_plan_stops_at_the_first_young_file(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=1, retention_ms=HOUR_MS)
    w = TopicWriter(store.catalog, t)
    produce(w, 1, 1, NOW_MS - 3 * HOUR_MS)
    produce(w, 1, 1, NOW_MS)  # young file between old ones: retention must not punch a hole
    produce(w, 1, 1, NOW_MS - 3 * HOUR_MS)
    produce(w, 1, 1, NOW_MS)
    files = live_files(store.catalog.table(t))[0]
    _, config = store.catalog.topic_config(t)
    assert [f.min_offset for f in plan_retention(files, config, NOW_MS)] == [0]


def test_retention_time_follows_files_removed_not_table_size(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=1, retention_ms=HOUR_MS)
    w = TopicWriter(store.catalog, t)
    produce(w, 1, 5, NOW_MS - 3 * HOUR_MS, per_commit=1)
    produce(w, 1, 195, NOW_MS, per_commit=1)
    started = time.perf_counter()
    (report,) = run_retention(store.catalog, t, now_ms=NOW_MS, progress=lambda _: None)
    assert report.files_removed == 5
    assert time.perf_counter() - started < 5
