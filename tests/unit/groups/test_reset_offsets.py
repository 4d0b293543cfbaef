"""A group's offsets are reset only while nobody reads the topic for it (Kafka resets only an inactive group).

A Spark query reading with ``group=G``, or the node's members of G, hold G's lease of the topic
(:class:`~logstore.groups.leases.GroupLease`); a reset under it would be overwritten by the reader's next commit,
leaving the group half reset. Here another reader's lease stands for that query.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from logstore.errors import GroupSubscribedToTopicError
from logstore.groups.leases import GroupLease
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import AppendResult, ProducerBatch


def _filled(store: LogStore, make_topic: Callable[..., str]) -> str:
    topic = make_topic(partitions=2)
    records = input_table([0, 0, 1, 1], [b"a", b"b", b"c", b"d"])
    assert all(isinstance(r, AppendResult) for r in store.append(topic, [ProducerBatch(records)]))
    store.commit_offsets("g", topic, {0: 1, 1: 1})
    return topic


def _committed(store: LogStore, topic: str) -> dict[int, int]:
    return {tp.partition: c.offset for tp, c in store.committed("g", topic).items()}


def test_a_reset_is_refused_while_a_reader_holds_the_groups_topic(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    topic = _filled(store, make_topic)
    reader = GroupLease(store.config.root, "g")
    reader.acquire([topic])
    try:
        with pytest.raises(GroupSubscribedToTopicError, match="stop them first"):
            store.reset_offsets("g", topic, "earliest")
        assert _committed(store, topic) == {0: 1, 1: 1}
    finally:
        reader.release()
    assert store.reset_offsets("g", topic, "earliest") == {0: 0, 1: 0}
    assert _committed(store, topic) == {0: 0, 1: 0}


def test_a_forced_reset_waits_for_the_reader_to_be_gone(store: LogStore, make_topic: Callable[..., str]) -> None:
    topic = _filled(store, make_topic)
    reader = GroupLease(store.config.root, "g")
    reader.acquire([topic])
    stopped = threading.Timer(0.5, reader.release)  # the query stops while the reset waits
    stopped.start()
    try:
        assert store.reset_offsets("g", topic, "latest", force=True) == {0: 2, 1: 2}
    finally:
        stopped.cancel()
        reader.release()
