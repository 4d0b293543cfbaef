"""Compaction of ``_offsets``: the latest commits per key survive, concurrent commits are never lost."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from logstore.config import LogstoreConfig
from logstore.errors import ConcurrentTransactionsError
from logstore.groups.offsets import OffsetsStore
from logstore.store import LogStore
from logstore_cli import main
from maintenance import Scheduler
from maintenance.offsets import commit_offsets_compaction, plan_offsets_compaction, run_offsets_compaction


def live_files(root: str) -> list[str]:
    return pa.table(DeltaTable(os.path.join(root, "_offsets")).get_add_actions())["path"].to_pylist()


def rows(root: str) -> pa.Table:
    return DeltaTable(os.path.join(root, "_offsets")).to_pyarrow_table()


def commit_rounds(offsets: OffsetsStore, rounds: int) -> None:
    for i in range(rounds):
        offsets.commit("billing", "orders", {0: i, 1: 10 * i})
        offsets.commit("audit", "orders", {0: 100 + i})


def test_compaction_keeps_the_latest_commits_of_every_key_in_one_file(tmp_path: Path) -> None:
    root = str(tmp_path)
    offsets = OffsetsStore(root)
    commit_rounds(offsets, 12)
    before = offsets.committed()
    [report] = run_offsets_compaction(root, keep=3, progress=lambda _: None)
    assert (report.files_removed, report.files_added, report.records_removed) == (24, 1, 36 - 9)
    assert live_files(root) and len(live_files(root)) == 1
    assert OffsetsStore(root).committed() == offsets.committed() == before
    kept = rows(root).sort_by([("group", "ascending"), ("partition", "ascending"), ("commit_seq", "ascending")])
    assert kept.select(["group", "partition", "offset"]).to_pylist() == [
        {"group": "audit", "partition": 0, "offset": o} for o in (109, 110, 111)
    ] + [{"group": "billing", "partition": 0, "offset": o} for o in (9, 10, 11)] + [
        {"group": "billing", "partition": 1, "offset": o} for o in (90, 100, 110)
    ]
    # Commits go on after it, and the next compaction folds them in.
    offsets.commit("billing", "orders", {0: 50})
    assert OffsetsStore(root).committed("billing")[("billing", "orders", 0)][0] == 50
    run_offsets_compaction(root, keep=1, progress=lambda _: None)
    assert {k: v[0] for k, v in OffsetsStore(root).committed().items()} == {
        ("audit", "orders", 0): 111,
        ("billing", "orders", 0): 50,
        ("billing", "orders", 1): 110,
    }
    assert len(rows(root)) == 3


def test_a_commit_made_while_compacting_survives(tmp_path: Path) -> None:
    root = str(tmp_path)
    offsets = OffsetsStore(root)
    commit_rounds(offsets, 5)
    plan = plan_offsets_compaction(DeltaTable(os.path.join(root, "_offsets")), keep=1)
    # Between the compaction's snapshot and its commit, groups go on committing.
    offsets.commit("billing", "orders", {0: 77})
    offsets.commit("new-group", "orders", {0: 1})
    commit_offsets_compaction(plan)
    got = {k: v[0] for k, v in OffsetsStore(root).committed().items()}
    assert got == {
        ("audit", "orders", 0): 104,
        ("billing", "orders", 0): 77,
        ("billing", "orders", 1): 40,
        ("new-group", "orders", 0): 1,
    }
    assert len(live_files(root)) == 3  # the compacted file and the two later commits


def test_compactions_racing_commits_lose_nothing(tmp_path: Path) -> None:
    root = str(tmp_path)
    OffsetsStore(root).commit("g0", "t", {0: 0})
    last: dict[str, int] = {}

    def committer(group: str) -> None:
        store = OffsetsStore(root)
        for i in range(30):
            store.commit(group, "t", {0: i})
            last[group] = i

    threads = [threading.Thread(target=committer, args=(f"g{k}",)) for k in range(3)]
    for th in threads:
        th.start()
    compactions = 0
    while any(th.is_alive() for th in threads) or compactions < 3:
        try:
            run_offsets_compaction(root, keep=2, progress=lambda _: None)
            compactions += 1
        except ConcurrentTransactionsError:
            pass  # another compaction's files moved under it (not here: one compactor), or a retry next cycle
    for th in threads:
        th.join()
    run_offsets_compaction(root, keep=2, progress=lambda _: None)
    assert {k[0]: v[0] for k, v in OffsetsStore(root).committed().items()} == {"g0": 29, "g1": 29, "g2": 29}
    assert len(rows(root)) == 6


def test_the_second_of_two_racing_compactions_changes_nothing(tmp_path: Path) -> None:
    root = str(tmp_path)
    offsets = OffsetsStore(root)
    commit_rounds(offsets, 3)
    first = plan_offsets_compaction(DeltaTable(os.path.join(root, "_offsets")), keep=1)
    second = plan_offsets_compaction(DeltaTable(os.path.join(root, "_offsets")), keep=1)
    commit_offsets_compaction(first)
    files = sorted(os.listdir(os.path.join(root, "_offsets")))
    with pytest.raises(ConcurrentTransactionsError):
        commit_offsets_compaction(second)
    assert sorted(os.listdir(os.path.join(root, "_offsets"))) == files  # its file is gone again
    assert len(rows(root)) == 3


def test_vacuum_deletes_the_compacted_away_files(tmp_path: Path) -> None:
    root = str(tmp_path)
    commit_rounds(OffsetsStore(root), 4)
    table_dir = os.path.join(root, "_offsets")

    def parquet_files() -> int:
        return sum(name.endswith(".parquet") for name in os.listdir(table_dir))

    run_offsets_compaction(root, keep=1, progress=lambda _: None)  # default retention: nothing deleted yet
    assert parquet_files() == 9
    run_offsets_compaction(root, keep=1, vacuum_retention_hours=0, enforce_retention_duration=False, progress=print)
    assert parquet_files() == 1
    assert len(OffsetsStore(root).committed()) == 3


def test_maintain_offsets_and_the_scheduler_compact_offsets(
    config: LogstoreConfig, store: LogStore, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    commit_rounds(store.offsets, 4)
    monkeypatch.setenv("LOGSTORE_OFFSETS_HISTORY_COMMITS", "2")
    assert main(["maintain", "offsets", "--root", config.root]) == 0
    assert "offsets _offsets: 8 files (6 old commits) compacted into 1" in capsys.readouterr().out
    assert len(live_files(config.root)) == 1
    commit_rounds(store.offsets, 2)
    Scheduler(store.catalog, every_s=0).run_forever(cycles=1)  # no topics: the offsets table alone
    assert len(live_files(config.root)) == 1
    assert {k: v[0] for k, v in OffsetsStore(config.root).committed().items()} == {
        ("audit", "orders", 0): 101,
        ("billing", "orders", 0): 1,
        ("billing", "orders", 1): 10,
    }
