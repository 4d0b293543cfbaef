"""Consumer-group offsets: commit, read back the latest, lag = HW - committed."""

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from logstore.errors import GroupIdNotFoundError, InvalidGroupIdError, InvalidRequestError, OffsetOutOfRangeError
from logstore.groups.offsets import OFFSETS_SCHEMA, OffsetsStore
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import GroupTopicPartition, ProducerBatch

KEY = GroupTopicPartition("g", "t", 0)


def test_latest_commit_wins_and_lag_follows(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    store.append(t, [ProducerBatch(input_table([0] * 5 + [1] * 3, [b"v"] * 8))])
    store.commit_offsets("g", t, {0: 4, 1: 1})
    store.commit_offsets("g", t, {0: 2}, metadata="rewound")
    rows = {r.partition: r for r in store.describe_group("g")}
    assert (rows[0].committed_offset, rows[0].high_watermark, rows[0].lag, rows[0].metadata) == (2, 5, 3, "rewound")
    assert (rows[1].committed_offset, rows[1].lag) == (1, 2)
    assert store.list_groups() == ["g"]


def test_offsets_survive_a_new_store(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    store.append(t, [ProducerBatch(input_table([0], [b"v"]))])
    store.commit_offsets("g", t, {0: 1})
    assert OffsetsStore(store.config.root).committed("g") == {("g", t, 0): (1, pytest.approx(0, abs=1e13), None)}


def test_bad_commits(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    with pytest.raises(OffsetOutOfRangeError):
        store.commit_offsets("g", t, {0: 1})
    with pytest.raises(InvalidGroupIdError):
        store.commit_offsets("", t, {0: 0})
    with pytest.raises(GroupIdNotFoundError):
        store.describe_group("nobody")


def test_reset_to_earliest_latest_offset_and_timestamp(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    store.append(t, [ProducerBatch(input_table([0, 0, 0, 1], [b"v"] * 4, timestamps_ms=[1000, 2000, 3000, 500]))])
    assert store.reset_offsets("g", t, "latest") == {0: 3, 1: 1}
    assert store.reset_offsets("g", t, "earliest") == {0: 0, 1: 0}
    assert store.reset_offsets("g", t, {"offset": 2}) == {0: 2, 1: 1}  # clamped to the HW
    assert store.reset_offsets("g", t, {"timestamp": 1500}) == {0: 1, 1: 1}
    assert {r.partition: r.committed_offset for r in store.describe_group("g")} == {0: 1, 1: 1}
    with pytest.raises(InvalidRequestError):
        store.reset_offsets("g", t, "yesterday")


def test_a_clock_going_backwards_cannot_move_a_group_back(tmp_path: Path) -> None:
    ahead = OffsetsStore(str(tmp_path), clock_ms=lambda: 2_000_000_000_000)
    behind = OffsetsStore(str(tmp_path), clock_ms=lambda: 1_000_000_000_000)  # another host, its clock years behind
    ahead.commit("g", "t", {0: 10, 1: 4})
    behind.commit("g", "t", {0: 3})  # committed after: the group's offset of partition 0 is 3 now
    ahead.commit("g", "t", {1: 5})
    for reader in (ahead, behind, OffsetsStore(str(tmp_path))):
        got = {p: o for (_, _, p), (o, _, _) in reader.committed("g", "t").items()}
        assert got == {0: 3, 1: 5}


def test_racing_commits_of_one_group_each_get_their_own_number(tmp_path: Path) -> None:
    stores = [OffsetsStore(str(tmp_path)) for _ in range(4)]
    stores[0].commit("g", "t", {0: 0})

    def commit_many(store: OffsetsStore, base: int) -> None:
        for i in range(5):
            store.commit("g", "t", {0: base + i})

    threads = [threading.Thread(target=commit_many, args=(s, 100 * k)) for k, s in enumerate(stores)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rows = DeltaTable(str(tmp_path / "_offsets")).to_pyarrow_table().sort_by("commit_seq")
    assert rows["commit_seq"].to_pylist() == list(range(21))
    last = rows["offset"][-1].as_py()
    assert OffsetsStore(str(tmp_path)).committed("g")[("g", "t", 0)][0] == last


def test_a_table_from_before_commit_seq_still_reads(tmp_path: Path) -> None:
    path = str(tmp_path / "_offsets")
    old_schema = pa.schema([f for f in OFFSETS_SCHEMA if f.name != "commit_seq"])
    old = pa.table(
        {
            "group": ["g", "g", "h"],
            "topic": ["t", "t", "t"],
            "partition": [0, 0, 0],
            "offset": [7, 5, 9],
            "commit_time": [3_000_000, 2_000_000, 1_000_000],
            "metadata": [None, None, "x"],
        }
    ).cast(old_schema)
    write_deltalake(path, old)
    store = OffsetsStore(str(tmp_path), clock_ms=lambda: 1)  # a clock far behind the old rows
    assert store.committed("g") == {("g", "t", 0): (7, 3_000, None)}
    store.commit("g", "t", {0: 4})  # newer than every row without a number, whatever the clocks say
    assert store.committed() == {("g", "t", 0): (4, 1, None), ("h", "t", 0): (9, 1_000, "x")}


def _commit_engines(path: Path) -> list[str]:
    """The engine that made each commit of ``_offsets``, in version order."""
    out = []
    for name in sorted(n for n in os.listdir(path / "_offsets" / "_delta_log") if n.endswith(".json")):
        first = (path / "_offsets" / "_delta_log" / name).read_text().splitlines()[0]
        out.append(json.loads(first)["commitInfo"].get("engineInfo", ""))
    return out


def test_commits_after_the_first_append_without_rebuilding_the_tables_state(tmp_path: Path) -> None:
    # delta-rs's write path rebuilds the table's state on every commit (~30 ms, growing with the log);
    # after the first commit (which creates the table) a group commit only adds a file and a commit file.
    store = OffsetsStore(str(tmp_path))
    for i in range(12):
        store.commit("g", "t", {0: i, 1: 2 * i})
    engines = _commit_engines(tmp_path)
    assert len(engines) == 12
    assert all(e == "logstore" for e in engines[1:]), engines
    rows = DeltaTable(str(tmp_path / "_offsets")).to_pyarrow_table().sort_by("commit_seq")
    assert rows["commit_seq"].to_pylist() == [s for s in range(12) for _ in (0, 1)]
    assert OffsetsStore(str(tmp_path)).committed("g") == store.committed("g")
    assert {p: o for (_, _, p), (o, _, _) in store.committed("g").items()} == {0: 11, 1: 22}


def test_a_version_taken_by_another_group_is_not_a_conflict(tmp_path: Path) -> None:
    # Two processes' stores, each behind the other's commits: a taken version of another group's commit
    # is stepped over with the same numbers; one of the same group's moves this group's number on.
    a, b = OffsetsStore(str(tmp_path)), OffsetsStore(str(tmp_path))
    a.commit("g", "t", {0: 1})
    b.commit("h", "t", {0: 1})
    a.commit("h", "t", {0: 2})  # version taken by b's commit of h: read it, number 1 for h
    b.commit("g", "t", {0: 2})  # b's handle is behind a's two commits
    a.commit("g", "t", {0: 3})
    rows = DeltaTable(str(tmp_path / "_offsets")).to_pyarrow_table()
    seqs: dict[str, list[int]] = {}
    for group, seq in zip(rows["group"].to_pylist(), rows["commit_seq"].to_pylist(), strict=True):
        seqs.setdefault(group, []).append(seq)
    assert {g: sorted(s) for g, s in seqs.items()} == {"g": [0, 1, 2], "h": [0, 1]}
    for reader in (a, b, OffsetsStore(str(tmp_path))):
        assert {k[0]: v[0] for k, v in reader.committed().items()} == {"g": 3, "h": 2}


def test_a_slow_reader_of_an_older_version_never_hides_a_newer_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One node's store, read by several threads at once (a group's coordinator placing a partition, the
    # group listing, the console's sampler). A reader of version n that is still reading its files while
    # another thread loads version n + 1 must not file its answer under n + 1: every later read would get
    # the older offset until the table moves again, and a partition handed to a new member then starts
    # below the group's commit (the nemesis's reread_after_commit).
    store = OffsetsStore(str(tmp_path))
    store.commit("g", "t", {0: 1})
    assert store.committed("g", "t")[KEY].offset == 1
    store.commit("g", "t", {0: 2})  # version 1: a file no reader has read yet
    reading, resume = threading.Event(), threading.Event()
    slow: list[threading.Thread] = []
    real_read = pq.read_table

    def read_table(*args: Any, **kwargs: Any) -> pa.Table:
        if threading.current_thread() in slow:
            reading.set()
            assert resume.wait(30), "the test never let the slow reader go on"
        return real_read(*args, **kwargs)

    monkeypatch.setattr(pq, "read_table", read_table)
    seen: list[int] = []
    reader = threading.Thread(target=lambda: seen.append(store.committed("g", "t")[KEY].offset))
    slow.append(reader)
    reader.start()
    try:
        assert reading.wait(30), "the slow reader never read a file"
        store.commit("g", "t", {0: 3})  # completed while the slow reader still reads version 1
        assert store.committed("g", "t")[KEY].offset == 3
    finally:
        resume.set()
        reader.join(30)
    assert seen == [2]  # what the table held when that read began
    assert store.committed("g", "t")[KEY].offset == 3  # and the newer commit stays seen
