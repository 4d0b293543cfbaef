"""A reader's snapshot brought forward by reading only the new commits (``logstore.log._tail``).

After every kind of move a topic table makes — appends by the core writer,
partitions added, files removed and rewritten by delta-rs, checkpoints, log
cleanup — the tail must hold what delta-rs itself loads from the whole log: the
same live files with the same statistics, table properties and ``txn`` versions.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from logstore.config import load_config
from logstore.errors import UnknownTopicOrPartitionError
from logstore.log import _delta
from logstore.log._tail import LogTail
from logstore.log.catalog import app_log_start
from logstore.log.files import data_files
from logstore.log.reader import TopicReader
from logstore.log.schema import input_table
from logstore.log.tables import APP_EPOCH, app_hw, app_producer
from logstore.store import LogStore
from logstore.structs import ProducerBatch

APPS = [APP_EPOCH, app_hw(0), app_hw(1), app_hw(2), app_log_start(0), app_producer("p"), "never-written"]


def _store(tmp_path: Path) -> LogStore:
    return LogStore(load_config(environ={}, overrides={"logstore.root": str(tmp_path / "data")}))


def _append(store: LogStore, rng: random.Random, partitions: int, producer: bool = False) -> None:
    n = rng.randrange(1, 20)
    parts = pa.array(np.array([rng.randrange(partitions) for _ in range(n)], np.int32))
    batch = input_table(parts, [os.urandom(rng.randrange(1, 50)) for _ in range(n)])
    if producer:
        sequence = getattr(store, "_test_sequence", 0)
        store.append("t", [ProducerBatch(batch, producer_id="p", sequence=sequence)])
        store._test_sequence = sequence + n  # type: ignore[attr-defined]
    else:
        store.append("t", [ProducerBatch(batch)])


def _assert_as_delta_rs(tail: LogTail, path: str) -> None:
    fresh = DeltaTable(path)
    assert tail.version == fresh.version()
    assert dict(tail.files) == {f.log_path: f for f in data_files(fresh)}
    assert dict(tail.configuration) == {k: v for k, v in fresh.metadata().configuration.items() if v is not None}
    for app in APPS:
        assert tail.transaction_version(app) == fresh.transaction_version(app), (app, tail.version)


def test_the_tail_holds_what_delta_rs_loads_after_every_kind_of_commit(tmp_path: Path) -> None:
    rng = random.Random(11)
    store = _store(tmp_path)
    store.create_topic("t", 2)
    path = store.catalog.topic_path("t")
    tail = LogTail(DeltaTable(path))
    _assert_as_delta_rs(tail, path)
    partitions = 2
    for i in range(80):
        move = rng.random()
        if move < 0.6:
            _append(store, rng, partitions, producer=rng.random() < 0.3)
        elif move < 0.7 and partitions < 3:
            partitions += 1
            store.alter_topic("t", partitions=partitions)  # a metaData action
        elif move < 0.8:
            DeltaTable(path).delete(f"partition = {rng.randrange(partitions)}")  # remove actions, by delta-rs
        elif move < 0.9:
            DeltaTable(path).optimize.compact()  # remove + add with delta-rs's statistics
        else:
            DeltaTable(path).create_checkpoint()
        if rng.random() < 0.5 or i == 79:
            tail.advance()
            _assert_as_delta_rs(tail, path)


def test_the_tail_reloads_through_delta_rs_when_log_cleanup_removed_its_next_commits(tmp_path: Path) -> None:
    rng = random.Random(3)
    store = _store(tmp_path)
    store.create_topic("t", 2)
    path = store.catalog.topic_path("t")
    _append(store, rng, 2)
    tail = LogTail(DeltaTable(path))
    for _ in range(6):
        _append(store, rng, 2)
    writer = DeltaTable(path)
    writer.create_checkpoint()
    for v in range(1, writer.version()):
        os.remove(os.path.join(path, "_delta_log", f"{v:020d}.json"))
    assert tail.advance() == writer.version()
    _assert_as_delta_rs(tail, path)


def test_a_reader_follows_new_commits_without_reloading_through_delta_rs(tmp_path: Path) -> None:
    rng = random.Random(5)
    store = _store(tmp_path)
    store.create_topic("t", 2)
    _append(store, rng, 2)
    reader = TopicReader(store.catalog, "t")
    loaded = reader.table.version()
    for _ in range(30):
        _append(store, rng, 2)
    assert reader.refresh() == loaded + 30
    assert reader.table.version() == loaded  # the delta-rs handle was not replayed
    fresh = TopicReader(store.catalog, "t")
    for p in range(2):
        assert reader.partition_view(p) == fresh.partition_view(p)
    assert reader.fetch(0, 0, max_records=10_000).records == fresh.fetch(0, 0, max_records=10_000).records


def test_a_topic_deleted_and_created_again_is_read_afresh(tmp_path: Path) -> None:
    """A re-created topic starts again at version 0: the tail must not apply its commits on top of the old ones."""
    rng = random.Random(7)
    store, other = _store(tmp_path), _store(tmp_path)  # `other` plays another process
    store.create_topic("t", 2)
    for _ in range(12):
        _append(store, rng, 2)
    reader = TopicReader(store.catalog, "t")
    assert reader.refresh() == 12
    other.delete_topic("t")
    with pytest.raises(UnknownTopicOrPartitionError):
        reader.refresh()
    other.create_topic("t", 3)
    for _ in range(14):  # past the old version: its commits 13 and 14 would otherwise be read as the old table's
        _append(other, rng, 3)
    assert reader.refresh() == 14
    _assert_as_delta_rs(reader._tail, store.catalog.topic_path("t"))
    assert reader.describe() == store.catalog.describe_topic("t")


def test_the_stores_describe_follows_other_writers_without_opening_the_table_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LogStore.describe_topic (offset commits validate through it) keeps one warm reader per topic."""
    rng = random.Random(3)
    store, other = _store(tmp_path), _store(tmp_path)
    store.create_topic("t", 2)
    _append(other, rng, 2)  # `other`'s writer is open before counting
    opened: list[str] = []
    real_open = _delta.open_table
    monkeypatch.setattr(_delta, "open_table", lambda path: opened.append(path) or real_open(path))
    seen = []
    for _ in range(5):
        _append(other, rng, 2)
        seen.append(store.describe_topic("t"))
        store.commit_offsets("g", "t", {0: seen[-1].partitions[0].high_watermark})
    assert [p for p in opened if p.endswith("/topics/t")] == [store.catalog.topic_path("t")]  # the reader, once
    monkeypatch.undo()
    assert [info.table_version for info in seen] == [2, 3, 4, 5, 6]
    assert seen[-1] == other.catalog.describe_topic("t")
    other.delete_topic("t")
    with pytest.raises(UnknownTopicOrPartitionError):
        store.describe_topic("t")
    other.create_topic("t", 1)
    assert store.describe_topic("t").partitions == other.catalog.describe_topic("t").partitions
