"""One consumer group's state: members, generations, the target and actual assignment (Kafka's ``ConsumerGroup``).

No storage and no clock of its own: the :class:`~logstore.groups.coordinator.GroupCoordinator`
holds a :class:`ConsumerGroup` per group, calls it under the group's lock and
brings what needs the store (partition counts, positions, leases). The
invariants it keeps:

- **One live owner per partition.** A partition the target assignment moves
  is first *revoked*: it leaves its old owner's assignment (the owner learns
  at its next heartbeat) and waits until the old owner acknowledges a
  generation at least that of the revocation, or leaves, or its session
  expires. Only then is it given to its new owner, in a later generation.
  Partitions that stay with their owner are never revoked.
- **Generations.** The group's generation grows by one at every change of
  membership or assignment; a member's generation is the group generation at
  which its own assignment last changed (or it joined). A commit must carry
  the member's current generation and name only partitions the member owns
  (assigned, or revoked and not yet acknowledged):
  :class:`~logstore.errors.IllegalGenerationError` otherwise, also for a
  member that was expired or left (it is remembered as fenced);
  :class:`~logstore.errors.UnknownMemberIdError` for an id the group never had
  or, on heartbeat, for an expired member (it must join again).
- **Sessions.** A member that does not heartbeat for ``session_timeout_ms``
  is removed; so is one that does not fetch for ``max_poll_interval_ms``
  (Kafka's ``max.poll.interval.ms``: it is alive but no longer consuming).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from logstore.errors import IllegalGenerationError, UnknownMemberIdError
from logstore.groups.assignors import Assignment, assign
from logstore.groups.leases import GroupLease
from logstore.structs import TopicPartition

__all__ = ["DEFAULT_MAX_POLL_INTERVAL_MS", "ConsumerGroup", "Member", "MemberState", "OffsetReset"]

DEFAULT_MAX_POLL_INTERVAL_MS = 300_000
"""Kafka's ``max.poll.interval.ms`` default: the longest a member may go without fetching."""

OffsetReset = Literal["earliest", "latest"]

_FENCED_KEPT = 10_000
"""Ids of departed members remembered per group, so their late commits get ILLEGAL_GENERATION."""


@dataclass(frozen=True)
class MemberState:
    """What a member (and ``groups describe``) sees of itself."""

    member_id: str
    generation: int
    """The group generation at which this member's assignment last changed; its commits must carry it."""
    assignment: tuple[TopicPartition, ...]
    """The partitions it may fetch and commit, sorted."""
    topics: tuple[str, ...] = ()
    """The topics it subscribed to."""


@dataclass
class Member:
    """A live member of a group, as the coordinator keeps it."""

    member_id: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    auto_offset_reset: OffsetReset
    last_seen: float
    """Clock time of its last heartbeat (or join), in the coordinator's seconds."""
    max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS
    last_fetch: float = 0.0
    """Clock time of its last fetch (or join)."""
    generation: int = 0
    delivered: int = 0
    """The generation last sent to the member (a heartbeat without one acknowledges it)."""
    assigned: set[TopicPartition] = field(default_factory=set)
    cursor: int = 0
    """Where the next fetch starts in the member's sorted partitions (round robin, so none starves)."""

    def state(self) -> MemberState:
        return MemberState(self.member_id, self.generation, tuple(sorted(self.assigned)), self.topics)


