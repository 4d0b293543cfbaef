"""Maintenance commits against concurrent writers and each other (Delta optimistic concurrency)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from deltalake.exceptions import CommitFailedError

from logstore.log import file_changes
from logstore.log.catalog import app_log_start
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import AppendResult, ProducerBatch
from maintenance import run_retention, run_segment_compaction


def setup_topic(store: LogStore, make_topic: Callable[..., str], commits: int = 4) -> tuple[str, TopicWriter]:
    t = make_topic(partitions=1, retention_bytes=0)  # retention keeps only the newest file
    w = TopicWriter(store.catalog, t)
    for c in range(commits):
        w.append([ProducerBatch(input_table([0, 0], [f"{c}a".encode(), f"{c}b".encode()]))])
    return t, w


def test_a_writer_steps_over_segment_compaction(store: LogStore, make_topic: Callable[..., str]) -> None:
    t, w = setup_topic(store, make_topic)
    (report,) = run_segment_compaction(store.catalog, t, progress=lambda _: None)
    assert report.files_removed == 4
    # the writer's next version is taken by the compaction: no data changed, so it commits on top
    (res,) = w.append([ProducerBatch(input_table([0], [b"after"]))])
    assert isinstance(res, AppendResult) and res.offsets.to_pylist() == [8]
    assert store.fetch(t, 0, 6, max_records=10).records["value"].to_pylist() == [b"3a", b"3b", b"after"]


def test_a_writer_racing_retention_stays_gap_free(store: LogStore, make_topic: Callable[..., str]) -> None:
    t, w = setup_topic(store, make_topic)
    run_retention(store.catalog, t, progress=lambda _: None)
    # retention only removed files: the writer's offsets still hold and it commits at the next free version
    (res,) = w.append([ProducerBatch(input_table([0], [b"after"]))])
    assert isinstance(res, AppendResult) and res.offsets.to_pylist() == [8]
    assert store.fetch(t, 0, 6, max_records=10).records["value"].to_pylist() == [b"3a", b"3b", b"after"]


def test_maintenance_on_a_stale_snapshot_rebases_over_appends(store: LogStore, make_topic: Callable[..., str]) -> None:
    t, w = setup_topic(store, make_topic)
    stale = store.catalog.table(t)
    first = file_changes.live_files(stale)[0][0]
    w.append([ProducerBatch(input_table([0], [b"meanwhile"]))])
    txns = {app_log_start(0): first.max_offset + 1}
    version = file_changes.commit(stale, [first], [], data_change=True, operation="retention", txns=txns)
    assert version == store.catalog.table(t).version()
    assert store.describe_topic(t).partitions[0].log_start_offset == 2
    assert store.describe_topic(t).partitions[0].high_watermark == 9


def test_two_maintenance_commits_removing_one_file_conflict(store: LogStore, make_topic: Callable[..., str]) -> None:
    t, _ = setup_topic(store, make_topic)
    a, b = store.catalog.table(t), store.catalog.table(t)
    first = file_changes.live_files(a)[0][0]
    file_changes.commit(a, [first], [], data_change=True, operation="retention")
    version = store.catalog.table(t).version()
    with pytest.raises(CommitFailedError):
        file_changes.commit(b, [first], [], data_change=True, operation="retention")
    assert store.catalog.table(t).version() == version
    # the job itself re-plans from the new snapshot and finishes
    (report,) = run_retention(store.catalog, t, progress=lambda _: None)
    assert report.files_removed == 2 and report.log_start_offset == 6
