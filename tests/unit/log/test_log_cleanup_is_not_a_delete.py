"""A live topic whose old commits were removed by the log's cleanup is not a deleted topic.

delta-rs removes commit files older than the log retention once a newer checkpoint covers them (expired log
cleanup). A reader whose table handle was loaded before that checkpoint, and that followed the log since by
reading the new commits itself, still asks that handle for app transactions it has not seen since (the log
start offset of a partition retention never touched, the high watermark of a partition added since): delta-rs
then replays the handle's log lazily, meets a removed commit file ("not found"), and the reader must not call
the topic deleted — a Spark query with failOnDataLoss=false or a pattern skips a topic it is told is deleted.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from logstore.config import load_config
from logstore.errors import UnknownTopicOrPartitionError
from logstore.log.reader import TopicReader
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch


def _append(store: LogStore, topic: str, value: bytes) -> None:
    store.append(topic, [ProducerBatch(input_table(pa.array([0], pa.int32()), [value]))])


def _clean_up_log_before(table_root: str, version: int) -> None:
    """What delta-rs's expired log cleanup does once a checkpoint at ``version`` exists: remove older commits."""
    log_dir = os.path.join(table_root, "_delta_log")
    for name in os.listdir(log_dir):
        stem = name.split(".")[0]
        if stem.isdigit() and int(stem) < version and (name.endswith(".json") or ".checkpoint" in name):
            os.remove(os.path.join(log_dir, name))


def test_a_reader_after_a_log_cleanup_still_sees_the_live_topic(tmp_path: Path) -> None:
    store = LogStore(load_config(environ={}, path=None, overrides={"logstore.root": str(tmp_path / "data")}))
    store.create_topic("live", 1)
    _append(store, "live", b"v0")
    reader = TopicReader(store.catalog, "live")  # its table handle is loaded here
    for i in range(1, 4):
        _append(store, "live", f"v{i}".encode())
    reader.refresh()  # follows the new commits itself; the handle stays where it was loaded
    root = store.catalog.topic_path("live")
    table = DeltaTable(root)
    table.create_checkpoint()
    _clean_up_log_before(root, table.version())

    try:
        view = reader.partition_view(0)
    except UnknownTopicOrPartitionError as e:
        pytest.fail(f"a live topic whose old commits were cleaned up was taken for a deleted one: {e}")
    assert view.high_watermark == 4
    assert reader.fetch(0, 0).records["value"].to_pylist() == [b"v0", b"v1", b"v2", b"v3"]
