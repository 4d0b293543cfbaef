"""Maintenance runs in-process: vacuum keeps removed files for the retention window, and a topic whose config
cannot be read is skipped while the others are maintained."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from logstore.log.file_changes import live_files
from logstore.store import LogStore
from maintenance import Scheduler, run_retention, run_vacuum
from tests.support.commits import old_commits

HOUR_MS = 3600 * 1000


def test_vacuum_keeps_removed_files_for_the_retention_window(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=1, retention_ms=HOUR_MS)
    old_commits(store, t, 4)
    gone = live_files(store.catalog.table(t))[0][:3]
    run_retention(store.catalog, t, progress=lambda _: None)
    assert all(os.path.exists(f.path) for f in gone)  # readers of older versions can still read them

    (kept,) = run_vacuum(store.catalog, t, progress=lambda _: None)
    assert kept.files_removed == 0 and all(os.path.exists(f.path) for f in gone)

    (vacuumed,) = run_vacuum(
        store.catalog, t, retention_hours=0, enforce_retention_duration=False, progress=lambda _: None
    )
    assert vacuumed.files_removed == 3 and vacuumed.bytes_removed == sum(f.size_bytes for f in gone)
    assert not any(os.path.exists(f.path) for f in gone)
    assert store.fetch(t, 0, 6).records["offset"].to_pylist() == [6, 7]


def test_a_topic_whose_config_cannot_be_read_is_skipped_and_the_others_maintained(
    store: LogStore, make_topic: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    # A topic directory with an empty Delta log: listed as a topic, but no table to read its config from.
    os.makedirs(os.path.join(store.catalog.topics_dir, "aaa-broken", "_delta_log"))
    deleting = make_topic(partitions=1, retention_ms=HOUR_MS)
    old_commits(store, deleting, 4)

    scheduler = Scheduler(store.catalog, every_s=0)  # no Spark: in-process jobs only
    reports = scheduler.run_cycle()

    assert scheduler.failures == 1
    assert "cannot read topic aaa-broken" in caplog.text
    assert store.describe_topic(deleting).partitions[0].log_start_offset == 6  # retention ran after the failure
    assert any(deleting in r.summary() for r in reports)


def test_a_cycle_logs_what_it_did_once_and_a_quiet_cycle_logs_nothing(
    store: LogStore, make_topic: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    deleting = make_topic(partitions=1, retention_ms=HOUR_MS)
    for _ in range(4):
        make_topic(partitions=1)  # nothing to do on these
    old_commits(store, deleting, 4)
    caplog.set_level("INFO", logger="logstore.maintenance")
    scheduler = Scheduler(store.catalog, every_s=0)

    scheduler.run_cycle()
    lines = [r.getMessage() for r in caplog.records]
    assert [line for line in lines if line.startswith(f"maintenance: retention {deleting}/0: removed 3 files")]
    assert len([line for line in lines if line.startswith("maintenance: retention: removed 3 files")]) == 1, lines
    assert not [line for line in lines if "removed 0 files" in line and "wrote 0 files" in line], lines

    caplog.clear()
    scheduler.run_cycle()  # nothing left to do
    assert [r.getMessage() for r in caplog.records] == []
