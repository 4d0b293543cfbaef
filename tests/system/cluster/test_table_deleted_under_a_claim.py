"""A topic's table deleted while its node claims partitions: the pipeline lets go instead of retrying forever.

A node that gains a partition replays departed nodes' acks=1 frames of the topic before it claims it
(:func:`~logstore.node.recovery.replay_departed`); checking whether a frame already landed reads the table's log,
which delta-rs replays lazily, so a table deleted meanwhile fails there (``TableDeletedError``). The nemesis found
the committer retrying that step every 5 s for minutes: the pipeline's close waited for it, and the cluster watch
that retires pipelines (and renews the acks=1 lease) waited for the close, so every topic's leadership on the node
stood still (partitions of other topics unavailable for 25 to 37 s). Now the committer fails what it holds,
retriably, and the pipeline retires at once.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from logstore.log.promises import frame_header
from logstore.log.wal import WriteAheadLog
from logstore.node.broker import Broker
from logstore.storage import join
from tests.support.timestamps import records
from tests.system.cluster.cluster_helpers import node_config

pytestmark = pytest.mark.zookeeper


def _wait(predicate, what: str, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_table_deleted_while_its_node_replays_before_a_claim_retires_the_pipeline(
    chroot: str, tmp_path: Path
) -> None:
    root = str(tmp_path / "data")
    broker = Broker(node_config(root, chroot))
    try:
        broker.start()
        broker.store.create_topic("t", 1)
        pipeline = broker.pipeline("t")
        _wait(lambda: pipeline.led == frozenset({0}), "the node never led partition 0")
        # A departed node's logged acks=1 frame of this topic, to be replayed before the next claim.
        departed = WriteAheadLog(join(root, "_wal", "9", "t"))
        _number, logged = departed.append(frame_header("kafka-7-0", 0, pipeline.writer.topic_id), records(["x"]))
        logged.result(timeout=10)
        departed.close()
        broker.store.alter_topic("t", partitions=2)
        shutil.rmtree(Path(root) / "topics" / "t" / "_delta_log")  # deleted under the node (its ID file not yet)
        broker.cluster.register_topic("t", 2)  # the controller gives partition 1 a leader: this node claims it

        _wait(lambda: broker.pipeline_if_open("t") is not pipeline, "the pipeline of the deleted table was kept")
    finally:
        closer = threading.Thread(target=broker.close, daemon=True)  # it hung on the stuck committer before
        closer.start()
        closer.join(60)
    assert not closer.is_alive(), "the node did not close within 60 s"
