"""Fencing tokens on offset commits: a coordinator that lost a group cannot commit what the next one did not read.

Each commit of a group's offsets on a topic carries the generation of the
group's lease of that topic its committer holds; whoever takes the lease writes
its generation into ``_offsets`` before it reads the group's offsets, and the
table refuses (NOT_COORDINATOR) a commit fenced with an older one. Two stores on
one root stand for two nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from logstore.errors import NotCoordinatorError
from logstore.groups.coordinator import GroupCoordinator
from logstore.groups.leases import GroupLease
from logstore.groups.offsets import OffsetsStore
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import GroupTopicPartition, ProducerBatch, TopicPartition

KEY = GroupTopicPartition("g", "t", 0)


def test_a_commit_fenced_with_an_older_generation_is_refused_even_by_a_store_that_never_saw_the_fence(
    tmp_path: Path,
) -> None:
    old, new = OffsetsStore(str(tmp_path)), OffsetsStore(str(tmp_path))
    old.commit("g", "t", {0: 3}, fence=1)
    assert old.committed("g", "t")[KEY].offset == 3  # its handle is at this version
    new.fence("g", "t", 2)
    new.commit("h", "t", {0: 1})  # other groups and topics are not fenced
    with pytest.raises(NotCoordinatorError, match="lease generation 2, this committer's 1"):
        old.commit("g", "t", {0: 9}, fence=1)  # its snapshot is older than the fence: the race tells it
    with pytest.raises(NotCoordinatorError):
        old.fence("g", "t", 1)
    old.commit("g", "other-topic", {0: 4}, fence=1)  # a fence is per topic
    new.commit("g", "t", {0: 5}, fence=2)
    for reader in (old, new, OffsetsStore(str(tmp_path))):
        assert reader.committed("g", "t")[KEY].offset == 5


def test_the_first_fence_creates_the_table(tmp_path: Path) -> None:
    store = OffsetsStore(str(tmp_path))
    store.fence("g", "t", 1)
    assert store.committed() == {}
    with pytest.raises(NotCoordinatorError):
        OffsetsStore(str(tmp_path)).commit("g", "t", {0: 1}, fence=0)


class _TakenOverMidCommit:
    """Coordinator A's store: between A's lease check and its write, ``takeover`` runs (A stalled that long)."""

    def __init__(self, store: LogStore, takeover: Callable[[], None]) -> None:
        self._store = store
        self._takeover = takeover
        self.config = store.config
        self.catalog = store.catalog
        self.describe_topic = store.describe_topic
        self.committed = store.committed
        self.fence_offsets = store.fence_offsets

    def commit_offsets(self, group: str, topic: str, offsets: Mapping[int, int], *, fence: int | None = None) -> None:
        self._takeover()
        self._store.commit_offsets(group, topic, offsets, fence=fence)


def test_a_coordinator_that_lost_the_group_mid_commit_is_refused_and_the_next_one_reads_every_answered_commit(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=1)
    store.append(t, [ProducerBatch(input_table([0] * 10, [b"x"] * 10))])
    node_b = LogStore(store.config)  # another node of the cluster: its own store of the same root
    b = GroupCoordinator(node_b)
    started: list[int] = []

    def takeover() -> None:
        # A stalls past its lease: another holder takes the lease (a clock an hour on: A's lease is old), and the
        # group's next coordinator, B, takes it in turn, reads the committed offset and starts its member there.
        later = GroupLease(store.config.root, "g", clock_ms=lambda: time.time_ns() // 1_000_000 + 3_600_000)
        later.acquire({t})
        later.release()
        m = b.join("g", [t], auto_offset_reset="earliest")
        got = b.fetch("g", m.member_id, _fetch(node_b), max_records=100, max_bytes=1 << 20)
        started.append(int(got[0][1].records["offset"][0].as_py()))

    a = GroupCoordinator(_TakenOverMidCommit(store, takeover))  # type: ignore[arg-type]
    m = a.join("g", [t], auto_offset_reset="earliest")
    store.commit_offsets("g", t, {0: 4})
    with pytest.raises(NotCoordinatorError):
        a.commit("g", m.member_id, m.generation, {TopicPartition(t, 0): 8})  # after B's fence: refused
    assert started == [4]  # B started at the last commit that was answered
    assert node_b.committed("g", t)[GroupTopicPartition("g", t, 0)].offset == 4
    b.close()
    a.close()


def _fetch(store: LogStore) -> Callable[..., object]:
    def fetch(topic: str, partition: int, offset: int, max_records: int, max_bytes: int) -> object:
        return store.fetch(topic, partition, offset, max_records=max_records, max_bytes=max_bytes)

    return fetch
