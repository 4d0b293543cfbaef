"""One group of Kafka's classic consumer group protocol: its members, generation and state (Kafka's ``ClassicGroup``).

No I/O and no clock of its own: the :class:`~logstore.groups.classic.ClassicCoordinator`
holds one :class:`ClassicGroup` per group on its event loop, calls it with the
time and settles the futures it returns. The states are Kafka's:

- ``Empty``: no members (committed offsets may exist; commits with generation -1 are allowed).
- ``PreparingRebalance``: waiting for every member to (re)join, at most the
  longest ``rebalance.timeout.ms`` of the members; a member that does not
  rejoin in time is removed. The first rebalance of an empty group waits
  ``group.initial.rebalance.delay.ms`` for more members, each join extending
  the wait by that much, up to the rebalance timeout.
- ``CompletingRebalance``: the generation is one higher, every member got its
  JoinGroup answer (the leader with every member's subscription), and the
  group waits for the leader's SyncGroup with the assignment.
- ``Stable``: each member has its assignment (SyncGroup answers at once).

A join, a leave, a member whose session expired (no heartbeat for its
``session.timeout.ms``) or a leader that joins again with changed metadata
starts a rebalance. Heartbeats, SyncGroup and OffsetCommit carry the
generation and member id: ``ILLEGAL_GENERATION`` and ``UNKNOWN_MEMBER_ID``
when they are not the group's, ``REBALANCE_IN_PROGRESS`` while it rebalances.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from logstore.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    LogstoreError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

__all__ = [
    "COMPLETING",
    "EMPTY",
    "PREPARING",
    "STABLE",
    "ClassicGroup",
    "ClassicMember",
    "GroupView",
    "JoinAnswer",
    "MemberView",
    "settle",
]

_DEPARTED_KEPT = 1_000
"""Departed members remembered per group, so that their next request says why they are gone."""

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"


@dataclass(frozen=True)
class JoinAnswer:
    """What a JoinGroup answers once the rebalance completes."""

    generation: int
    protocol_type: str
    protocol_name: str
    leader: str
    member_id: str
    members: tuple[tuple[str, str | None, bytes], ...]
    """For the leader: (member id, instance id, subscription metadata) of every member; empty for the others."""


@dataclass(frozen=True)
class MemberView:
    """A member as DescribeGroups shows it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    """Its subscription in the group's protocol (Kafka's ``ConsumerProtocolSubscription`` for consumers)."""
    assignment: bytes
    """The partitions the leader gave it (``ConsumerProtocolAssignment``), empty until the group is Stable."""


@dataclass(frozen=True)
class GroupView:
    """A group as DescribeGroups and ListGroups show it."""

    name: str
    state: str
    protocol_type: str
    protocol: str
    """The assignor the members agreed on (``range``, ``roundrobin``, ``cooperative-sticky`` …), "" when none."""
    members: tuple[MemberView, ...]


@dataclass
class ClassicMember:
    """A member of a classic group, as the coordinator keeps it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    """The assignors it supports, most preferred first, each with its subscription metadata."""
    last_seen: float
    """Loop time (s) of its last heartbeat, join, sync or commit: its session runs from here."""
    assignment: bytes = b""
    joining: asyncio.Future[JoinAnswer] | None = None
    """Its pending JoinGroup: set while it waits for the rebalance to complete."""
    syncing: asyncio.Future[bytes] | None = None
    """Its pending SyncGroup: set while it waits for the leader's assignment."""

    @property
    def awaiting_join(self) -> bool:
        return self.joining is not None and not self.joining.done()

    def metadata(self, protocol: str) -> bytes:
        return next(
            (m for name, m in self.protocols if name == protocol), self.protocols[0][1] if self.protocols else b""
        )


def settle(future: asyncio.Future | None, result: object = None, error: LogstoreError | None = None) -> None:
    """Answer a waiting request unless it is gone (its connection closed and cancelled it)."""
    if future is None or future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


