"""The group coordinator in the core (no HTTP): revoke before reassign, sessions, fencing, positions, leases.

A fake clock drives session expiry, so these tests never sleep.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from ingest_api.app import _expire_sessions
from logstore.config import LogstoreConfig
from logstore.errors import (
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    UnknownMemberIdError,
)
from logstore.groups.coordinator import GroupCoordinator, MemberState
from logstore.groups.leases import GroupLease
from logstore.log.schema import input_table
from logstore.node.broker import Broker
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from logstore.structs import TopicPartition as TP


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def coordinator(store: LogStore, clock: Clock) -> GroupCoordinator:
    return GroupCoordinator(store, clock=clock)


def fill(store: LogStore, topic: str, partitions: int, per_partition: int) -> None:
    parts = [p for p in range(partitions) for _ in range(per_partition)]
    store.append(topic, [ProducerBatch(input_table(parts, [b"x"] * len(parts)))])


def owners(c: GroupCoordinator, group: str) -> list[TP]:
    return [tp for m in c.members(group) for tp in m.assignment]


def test_a_moving_partition_waits_for_its_old_owner_to_acknowledge(
    coordinator: GroupCoordinator, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=4)
    a = coordinator.join("g", [t])
    assert len(a.assignment) == 4
    b = coordinator.join("g", [t])
    assert b.assignment == ()  # everything is still a's
    a1 = coordinator.heartbeat("g", a.member_id)  # a learns: two partitions revoked
    assert len(a1.assignment) == 2 and a1.generation > a.generation
    assert coordinator.heartbeat("g", b.member_id).assignment == ()  # not acknowledged yet
    coordinator.heartbeat("g", a.member_id)  # acknowledges what the previous response said
    b1 = coordinator.heartbeat("g", b.member_id)
    assert len(b1.assignment) == 2 and set(b1.assignment).isdisjoint(a1.assignment)


def test_an_explicit_acknowledgement_holds_the_partition_until_the_member_is_done(
    coordinator: GroupCoordinator, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    a = coordinator.join("g", [t])
    b = coordinator.join("g", [t])
    a1 = coordinator.heartbeat("g", a.member_id, a.generation)
    for _ in range(3):  # still processing: a keeps acknowledging only its old generation
        coordinator.heartbeat("g", a.member_id, a.generation)
        assert coordinator.heartbeat("g", b.member_id).assignment == ()
    revoked = set(a.assignment) - set(a1.assignment)
    # the old owner may still commit what it revoked, with its current generation
    coordinator.commit("g", a.member_id, a1.generation, dict.fromkeys(revoked, 0))
    coordinator.heartbeat("g", a.member_id, a1.generation)
    assert set(coordinator.heartbeat("g", b.member_id).assignment) == revoked
    with pytest.raises(IllegalGenerationError, match="does not own"):
        coordinator.commit("g", a.member_id, a1.generation, dict.fromkeys(revoked, 0))


def test_session_expiry_frees_partitions_and_fences_the_member(
    coordinator: GroupCoordinator, make_topic: Callable[..., str], clock: Clock
) -> None:
    t = make_topic(partitions=3)
    a = coordinator.join("g", [t], session_timeout_ms=1000)
    b = coordinator.join("g", [t], session_timeout_ms=10_000)
    coordinator.heartbeat("g", a.member_id)
    clock.now = 0.9
    coordinator.heartbeat("g", a.member_id)  # acknowledged: b has its share
    clock.now = 2.0  # a is silent from 0.9 on: expired at 1.9
    assert len(coordinator.heartbeat("g", b.member_id).assignment) == 3
    with pytest.raises(UnknownMemberIdError):
        coordinator.heartbeat("g", a.member_id)
    with pytest.raises(IllegalGenerationError, match="fenced"):
        coordinator.commit("g", a.member_id, a.generation, {TP(t, 0): 0})
    with pytest.raises(UnknownMemberIdError):
        coordinator.commit("g", "member-nobody", 1, {TP(t, 0): 0})


def test_expire_alone_removes_silent_members_and_releases_the_lease(
    coordinator: GroupCoordinator, make_topic: Callable[..., str], clock: Clock, store: LogStore
) -> None:
    t = make_topic(partitions=1)
    coordinator.join("g", [t], session_timeout_ms=1000)
    clock.now = 5
    coordinator.expire()
    assert coordinator.members("g") == [] and coordinator.groups() == []
    GroupLease(store.config.root, "g").acquire([t])  # a Spark query may read the topic now


def test_the_nodes_session_sweep_survives_an_unexpected_error(
    coordinator: GroupCoordinator,
    make_topic: Callable[..., str],
    clock: Clock,
    config: LogstoreConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The ingest node's sweep task is the only thing that expires silent members between requests: an error
    # that is not a storage error (a defect) in one sweep is logged, and the next sweep expires them.
    t = make_topic(partitions=1)
    coordinator.join("g", [t], session_timeout_ms=1000)
    clock.now = 5
    expire = coordinator.expire
    failures = iter([RuntimeError("a defect in one sweep")])
    sweeps: list[str] = []

    def once_broken() -> None:
        err = next(failures, None)
        if err is not None:
            sweeps.append("raised")
            raise err
        expire()
        sweeps.append("swept")

    monkeypatch.setattr(coordinator, "expire", once_broken)
    broker = Broker(config)

    async def sweep_until_swept() -> None:
        # Watches the sweeps themselves: reading the group (members(), groups()) would expire it too.
        task = asyncio.create_task(_expire_sessions(coordinator, broker))
        try:
            async with asyncio.timeout(20):
                while "swept" not in sweeps:
                    assert not task.done(), "the sweep task ended"
                    await asyncio.sleep(0.05)
        finally:
            task.cancel()

    try:
        asyncio.run(sweep_until_swept())
    finally:
        broker.close()
    monkeypatch.undo()
    assert sweeps[:2] == ["raised", "swept"]
    assert coordinator.members("g") == []


def test_a_group_whose_topic_cannot_be_read_holds_up_neither_other_groups_nor_its_own_rebalance(
    coordinator: GroupCoordinator, make_topic: Callable[..., str], clock: Clock, store: LogStore
) -> None:
    broken, fine = make_topic(partitions=2), make_topic(partitions=2)
    for group, topic in (("g1", broken), ("g2", fine)):
        first = coordinator.join(group, [topic], session_timeout_ms=1000)
        coordinator.join(group, [topic], session_timeout_ms=60_000)
        coordinator.heartbeat(group, first.member_id)  # acknowledged: the second member has its share
    commit = sorted(Path(store.catalog.topic_path(broken), "_delta_log").glob("*.json"))[-1]
    good = commit.read_bytes()
    commit.write_bytes(b"{not json")  # g1's topic cannot be opened: its rebalance raises KAFKA_STORAGE_ERROR
    clock.now = 5  # both groups' first members are silent past their session

    coordinator.expire()  # g1 comes first: before, its failure ended the sweep and g2 kept its dead member

    def owned(group: str) -> list[list[TP]]:
        return [sorted(m.assigned) for m in coordinator._groups[group].members.values()]

    assert owned("g2") == [[TP(fine, 0), TP(fine, 1)]]
    commit.write_bytes(good)
    coordinator.expire()  # g1's rebalance, left unfinished, is done once the topic can be read again
    assert owned("g1") == [[TP(broken, 0), TP(broken, 1)]]


def test_a_member_that_heartbeats_but_does_not_fetch_leaves_after_max_poll_interval(
    coordinator: GroupCoordinator, make_topic: Callable[..., str], clock: Clock, store: LogStore
) -> None:
    t = make_topic(partitions=4)
    a = coordinator.join("g", [t], max_poll_interval_ms=1000)
    b = coordinator.join("g", [t], max_poll_interval_ms=1000)
    coordinator.heartbeat("g", a.member_id)  # acknowledged: b has its share
    for now in (0.5, 0.9):  # both heartbeat; only b fetches
        clock.now = now
        coordinator.heartbeat("g", a.member_id)
        coordinator.heartbeat("g", b.member_id)
        coordinator.fetch("g", b.member_id, store_fetch(store), max_records=1, max_bytes=1)
    clock.now = 1.4  # a last fetched at 0 (its join): gone at 1.0, though its session is alive; b fetched at 0.9
    with pytest.raises(UnknownMemberIdError, match=r"max\.poll\.interval\.ms=1000"):
        coordinator.heartbeat("g", a.member_id)
    assert coordinator.heartbeat("g", b.member_id).assignment == tuple(TP(t, p) for p in range(4))
    with pytest.raises(IllegalGenerationError, match="fenced"):
        coordinator.commit("g", a.member_id, a.generation, {TP(t, 0): 0})


def test_a_topic_that_gains_partitions_rebalances_the_group(
    coordinator: GroupCoordinator, make_topic: Callable[..., str], store: LogStore
) -> None:
    t = make_topic(partitions=2)
    a = coordinator.join("g", [t])
    b = coordinator.join("g", [t])
    for _ in range(2):  # the first response tells a of its revocation, the second acknowledges it
        coordinator.heartbeat("g", a.member_id)
    assert sorted(owners(coordinator, "g")) == [TP(t, 0), TP(t, 1)]
    store.alter_topic(t, partitions=6)
    assert sorted(owners(coordinator, "g")) == [TP(t, 0), TP(t, 1)]
    coordinator.expire()  # the node's timer: compares partition counts with the last assignment's
    # range over the sorted member ids: 0-2 and 3-5; the new partitions have owners at once, and the one
    # of 0 and 1 that moves waits until its old owner lets it go
    assert len(owners(coordinator, "g")) == 5
    for _ in range(2):
        for m in (a, b):
            coordinator.heartbeat("g", m.member_id)
    assert sorted(owners(coordinator, "g")) == [TP(t, p) for p in range(6)]
    assert [len(m.assignment) for m in coordinator.members("g")] == [3, 3]


def test_a_subscribed_topic_deleted_then_created_again_is_followed(
    coordinator: GroupCoordinator, make_topic: Callable[..., str], store: LogStore
) -> None:
    t, other = make_topic(partitions=2), make_topic(partitions=1)
    m = coordinator.join("g", [t, other])
    coordinator.expire()
    store.delete_topic(t)
    coordinator.expire()
    assert coordinator.heartbeat("g", m.member_id).assignment == (TP(other, 0),)
    store.create_topic(t, 3)
    coordinator.expire()
    assert sorted(coordinator.heartbeat("g", m.member_id).assignment) == sorted(
        [TP(other, 0), *(TP(t, p) for p in range(3))]
    )
    store.delete_topic(t)
    store.create_topic(t, 5)  # both between two sweeps
    coordinator.expire()
    assert len(coordinator.heartbeat("g", m.member_id).assignment) == 6


def test_members_and_another_reader_of_the_group_exclude_each_other(
    coordinator: GroupCoordinator, make_topic: Callable[..., str], store: LogStore
) -> None:
    t = make_topic(partitions=1)
    spark_like = GroupLease(store.config.root, "g")
    spark_like.acquire([t])
    with pytest.raises(GroupSubscribedToTopicError):
        coordinator.join("g", [t])
    spark_like.release()
    m = coordinator.join("g", [t])
    with pytest.raises(GroupSubscribedToTopicError):
        GroupLease(store.config.root, "g").acquire([t])
    coordinator.leave("g", m.member_id)
    GroupLease(store.config.root, "g").acquire([t])


def test_one_assignor_per_group(coordinator: GroupCoordinator, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=1)
    coordinator.join("g", [t], assignor="roundrobin")
    with pytest.raises(InconsistentGroupProtocolError, match=r"partition\.assignment\.strategy=roundrobin"):
        coordinator.join("g", [t], assignor="range")


def test_positions_start_at_the_commit_else_at_auto_offset_reset(
    coordinator: GroupCoordinator, make_topic: Callable[..., str], store: LogStore
) -> None:
    t = make_topic(partitions=2)
    fill(store, t, 2, 5)
    store.commit_offsets("g", t, {0: 3})
    m = coordinator.join("g", [t], auto_offset_reset="latest")
    got = coordinator.fetch("g", m.member_id, store_fetch(store), max_records=100, max_bytes=1 << 20)
    assert {(topic, r.records["partition"][0].as_py()): r.records["offset"].to_pylist() for topic, r in got} == {
        (t, 0): [3, 4]
    }
    assert coordinator.fetch("g", m.member_id, store_fetch(store), max_records=100, max_bytes=1 << 20) == []
    e = coordinator.join("g2", [t], auto_offset_reset="earliest")
    got = coordinator.fetch("g2", e.member_id, store_fetch(store), max_records=100, max_bytes=1 << 20)
    assert sum(len(r.records) for _, r in got) == 10


def store_fetch(store: LogStore) -> Callable[..., object]:
    def fetch(topic: str, partition: int, offset: int, max_records: int, max_bytes: int) -> object:
        return store.fetch(topic, partition, offset, max_records=max_records, max_bytes=max_bytes)

    return fetch


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_random_joins_leaves_and_expiries_never_give_a_partition_two_owners(
    coordinator: GroupCoordinator, make_topic: Callable[..., str], clock: Clock, assignor: str
) -> None:
    """20 random steps; after each, every member heartbeats in random order (some acknowledging nothing).

    Owners are the members' assignments plus revoked partitions not yet acknowledged: never two for
    one partition. With cooperative-sticky, a member that keeps its share is never revoked anything.
    """
    t = make_topic(partitions=9)
    rng = random.Random(assignor)
    live: dict[str, MemberState] = {}
    for _ in range(20):
        action = rng.random()
        if not live or action < 0.45:
            m = coordinator.join("g", [t], assignor=assignor, session_timeout_ms=1000)
            live[m.member_id] = m
        elif action < 0.75:
            gone = rng.choice(sorted(live))
            coordinator.leave("g", gone)
            del live[gone]
        else:
            silent = rng.choice(sorted(live))  # its session runs out while the others heartbeat
            del live[silent]
            clock.now += 0.6
            for mid in live:
                coordinator.heartbeat("g", mid)
            clock.now += 0.6
        for _round in range(3):
            for mid in rng.sample(sorted(live), len(live)):
                before = live[mid]
                ack = None if rng.random() < 0.7 else before.generation
                now = coordinator.heartbeat("g", mid, ack)
                lost = set(before.assignment) - set(now.assignment)
                if assignor == "cooperative-sticky" and lost:
                    assert len(before.assignment) > 9 // len(live)
                live[mid] = now
                held = owners(coordinator, "g") + [
                    tp for tp, (owner, _) in coordinator._groups["g"].pending.items() if owner in live
                ]
                assert len(held) == len(set(held)), "a partition has two owners"
        clock.now += 0.1
    if not live:
        m = coordinator.join("g", [t], assignor=assignor, session_timeout_ms=1000)
        live[m.member_id] = m
    for _ in range(3):
        for mid in live:
            coordinator.heartbeat("g", mid)
    assert sorted(owners(coordinator, "g")) == [TP(t, p) for p in range(9)]


def test_a_dropped_group_forgets_its_members_and_releases_its_leases(
    store: LogStore, coordinator: GroupCoordinator
) -> None:
    """A group that moved to another coordinator node leaves nothing behind here: its members must rejoin."""
    t = "orders"
    store.create_topic(t, 2)
    a = coordinator.join("g", [t])
    coordinator.drop("g")
    assert coordinator.groups() == []
    with pytest.raises(UnknownMemberIdError):
        coordinator.heartbeat("g", a.member_id)
    b = coordinator.join("g", [t])  # the group's lease was released: a new member takes every partition again
    assert len(b.assignment) == 2
