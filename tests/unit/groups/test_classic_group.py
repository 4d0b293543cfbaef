"""The classic group protocol's coordinator in the core, on an event loop with a fake clock (no sockets, no sleeps).

The time the coordinator sees is the test's, so rebalance deadlines, the initial delay and sessions run out
when the test says; the system tests (tests/system/kafka) drive the same rules with real clients.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kafka_api.membership import subscribed_topics
from logstore.config import LogstoreConfig
from logstore.errors import (
    FencedInstanceIdError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from logstore.groups.classic import ClassicCoordinator, Joining
from logstore.groups.coordinator import GroupCoordinator
from logstore.groups.leases import GroupLease
from logstore.store import LogStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _joining(
    member_id: str = "", *, protocols: tuple[str, ...] = ("range",), topic: str = "t", **extra: Any
) -> Joining:
    fields: dict[str, Any] = {
        "member_id": member_id,
        "instance_id": None,
        "client_id": "c",
        "client_host": "/127.0.0.1",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 20_000,
        "protocol_type": "consumer",
        "protocols": tuple((p, b"sub") for p in protocols),
        "topics": frozenset([topic]),
    }
    return Joining(**(fields | extra))


def _run(tmp_path: Path, body: Callable[[ClassicCoordinator, Clock], Awaitable[None]], delay_ms: int = 0) -> None:
    config = LogstoreConfig(root=str(tmp_path), group_initial_rebalance_delay_ms=delay_ms)

    async def main() -> None:
        clock = Clock()
        coordinator = ClassicCoordinator(config, clock=clock)
        try:
            await body(coordinator, clock)
        finally:
            await coordinator.close()

    asyncio.run(main())


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _members(c: ClassicCoordinator, group: str, n: int) -> None:
    """Wait until ``group`` has ``n`` members (a join takes its leases in a thread first)."""
    for _ in range(2000):
        view = c.view(group)
        if view is not None and len(view.members) == n:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"group '{group}' never had {n} members")


def test_the_assignor_is_the_one_every_member_supports_that_most_prefer(tmp_path: Path) -> None:
    async def body(c: ClassicCoordinator, clock: Clock) -> None:
        first = await c.join("g", _joining(protocols=("range", "roundrobin")))
        assert (first.generation, first.protocol_name, first.leader) == (1, "range", first.member_id)
        second = asyncio.ensure_future(c.join("g", _joining(protocols=("roundrobin", "range"))))
        third = asyncio.ensure_future(c.join("g", _joining(protocols=("roundrobin",))))
        await _members(c, "g", 3)
        again = await c.join("g", _joining(first.member_id, protocols=("range", "roundrobin")))
        answers = [again, await second, await third]
        assert {a.protocol_name for a in answers} == {"roundrobin"}  # range is not supported by the third
        assert {a.generation for a in answers} == {2} and again.leader == first.member_id
        with pytest.raises(InconsistentGroupProtocolError, match=r"partition\.assignment\.strategy"):
            await c.join("g", _joining(protocols=("sticky",)))

    _run(tmp_path, body)


def test_the_initial_delay_waits_for_more_members_and_each_join_extends_it(tmp_path: Path) -> None:
    async def body(c: ClassicCoordinator, clock: Clock) -> None:
        a = asyncio.ensure_future(c.join("g", _joining()))
        await _members(c, "g", 1)
        clock.now += 2.0
        b = asyncio.ensure_future(c.join("g", _joining()))  # extends the wait to 3 s from now
        await _members(c, "g", 2)
        clock.now += 2.5
        c.tick()
        await _settle()
        assert not a.done()
        clock.now += 0.6
        c.tick()
        await _settle()
        assert (await a).generation == (await b).generation == 1
        assert len((await a).members) + len((await b).members) == 2  # the leader has both subscriptions

    _run(tmp_path, body, delay_ms=3_000)


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed(tmp_path: Path) -> None:
    async def body(c: ClassicCoordinator, clock: Clock) -> None:
        first = await c.join("g", _joining())
        await c.sync("g", 1, first.member_id, None, {first.member_id: b"x"})
        late = asyncio.ensure_future(c.join("g", _joining()))
        await _members(c, "g", 2)
        with pytest.raises(RebalanceInProgressError):
            c.heartbeat("g", 1, first.member_id, None)
        c.check_commit("g", 1, first.member_id, None)  # its generation holds until the rebalance completes
        for _ in range(2):  # it heartbeats (its session holds) but never joins again
            clock.now += 9
            c.tick()
            with pytest.raises(RebalanceInProgressError):
                c.heartbeat("g", 1, first.member_id, None)
        assert not late.done()
        clock.now += 2.1  # rebalance.timeout.ms=20000 since the rebalance began
        c.tick()
        joined = await late
        assert (joined.generation, joined.leader) == (2, joined.member_id)
        with pytest.raises(UnknownMemberIdError, match="did not join again within rebalance"):
            c.heartbeat("g", 1, first.member_id, None)
        with pytest.raises(RebalanceInProgressError):  # a current member without its assignment yet
            c.check_commit("g", 2, joined.member_id, None)
        with pytest.raises(IllegalGenerationError):
            c.check_commit("g", 1, joined.member_id, None)

    _run(tmp_path, body)


def test_sessions_expire_but_not_while_a_member_waits_in_join(tmp_path: Path) -> None:
    async def body(c: ClassicCoordinator, clock: Clock) -> None:
        first = await c.join("g", _joining())
        await c.sync("g", 1, first.member_id, None, {})
        clock.now += 10.1
        c.tick()
        assert c.view("g").state == "Empty"  # type: ignore[union-attr]
        assert c.check_commit("g", -1, "", None) is False  # an empty group takes commits without membership
        a = await c.join("g", _joining())
        b = asyncio.ensure_future(c.join("g", _joining()))  # waits for a to join again
        await _members(c, "g", 2)
        clock.now += 10.1  # past both sessions, within the rebalance timeout: a is silent, b waits in JoinGroup
        c.tick()
        joined = await b
        assert (joined.generation, joined.leader) == (a.generation + 1, joined.member_id)
        with pytest.raises(UnknownMemberIdError, match=r"session\.timeout\.ms=10000"):
            c.heartbeat("g", a.generation, a.member_id, None)

    _run(tmp_path, body)


def test_a_static_member_takes_its_old_place_and_fences_the_old_id(tmp_path: Path) -> None:
    async def body(c: ClassicCoordinator, clock: Clock) -> None:
        leader = await c.join("g", _joining())
        static = asyncio.ensure_future(c.join("g", _joining(instance_id="w1")))
        await _members(c, "g", 2)
        await c.join("g", _joining(leader.member_id))
        s = await static
        await c.sync("g", 2, leader.member_id, None, {leader.member_id: b"a", s.member_id: b"b"})
        back = await c.join("g", _joining(instance_id="w1"))
        assert (back.generation, back.member_id != s.member_id) == (2, True)
        assert (await c.sync("g", 2, back.member_id, "w1", {}))[2] == b"b"
        c.heartbeat("g", 2, leader.member_id, None)  # no rebalance for the others
        with pytest.raises(FencedInstanceIdError):
            c.heartbeat("g", 2, s.member_id, "w1")

    _run(tmp_path, body)


def test_a_group_with_http_members_refuses_kafka_members_and_the_reverse(tmp_path: Path) -> None:
    store = LogStore(LogstoreConfig(root=str(tmp_path)))
    store.create_topic("t", 1)
    http = GroupCoordinator(store)
    http.join("mixed", ["t"])

    async def body(c: ClassicCoordinator, clock: Clock) -> None:
        with pytest.raises(InconsistentGroupProtocolError, match="another door"):
            await c.join("mixed", _joining())
        kafka = await c.join("kafka", _joining())
        with pytest.raises(InconsistentGroupProtocolError, match="Kafka protocol listener"):
            await asyncio.to_thread(http.join, "kafka", ["t"])
        with pytest.raises(GroupSubscribedToTopicError):  # what a Spark query of the group takes first
            await asyncio.to_thread(GroupLease(str(tmp_path), "kafka").acquire, ["t"])
        c.leave("kafka", [(kafka.member_id, None)])
        for _ in range(1000):  # the leases are released in a thread
            if not GroupLease(str(tmp_path), "kafka").live_doors():
                break
            await asyncio.sleep(0.01)
        await asyncio.to_thread(http.join, "kafka", ["t"])

    try:
        _run(tmp_path, body)
    finally:
        http.close()


def test_subscribed_topics_reads_the_consumer_protocols_topics() -> None:
    def subscription(*topics: str) -> bytes:
        out = struct.pack(">hi", 1, len(topics))
        for t in topics:
            out += struct.pack(">h", len(t)) + t.encode()
        return out + struct.pack(">i", 0) + b"\0\0\0\0"  # user data, owned partitions (v1)

    protocols = (("range", subscription("a", "b")), ("roundrobin", subscription("b", "c")), ("x", b"\1"))
    assert subscribed_topics(protocols) == {"a", "b", "c"}
    assert subscribed_topics((("range", subscription("..")),)) == frozenset()  # not a topic name