@dataclass
class ClassicGroup:
    """The state of one group (see the module docstring); every method runs on the coordinator's event loop."""

    name: str
    initial_delay_s: float
    state: str = EMPTY
    generation: int = 0
    protocol_type: str = ""
    protocol: str = ""
    leader: str = ""
    members: dict[str, ClassicMember] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)
    """group.instance.id → member id of its static members."""
    departed: OrderedDict[str, str] = field(default_factory=OrderedDict)
    """Recently removed members → why (the message of their next request's ``UNKNOWN_MEMBER_ID``)."""
    deadline: float = 0.0
    """While preparing a rebalance: when it completes with the members that rejoined by then."""
    initial_limit: float = 0.0
    """While in the initial delay (the first rebalance of an empty group): the latest it may be extended to."""

    # -- lookups --------------------------------------------------------------

    def member(self, member_id: str, instance_id: str | None) -> ClassicMember:
        """The live member ``member_id`` (with ``instance_id``, when it is static).

        Raises:
            FencedInstanceIdError: ``instance_id`` belongs to a newer member now.
            UnknownMemberIdError: no such member: it left, or its session expired.
        """
        if instance_id is not None and self.instances.get(instance_id, member_id) != member_id:
            raise FencedInstanceIdError(
                f"group.instance.id '{instance_id}' of group '{self.name}' was taken over by a newer member; "
                "each consumer needs its own group.instance.id"
            )
        m = self.members.get(member_id)
        if m is None:
            why = self.departed.get(member_id, "it left, or no heartbeat came within its session.timeout.ms")
            raise UnknownMemberIdError(f"consumer group '{self.name}' has no member '{member_id}' ({why}); join again")
        return m

    def current(self, member_id: str, instance_id: str | None, generation: int) -> ClassicMember:
        """The member, checked to be at the group's generation.

        Raises:
            UnknownMemberIdError, FencedInstanceIdError: as :meth:`member`.
            IllegalGenerationError: ``generation`` is not the group's.
        """
        if self.state == EMPTY:
            raise UnknownMemberIdError(f"consumer group '{self.name}' has no members; join again")
        m = self.member(member_id, instance_id)
        if generation != self.generation:
            raise IllegalGenerationError(
                f"member '{member_id}' of group '{self.name}' sent generation {generation}; the group is at "
                f"generation {self.generation}: join again"
            )
        return m

    def compatible(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...], member_id: str = "") -> bool:
        """Whether a member of ``protocol_type`` supporting ``protocols`` can join (one assignor all support)."""
        others = [m for mid, m in self.members.items() if mid != member_id]
        if not others:
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {n for n, _ in protocols}
        for m in others:
            names &= {n for n, _ in m.protocols}
        return bool(names)

    def view(self) -> GroupView:
        stable = self.state == STABLE
        members = tuple(
            MemberView(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.metadata(self.protocol),
                m.assignment if stable else b"",
            )
            for m in self.members.values()
        )
        return GroupView(self.name, self.state, self.protocol_type, self.protocol, members)

    # -- transitions ------------------------------------------------------------

    def add(self, member: ClassicMember, protocol_type: str, now: float) -> None:
        """A new member joins: it waits for the rebalance this starts (or is under way)."""
        if not self.members:
            self.protocol_type = protocol_type
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.instances[member.instance_id] = member.member_id
        if self.state != PREPARING:
            self.prepare(now)
        elif self.initial_limit:
            self.deadline = min(now + self.initial_delay_s, self.initial_limit)

    def replace(self, old_id: str, member: ClassicMember) -> ClassicMember:
        """A static member joins again under a new id: it takes the old one's place and assignment, which is fenced."""
        old = self.members.pop(old_id)
        fenced = FencedInstanceIdError(
            f"member '{old_id}' of group '{self.name}' was replaced by a newer member with group.instance.id "
            f"'{member.instance_id}'"
        )
        settle(old.joining, error=fenced)
        settle(old.syncing, error=fenced)
        member.assignment = old.assignment
        self.members[member.member_id] = member
        assert member.instance_id is not None
        self.instances[member.instance_id] = member.member_id
        if self.leader == old_id:
            self.leader = member.member_id
        return old

    def answer(self, member_id: str) -> JoinAnswer:
        """The JoinGroup answer of the current generation for one member."""
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member_id == self.leader:
            members = tuple((m.member_id, m.instance_id, m.metadata(self.protocol)) for m in self.members.values())
        return JoinAnswer(self.generation, self.protocol_type, self.protocol, self.leader, member_id, members)

    def prepare(self, now: float) -> None:
        """Start a rebalance: members must join again within the longest rebalance timeout."""
        if self.state == COMPLETING:  # the leader's assignment of this generation will not come
            for m in self.members.values():
                settle(m.syncing, error=RebalanceInProgressError(f"consumer group '{self.name}' is rebalancing"))
        for m in self.members.values():
            m.assignment = b""
        timeout_s = max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000
        if self.state == EMPTY and self.initial_delay_s > 0:
            self.deadline = now + min(self.initial_delay_s, timeout_s)
            self.initial_limit = now + timeout_s
        else:
            self.deadline = now + timeout_s
            self.initial_limit = 0.0
        self.state = PREPARING

    def remove(self, member_id: str, why: str) -> None:
        """Remove a member; its waiting requests get ``UNKNOWN_MEMBER_ID``. The caller then calls :meth:`changed`."""
        m = self.members.pop(member_id)
        if m.instance_id is not None and self.instances.get(m.instance_id) == member_id:
            del self.instances[m.instance_id]
        gone = UnknownMemberIdError(f"member '{member_id}' of consumer group '{self.name}' was removed: {why}")
        settle(m.joining, error=gone)
        settle(m.syncing, error=gone)
        if self.leader == member_id:
            self.leader = ""
        self.departed[member_id] = why
        while len(self.departed) > _DEPARTED_KEPT:
            self.departed.popitem(last=False)

    def changed(self, now: float) -> None:
        """Membership changed (a leave or an expiry): rebalance, or complete the one under way if all are in."""
        if self.state in (STABLE, COMPLETING):
            self.prepare(now)
        self.maybe_complete(now)

    def maybe_complete(self, now: float) -> bool:
        """Complete the rebalance under way when every member rejoined (after the initial delay) or time is up."""
        if self.state != PREPARING:
            return False
        everyone = all(m.awaiting_join for m in self.members.values())
        if now >= self.deadline or (everyone and not self.initial_limit):
            self.complete(now)
            return True
        return False

    def complete(self, now: float) -> None:
        """The next generation: members that did not rejoin are removed; every joined member gets its answer."""
        for mid in [mid for mid, m in self.members.items() if not m.awaiting_join]:
            self.remove(mid, "it did not join again within rebalance.timeout.ms")
        self.generation += 1
        self.initial_limit = 0.0
        if not self.members:
            self.state, self.protocol, self.leader = EMPTY, "", ""
            return
        self.protocol = self._vote()
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self.state = COMPLETING
        for m in self.members.values():
            m.last_seen = now
            settle(m.joining, self.answer(m.member_id))
            m.joining = None

    def sync(self, member: ClassicMember, assignments: dict[str, bytes]) -> None:
        """The leader's assignment: every member gets its part, and the group is Stable."""
        if member.member_id != self.leader or self.state != COMPLETING:
            return
        for mid, m in self.members.items():
            m.assignment = assignments.get(mid, b"")
        self.state = STABLE
        for m in self.members.values():
            settle(m.syncing, m.assignment)
            m.syncing = None

    def expire(self, now: float) -> list[str]:
        """Remove members whose session ran out (not those waiting in a JoinGroup or SyncGroup); their ids."""
        dead = [
            mid
            for mid, m in self.members.items()
            if not m.awaiting_join
            and (m.syncing is None or m.syncing.done())
            and now - m.last_seen > m.session_timeout_ms / 1000
        ]
        for mid in dead:
            timeout = self.members[mid].session_timeout_ms
            self.remove(mid, f"no heartbeat came within its session.timeout.ms={timeout}")
        if dead:
            self.changed(now)
        return dead

    def _vote(self) -> str:
        """The assignor every member supports that most members prefer (Kafka's ``selectProtocol``)."""
        candidates = set.intersection(*({n for n, _ in m.protocols} for m in self.members.values()))
        if not candidates:  # refused at join; kept total for a static member that came back with others
            return next(iter(self.members.values())).protocols[0][0]
        votes = Counter(next(n for n, _ in m.protocols if n in candidates) for m in self.members.values())
        return max(sorted(votes), key=lambda n: votes[n])