@dataclass
class ConsumerGroup:
    """The state of one group; every method is called with :attr:`lock` held."""

    name: str
    lock: threading.RLock = field(default_factory=threading.RLock)
    generation: int = 0
    assignor: str = "range"
    members: dict[str, Member] = field(default_factory=dict)
    target: Assignment = field(default_factory=dict)
    pending: dict[TopicPartition, tuple[str, int]] = field(default_factory=dict)
    """Revoked partitions → (old owner, generation of the revocation), until the old owner acknowledges."""
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    """Per owned partition, the next offset its member fetches."""
    counts: dict[str, int] = field(default_factory=dict)
    """Partition count of each subscribed topic when the target was computed."""
    fenced: OrderedDict[str, str] = field(default_factory=OrderedDict)
    """Departed members → why they went (for the error their next call gets)."""
    leases: dict[str, GroupLease] = field(default_factory=dict)
    stale: bool = False
    """A rebalance was started and did not finish (a topic's table could not be read): the next sweep redoes it."""

    def live(self, member_id: str) -> Member:
        """The live member ``member_id``.

        Raises:
            UnknownMemberIdError: it left, or no heartbeat came in time (named in the message); join again.
        """
        m = self.members.get(member_id)
        if m is None:
            why = self.fenced.get(member_id, "it left, or no heartbeat came within session.timeout.ms")
            raise UnknownMemberIdError(f"consumer group '{self.name}' has no member '{member_id}' ({why}); join again")
        return m

    def seek(self, member_id: str, positions: Mapping[TopicPartition, int]) -> None:
        """Set the group's fetch positions of partitions the live member ``member_id`` owns (under the group's lock).

        Raises:
            UnknownMemberIdError: the member left or expired.
            IllegalGenerationError: it does not own one of the partitions (nothing is moved).
        """
        m = self.live(member_id)
        for tp in positions:
            if tp not in m.assigned:
                raise IllegalGenerationError(
                    f"member '{member_id}' of group '{self.name}' does not own {tp.topic}-{tp.partition}: "
                    "seek only partitions of the current assignment"
                )
        self.positions.update(positions)

    def member_for_commit(self, member_id: str, generation: int) -> Member:
        """The member that may commit with ``generation``.

        Raises:
            UnknownMemberIdError: the group never had it.
            IllegalGenerationError: it left or expired, or ``generation`` is not its current one.
        """
        m = self.members.get(member_id)
        if m is None:
            if member_id in self.fenced:
                raise IllegalGenerationError(
                    f"member '{member_id}' of group '{self.name}' left or its session expired; "
                    f"its generation {generation} is fenced (the group is at generation {self.generation})"
                )
            raise UnknownMemberIdError(f"consumer group '{self.name}' has no member '{member_id}'")
        if generation != m.generation:
            raise IllegalGenerationError(
                f"member '{member_id}' of group '{self.name}' committed with generation {generation}, "
                f"its generation is {m.generation}: heartbeat to learn its assignment, then commit again"
            )
        return m

    def remove_expired(self, now: float) -> bool:
        """Remove members whose session or poll interval ran out by ``now``; whether any was."""
        dead: dict[str, str] = {}
        for mid, m in self.members.items():
            if now - m.last_seen > m.session_timeout_ms / 1000:
                dead[mid] = f"no heartbeat came within session.timeout.ms={m.session_timeout_ms}"
            elif now - m.last_fetch > m.max_poll_interval_ms / 1000:
                dead[mid] = f"no fetch came within max.poll.interval.ms={m.max_poll_interval_ms}"
        for mid, why in dead.items():
            self.remove(mid, why)
        return bool(dead)

    def remove(self, member_id: str, why: str = "it left") -> None:
        """Remove a member; its partitions are free at once, and its id is remembered as fenced."""
        m = self.members.pop(member_id)
        for tp in m.assigned:
            self.positions.pop(tp, None)
        m.assigned.clear()  # a fetch planned before the removal must not read on for it
        for tp in [tp for tp, (owner, _) in self.pending.items() if owner == member_id]:
            del self.pending[tp]
        self.fenced[member_id] = why
        while len(self.fenced) > _FENCED_KEPT:
            self.fenced.popitem(last=False)

    def retarget(self, counts: Mapping[str, int], joined: Member | None = None) -> None:
        """A new target for the subscribed topics' partition ``counts``, then as much of it as revocations allow."""
        self.counts = dict(counts)
        subscriptions = {mid: m.topics for mid, m in self.members.items()}
        current = {mid: sorted(m.assigned) for mid, m in self.members.items()}
        self.target = assign(self.assignor, subscriptions, self.counts, current)
        self.generation += 1
        if joined is not None:
            joined.generation = self.generation
        self.reconcile(bumped=True)

    def acknowledge(self, member: Member, acknowledged: int | None) -> None:
        """``member`` applied the assignment of generation ``acknowledged`` (None: the one last sent to it).

        Partitions revoked from it at or before that generation go to their new owners.
        """
        acked = member.delivered if acknowledged is None else min(acknowledged, member.generation)
        freed = [tp for tp, (owner, gen) in self.pending.items() if owner == member.member_id and gen <= acked]
        for tp in freed:
            del self.pending[tp]
        if freed:
            self.reconcile()
        member.delivered = member.generation

    def reconcile(self, *, bumped: bool = False) -> None:
        """Move the actual assignment toward the target: revoke what moves, give out what is free."""
        changed: set[str] = set()
        revoked: list[TopicPartition] = []
        for mid, m in self.members.items():
            target = set(self.target.get(mid, ()))
            for tp in sorted(m.assigned - target):
                m.assigned.discard(tp)
                self.positions.pop(tp, None)
                revoked.append(tp)
                self.pending[tp] = (mid, -1)
                changed.add(mid)
        owned = {tp for m in self.members.values() for tp in m.assigned}
        for mid, m in self.members.items():
            for tp in self.target.get(mid, ()):
                if tp not in m.assigned and tp not in owned and tp not in self.pending:
                    m.assigned.add(tp)
                    owned.add(tp)
                    self.positions.pop(tp, None)
                    changed.add(mid)
        if changed and not bumped:
            self.generation += 1
        for tp in revoked:
            self.pending[tp] = (self.pending[tp][0], self.generation)
        for mid in changed:
            self.members[mid].generation = self.generation
