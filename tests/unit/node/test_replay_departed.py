"""Cluster mode's replay of departed nodes' write-ahead logs (:func:`~logstore.node.recovery.replay_departed`).

A new leader lists ``<root>/_wal/`` and replays the frames of this topic that every node not live logged, in
frame order, at the offsets they were promised; a live node's frames, this node's own directory and a name that is
no node's log are left alone, and a second replay writes nothing. tests/integration/storage runs this again on an
S3 bucket and an Azure container, where the listing goes through :mod:`logstore.storage`. A node starting
commits its own previous run's frames the same way, leading nothing yet, before it registers.
"""

from __future__ import annotations

from collections.abc import Callable

from logstore.config import LogstoreConfig
from logstore.log import promises
from logstore.log.schema import input_table
from logstore.log.wal import WriteAheadLog, topics_with_frames
from logstore.log.writer import TopicWriter
from logstore.node.metrics import Metrics
from logstore.node.recovery import replay, replay_departed
from logstore.storage import absolute, join, storage_for
from logstore.store import LogStore
from tests.support.helpers import assert_gap_free


def _log(wal_root: str, node: str, topic: str, topic_id: str | None, values: list[tuple[int, str]]) -> None:
    """Node ``node``'s acks=1 frames of ``topic``, one per (partition, value), as its accumulator logs them."""
    wal = WriteAheadLog(join(wal_root, node, topic))
    try:
        for seq, (partition, value) in enumerate(values):
            header = promises.frame_header(f"__wal.{node}", seq, topic_id)
            _number, logged = wal.append(header, input_table([partition], [value.encode()]))
            logged.result(timeout=30)
    finally:
        wal.close()


def test_a_new_leader_replays_the_departed_nodes_frames_of_its_topic_once(
    config: LogstoreConfig, store: LogStore, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=2)
    wal_root = join(absolute(config.root), "_wal")
    writer = TopicWriter(store.catalog, topic, leader_epochs={})
    departed = [(0, "d0"), (1, "d1"), (0, "d2")]
    _log(wal_root, "2", topic, writer.topic_id, departed)
    _log(wal_root, "3", topic, writer.topic_id, [(0, "live")])  # node 3 is live: it commits its own frames
    _log(wal_root, "1", topic, writer.topic_id, [(1, "own")])  # this node's own: replayed at its start
    storage_for(wal_root).put(join(wal_root, "README"), b"not a node's log")

    replayed = replay_departed(writer, wal_root, join(wal_root, "1"), Metrics(), live={"1", "3"})

    assert replayed == 3
    log = assert_gap_free(store.catalog, topic)
    assert log == {0: [b"d0", b"d2"], 1: [b"d1"]}, "the departed node's records, at the offsets it promised"
    again = TopicWriter(store.catalog, topic, leader_epochs={})
    assert replay_departed(again, wal_root, join(wal_root, "1"), Metrics(), live={"1", "3"}) == 0
    assert assert_gap_free(store.catalog, topic) == log


def test_a_starting_node_replays_its_own_previous_run_before_it_leads_anything(
    config: LogstoreConfig, store: LogStore, make_topic: Callable[..., str]
) -> None:
    """Before it registers, a node commits its own frames through the replay path the others use (no epochs)."""
    topic = make_topic(partitions=2)
    wal_root = join(absolute(config.root), "_wal")
    writer = TopicWriter(store.catalog, topic, leader_epochs={})  # cluster mode, leading nothing yet
    _log(wal_root, "1", topic, writer.topic_id, [(0, "o0"), (1, "o1"), (0, "o2")])

    wal = WriteAheadLog(join(wal_root, "1", topic))
    try:
        replay(writer, wal, Metrics(), foreign=True)
    finally:
        wal.close()

    assert assert_gap_free(store.catalog, topic) == {0: [b"o0", b"o2"], 1: [b"o1"]}
    assert topics_with_frames(join(wal_root, "1")) == [], "its segments are gone once committed"
    assert replay_departed(writer, wal_root, join(wal_root, "2"), Metrics(), live={"2"}) == 0, "once"
