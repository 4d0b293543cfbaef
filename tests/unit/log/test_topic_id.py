"""Topic IDs (Kafka's KIP-516): a topic deleted and created again is never read, written or committed as the old one.

The new topic's ``_delta_log`` is made to get the old one's inode, as ext4 hands
it out (:mod:`tests.support.inodes`): the case the inode alone cannot tell apart.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from logstore.config import LogstoreConfig, load_config
from logstore.errors import (
    InconsistentTopicIdError,
    LogstoreError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from logstore.log.reader import TopicReader
from logstore.log.schema import TOPIC_SCHEMA, input_table
from logstore.log.topic_id import ID_FILE, TOPIC_ID_PROPERTY, new_topic_id
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import AppendResult, ProducerBatch
from tests.support.inodes import recreate_reusing_log_inode

KAFKA_UUID = re.compile(r"[A-Za-z0-9_-]{22}")
ATTEMPTS = 5
ROUNDS = 20


def _config(tmp_path: Path) -> LogstoreConfig:
    return load_config(environ={}, path=None, overrides={"logstore.root": str(tmp_path / "data")})


def _append(store: LogStore, topic: str, values: list[bytes], partition: int = 0) -> None:
    parts = pa.array([partition] * len(values), pa.int32())
    store.append(topic, [ProducerBatch(input_table(parts, values))])


def _recreated_with_old_log_inode(
    store: LogStore, other: LogStore, topic: str, old: Callable[[], None], new: Callable[[], None]
) -> None:
    """Fill ``topic`` with ``old()``, then delete and create it again through ``other`` (another process, say)
    so that its new ``_delta_log`` has the old inode, and fill it with ``new()``.

    Skips the test where the file system cannot be made to reuse the inode.
    """
    for _ in range(ATTEMPTS):
        if store.catalog.exists(topic):
            other.delete_topic(topic)
        store.create_topic(topic, 1)
        old()
        path = store.catalog.topic_path(topic)
        if recreate_reusing_log_inode(path, lambda: other.delete_topic(topic), lambda: other.create_topic(topic, 1)):
            new()
            return
    pytest.skip("the file system did not hand the old _delta_log inode back")


def test_every_topic_gets_a_kafka_style_id_in_its_table_and_its_id_file(store: LogStore) -> None:
    info = store.create_topic("orders", 2)
    assert info.topic_id is not None and KAFKA_UUID.fullmatch(info.topic_id)
    path = store.catalog.topic_path("orders")
    assert DeltaTable(path).metadata().configuration[TOPIC_ID_PROPERTY] == info.topic_id
    assert Path(path, ID_FILE).read_text() == info.topic_id
    assert store.catalog.topic_id("orders") == info.topic_id
    assert store.describe_topic("orders").topic_id == info.topic_id
    assert "topic.id" not in info.overrides  # not a topic config key: it cannot be altered
    store.delete_topic("orders")
    again = store.create_topic("orders", 2)
    assert again.topic_id is not None and again.topic_id != info.topic_id
    assert len({new_topic_id() for _ in range(1000)}) == 1000
    assert all(not new_topic_id().startswith("-") for _ in range(1000))


def test_a_reader_reads_a_topic_created_again_with_the_old_log_inode_from_its_start(tmp_path: Path) -> None:
    store, other = LogStore(_config(tmp_path)), LogStore(_config(tmp_path))
    readers: list[TopicReader] = []

    def old() -> None:
        for i in range(12):  # 13 versions: more than the new topic will have
            _append(store, "t", [f"old-{i}-{j}".encode() for j in range(3)])
        readers[:] = [TopicReader(store.catalog, "t")]
        assert readers[0].fetch(0, 0, max_records=100).high_watermark == 36

    def new() -> None:
        _append(other, "t", [b"new-0", b"new-1"])
        _append(other, "t", [b"new-2"])

    _recreated_with_old_log_inode(store, other, "t", old, new)
    reader = readers[0]
    reader.refresh()
    assert reader.partition_view(0).high_watermark == 3  # the new topic's, not the old one's 36
    assert reader.topic_id == other.catalog.topic_id("t")
    with pytest.raises(OffsetOutOfRangeError):
        reader.fetch(0, 36)  # where a consumer of the old topic stood: not an offset of the new one
    got = reader.fetch(0, 0, max_records=100)
    assert got.records["value"].to_pylist() == [b"new-0", b"new-1", b"new-2"]
    assert got.high_watermark == 3
    for _ in range(12):  # past the old version: still the new topic's commits, read in order
        _append(other, "t", [b"more"])
    assert reader.fetch(0, 0, max_records=100).high_watermark == 15


def test_a_writer_never_commits_to_the_topic_created_again(tmp_path: Path) -> None:
    store, other = LogStore(_config(tmp_path)), LogStore(_config(tmp_path))
    store.create_topic("t", 1)
    for i in range(6):
        _append(store, "t", [f"old-{i}".encode()])
    writer = TopicWriter(store.catalog, "t")
    other.delete_topic("t")
    other.create_topic("t", 1)
    _append(other, "t", [b"new-0"])
    version = DeltaTable(other.catalog.topic_path("t")).version()
    batch = ProducerBatch(input_table(pa.array([0], pa.int32()), [b"stale"]))
    with pytest.raises(InconsistentTopicIdError, match="topic 't' was deleted or created again"):
        writer.append([batch])
    assert DeltaTable(other.catalog.topic_path("t")).version() == version
    # The store's own writer of the old topic is dropped: the batch goes to the new topic.
    _append(store, "t", [b"new-1"])
    assert other.fetch("t", 0, 0).records["value"].to_pylist() == [b"new-0", b"new-1"]


def test_a_topic_from_before_ids_has_none_and_keeps_working(store: LogStore) -> None:
    path = store.catalog.topic_path("legacy")
    DeltaTable.create(
        path,
        TOPIC_SCHEMA,
        partition_by=["partition"],
        configuration={"logstore.partitions": "1"},
        name="legacy",
        raise_if_key_not_exists=False,
    )
    assert not os.path.exists(os.path.join(path, ID_FILE))
    assert store.describe_topic("legacy").topic_id is None
    _append(store, "legacy", [b"a", b"b"])
    reader = store.reader("legacy")
    assert reader.fetch(0, 0).records["value"].to_pylist() == [b"a", b"b"]
    store.delete_topic("legacy")
    assert store.create_topic("legacy", 1).topic_id is not None


def test_deleting_a_topic_deletes_its_group_offsets(store: LogStore) -> None:
    store.create_topic("t", 2)
    store.create_topic("kept", 1)
    _append(store, "t", [b"a"] * 5)
    store.offsets.commit("g", "t", {0: 5, 1: 0})
    store.offsets.commit("g", "kept", {0: 0})
    store.offsets.commit("h", "t", {0: 3})
    store.delete_topic("t")
    assert {(k.group, k.topic) for k in store.offsets.committed()} == {("g", "kept")}
    assert store.offsets.groups() == ["g"]
    store.create_topic("t", 2)
    assert store.committed("g", "t") == {}
    store.offsets.commit("h", "t", {1: 0})  # a new history on the new topic
    assert {k.partition: v.offset for k, v in store.committed("h", "t").items()} == {1: 0}


def test_a_delete_under_a_committing_writer_leaves_the_name_whole(tmp_path: Path) -> None:
    # A leader elsewhere (here: a thread that is never told) keeps committing while the topic is deleted: the
    # delete must neither fail nor leave a broken log under the name, and the name must take a new topic cleanly.
    store = LogStore(_config(tmp_path))
    for round_ in range(ROUNDS):
        store.create_topic("t", 1)
        writer = TopicWriter(store.catalog, "t")
        stop = threading.Event()

        def commit_until_stopped(writer: TopicWriter = writer, stop: threading.Event = stop) -> None:
            batch = [ProducerBatch(input_table(pa.array([0], pa.int32()), [b"old"]))]
            while not stop.is_set():
                try:
                    if not isinstance(writer.append(batch)[0], AppendResult):
                        return
                except LogstoreError:
                    return  # told at last: the topic is gone

        committer = threading.Thread(target=commit_until_stopped)
        committer.start()
        time.sleep(0.01 * (round_ % 5))  # let it commit a few times first
        try:
            store.delete_topic("t")  # raised OSError 39 (Directory not empty) when the log was removed in place
        finally:
            stop.set()
            committer.join()
            writer.close()
        assert not store.catalog.exists("t"), f"round {round_}: a broken log stayed under the name"
        store.create_topic("t", 1)
        _append(store, "t", [b"new"])
        assert TopicReader(store.catalog, "t").fetch(0, 0).records["value"].to_pylist() == [b"new"]
        store.delete_topic("t")


def test_a_reader_whose_topic_is_deleted_between_loading_and_viewing_says_unknown_topic(store: LogStore) -> None:
    """delta-rs replays the log lazily: a partition view made after the table's files were removed
    must say the topic is gone (what a Spark query with failOnDataLoss=false skips), not fail on a file."""
    store.create_topic("gone", 2)
    for i in range(3):
        _append(store, "gone", [f"v{i}".encode()])
    reader = TopicReader(store.catalog, "gone")
    reader.refresh()
    store.delete_topic("gone")
    with pytest.raises(UnknownTopicOrPartitionError, match="deleted"):
        reader.partition_view(0)
