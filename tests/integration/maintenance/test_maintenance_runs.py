"""Ways to run maintenance: the CLI, the scheduler, the spark-submit entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from pyspark.sql import SparkSession

from logstore.config import LogstoreConfig
from logstore.log.file_changes import live_files
from logstore.store import LogStore
from logstore_cli import main
from maintenance import Scheduler
from tests.support.commits import old_commits
from tests.support.paths import REPO

HOUR_MS = 3600 * 1000


@pytest.mark.spark
def test_scheduler_runs_two_cycles_and_survives_a_failing_topic(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    broken = make_topic(partitions=1, retention_ms=-1)
    deleting = make_topic(partitions=1, retention_ms=HOUR_MS)
    compacted = make_topic(partitions=1, cleanup_policy="compact")
    old_commits(store, broken, 3)
    old_commits(store, deleting, 4)
    old_commits(store, compacted, 4, keys=(b"k", b"k"))
    os.remove(live_files(store.catalog.table(broken))[0][1].path)  # a lost data file: its compaction fails

    caplog.set_level("INFO", logger="logstore.maintenance")
    scheduler = Scheduler(store.catalog, spark=spark, every_s=0)
    scheduler.run_forever(cycles=2)

    assert scheduler.cycles_done == 2
    assert scheduler.failures == 2  # the broken topic, once per cycle
    assert "compact: removed 0 files" in caplog.text and f"failed: {broken}" in caplog.text
    info = store.describe_topic(deleting).partitions[0]
    assert (info.log_start_offset, info.num_files) == (6, 1)  # retention, then nothing left to merge
    assert store.fetch(compacted, 0, store.describe_topic(compacted).partitions[0].log_start_offset).records[
        "value"
    ].to_pylist() == [b"3b"]


@pytest.mark.spark
def test_cli_maintain_commands(
    spark: SparkSession, config: LogstoreConfig, store: LogStore, capsys: pytest.CaptureFixture[str]
) -> None:
    store.create_topic("orders", 1, {"retention.ms": HOUR_MS})
    old_commits(store, "orders", 5)
    root = ["--root", config.root]

    assert main(["maintain", "retention", "--topic", "orders", "--json", *root]) == 0
    out = capsys.readouterr().out
    assert "retention orders/0: removed 4 files" in out
    report = json.loads(out.strip().splitlines()[-1])
    assert report["files_removed"] == 4 and report["log_start_offsets"] == {"orders": {"0": 8}}

    old_commits(store, "orders", 3)
    assert main(["maintain", "compact", *root]) == 0
    assert "compact: removed 4 files" in capsys.readouterr().out
    assert main(["maintain", "vacuum", *root]) == 0
    assert "vacuum: removed 0 files" in capsys.readouterr().out
    assert main(["maintain", "run", "--every", "0s", "--cycles", "2", *root]) == 0
    info = store.describe_topic("orders").partitions[0]
    assert info.high_watermark == 16 and info.num_files == 1


def test_spark_submit_entry_point_runs_as_a_file(store: LogStore, config: LogstoreConfig) -> None:
    store.create_topic("events", 1, {"retention.ms": HOUR_MS})
    old_commits(store, "events", 3)
    # spark-submit runs maintenance/job.py as a script; retention needs no SparkSession
    done = subprocess.run(
        [sys.executable, str(REPO / "maintenance" / "job.py"), "retention", "--root", config.root, "--json"],
        capture_output=True,
        text=True,
        cwd="/",
        env={k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")},
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["job"] == "retention" and report["log_start_offsets"] == {"events": {"0": 4}}
    assert "retention events/0: removed 2 files" in done.stdout
