"""The group coordinator: members, generations, assignments, fencing and positions of consumer groups.

Kafka's consumer-group protocol with server-side assignment (KIP-848): a
member joins with its topics and gets an id, a generation and its partitions
at once; the others learn of the change by heartbeat. In embedded mode the
coordinator lives in the node (``logstore serve``); :class:`Coordinator` is
the interface the HTTP tier uses, so a coordinator chosen through ZooKeeper
can take its place.

Invariants, all kept under the group's lock:

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
  Expiry is checked on every call and by :meth:`expire`, which the node calls
  on a timer.
- **Metadata.** A subscribed topic that gains partitions (or is deleted)
  rebalances the group, as a metadata change does in Kafka: :meth:`expire`
  compares the partition counts with those of the last assignment.
- **Positions.** The next offset a member fetches from a partition is held
  here; a partition newly given to a member starts at the group's committed
  offset, else at the member's ``auto.offset.reset``. Commits go to the
  ``_offsets`` Delta table (:class:`~logstore.groups.offsets.OffsetsStore`).
- **One consumer type.** While members subscribe to a topic, the node holds
  the group's lease (:class:`~logstore.groups.leases.GroupLease`) on it, so a Spark
  query reading with ``group=G`` and members of G never share a topic.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

import pyarrow.compute as pc

from logstore.errors import (
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRequestError,
    LogstoreError,
    OffsetOutOfRangeError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from logstore.groups.assignors import ASSIGNORS, Assignment, assign
from logstore.groups.leases import GroupLease
from logstore.structs import FetchResult, GroupTopicPartition, TopicPartition

if TYPE_CHECKING:
    from logstore.store import LogStore

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_POLL_INTERVAL_MS",
    "DEFAULT_SESSION_TIMEOUT_MS",
    "Coordinator",
    "FetchFn",
    "GroupCoordinator",
    "MemberState",
    "OffsetReset",
]

DEFAULT_SESSION_TIMEOUT_MS = 45_000
"""Kafka's ``session.timeout.ms`` default."""

DEFAULT_MAX_POLL_INTERVAL_MS = 300_000
"""Kafka's ``max.poll.interval.ms`` default: the longest a member may go without fetching."""

OffsetReset = Literal["earliest", "latest"]

FetchFn = Callable[[str, int, int, int, int], FetchResult]
"""``fetch(topic, partition, offset, max_records, max_bytes)``: a slice of one partition."""

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
class _Member:
    member_id: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    auto_offset_reset: OffsetReset
    last_seen: float
    """Clock time of its last heartbeat (or join)."""
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
class _Group:
    name: str
    lock: threading.RLock = field(default_factory=threading.RLock)
    generation: int = 0
    assignor: str = "range"
    members: dict[str, _Member] = field(default_factory=dict)
    target: Assignment = field(default_factory=dict)
    pending: dict[TopicPartition, tuple[str, int]] = field(default_factory=dict)
    """Revoked partitions → (old owner, generation of the revocation), until the old owner acknowledges."""
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    """Partition count of each subscribed topic when the target was computed."""
    fenced: OrderedDict[str, str] = field(default_factory=OrderedDict)
    """Departed members → why they went (for the error their next call gets)."""
    leases: dict[str, GroupLease] = field(default_factory=dict)
    stale: bool = False
    """A rebalance was started and did not finish (a topic's table could not be read): the next sweep redoes it."""


class Coordinator(Protocol):
    """The group coordinator as the HTTP tier uses it (embedded now; chosen through ZooKeeper later)."""

    def join(
        self,
        group: str,
        topics: Iterable[str],
        *,
        assignor: str = "range",
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        auto_offset_reset: OffsetReset = "latest",
        max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS,
    ) -> MemberState: ...

    def heartbeat(self, group: str, member_id: str, acknowledged: int | None = None) -> MemberState: ...

    def leave(self, group: str, member_id: str) -> None: ...

    def commit(self, group: str, member_id: str, generation: int, offsets: Mapping[TopicPartition, int]) -> None: ...

    def fetch(
        self, group: str, member_id: str, fetch: FetchFn, *, max_records: int, max_bytes: int
    ) -> list[tuple[str, FetchResult]]: ...

    def groups(self) -> list[str]: ...

    def member(self, group: str, member_id: str) -> MemberState: ...

    def members(self, group: str) -> list[MemberState]: ...

    def expire(self) -> None: ...

    def drop(self, group: str) -> None: ...

    def close(self) -> None: ...


class GroupCoordinator:
    """The embedded coordinator of every group of one store (thread-safe, no threads of its own).

    Args:
        store: the store whose topics, ``_offsets`` table and group leases it uses.
        clock: monotonic seconds, for session expiry.
        lease_timeout_ms: how long the group leases outlive this node if it dies.
    """

    def __init__(
        self,
        store: LogStore,
        *,
        clock: Callable[[], float] = time.monotonic,
        lease_timeout_ms: int | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._lease_timeout_ms = lease_timeout_ms
        self._groups: dict[str, _Group] = {}
        self._guard = threading.Lock()
        self._offsets_lock = threading.Lock()  # OffsetsStore caches its table: one caller at a time

    # -- membership -------------------------------------------------------------

    def join(
        self,
        group: str,
        topics: Iterable[str],
        *,
        assignor: str = "range",
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        auto_offset_reset: OffsetReset = "latest",
        max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS,
    ) -> MemberState:
        """Add a member subscribed to ``topics``; it gets its id, generation and partitions at once.

        The member is removed when no heartbeat comes for ``session_timeout_ms``
        or no fetch for ``max_poll_interval_ms``.

        Partitions that other members still own (until they acknowledge their
        revocation) come to the new member in later generations, by heartbeat.

        Raises:
            InvalidGroupIdError: empty group name.
            InvalidRequestError: no topics, an unknown assignor or offset reset.
            InconsistentGroupProtocolError: the group's live members use another assignor.
            UnknownTopicOrPartitionError: a topic does not exist.
            GroupSubscribedToTopicError: a Spark query of the group reads one of the topics.
        """
        if not group:
            raise InvalidGroupIdError("consumer group name must be a non-empty string")
        wanted = tuple(sorted(set(topics)))
        if not wanted:
            raise InvalidRequestError("a member must subscribe to at least one topic")
        if assignor not in ASSIGNORS:
            raise InvalidRequestError(f"assignor must be one of {', '.join(ASSIGNORS)}, got '{assignor}'")
        if auto_offset_reset not in ("earliest", "latest"):
            raise InvalidRequestError(f"auto.offset.reset must be earliest or latest, got '{auto_offset_reset}'")
        if max_poll_interval_ms < 1:
            raise InvalidRequestError(f"max.poll.interval.ms must be positive, got {max_poll_interval_ms}")
        for t in wanted:
            self._store.describe_topic(t)  # UnknownTopicOrPartitionError before anything changes
        g = self._group(group)
        with g.lock:
            self._expire_group(g)
            if g.members and assignor != g.assignor:
                raise InconsistentGroupProtocolError(
                    f"consumer group '{group}' uses the assignor '{g.assignor}'; "
                    f"set partition.assignment.strategy={g.assignor} (or stop its members first)"
                )
            self._hold_leases(g, wanted)
            if not g.members:
                g.assignor = assignor
            now = self._clock()
            member = _Member(
                member_id=f"member-{uuid.uuid4().hex}",
                topics=wanted,
                session_timeout_ms=session_timeout_ms,
                auto_offset_reset=auto_offset_reset,
                last_seen=now,
                max_poll_interval_ms=max_poll_interval_ms,
                last_fetch=now,
            )
            g.members[member.member_id] = member
            self._rebalance(g, joined=member)
            member.delivered = member.generation
            return member.state()

    def heartbeat(self, group: str, member_id: str, acknowledged: int | None = None) -> MemberState:
        """Keep the member's session alive; returns its current generation and assignment.

        ``acknowledged`` is the generation whose assignment the member has
        applied (it stopped fetching and committed what it revoked); None
        acknowledges the generation the previous response gave it. Partitions
        revoked from it at or before that generation go to their new owners.

        Raises:
            UnknownMemberIdError: the member left or its session expired; join again.
        """
        g = self._group(group)
        with g.lock:
            self._expire_group(g)
            m = self._live(g, member_id)
            m.last_seen = self._clock()
            acked = m.delivered if acknowledged is None else min(acknowledged, m.generation)
            freed = [tp for tp, (owner, gen) in g.pending.items() if owner == member_id and gen <= acked]
            for tp in freed:
                del g.pending[tp]
            if freed:
                self._reconcile(g)
            m.delivered = m.generation
            return m.state()

    def leave(self, group: str, member_id: str) -> None:
        """Remove the member now; its partitions go to the others at once.

        Raises:
            UnknownMemberIdError: no such live member.
        """
        g = self._group(group)
        with g.lock:
            self._expire_group(g)
            if member_id not in g.members:
                raise UnknownMemberIdError(f"consumer group '{group}' has no member '{member_id}'")
            self._remove(g, member_id)
            self._rebalance(g)

    def groups(self) -> list[str]:
        """Groups with at least one live member, sorted."""
        self.expire()
        with self._guard:
            groups = list(self._groups.values())
        return sorted(g.name for g in groups if g.members)

    def member(self, group: str, member_id: str) -> MemberState:
        """One live member's state (not a heartbeat: its session is not extended).

        Raises:
            UnknownMemberIdError: the member left or its session expired.
        """
        g = self._group(group)
        with g.lock:
            self._expire_group(g)
            return self._live(g, member_id).state()

    def members(self, group: str) -> list[MemberState]:
        """The group's live members, sorted by id (empty for a group without members)."""
        with self._guard:
            g = self._groups.get(group)
        if g is None:
            return []
        with g.lock:
            self._expire_group(g)
            return [m.state() for _, m in sorted(g.members.items())]

    def expire(self) -> None:
        """Remove expired members and rebalance groups whose topics' partition counts changed.

        The node calls it on a timer, so a topic that gains partitions gets
        owners for them within one period, whoever altered it.

        A group whose topics cannot be read now is logged and left for the next
        call; the other groups are still swept.
        """
        with self._guard:
            groups = list(self._groups.values())
        for g in groups:
            try:
                self._sweep(g)
            except LogstoreError as e:
                log.warning("group '%s': expiry or rebalance failed (%s); retrying at the next sweep", g.name, e)

    def _sweep(self, g: _Group) -> None:
        with g.lock:
            self._expire_group(g)
            if g.stale and g.members:
                self._rebalance(g)
            topics = sorted(g.counts) if g.members else []
        if not topics:
            return
        # Read outside the group's lock: it opens Delta tables, and members must not wait on it.
        counts = {t: self._partition_count(t) for t in topics}
        with g.lock:
            if g.members and any(g.counts.get(t) not in (None, n) for t, n in counts.items()):
                self._rebalance(g)

    def drop(self, group: str) -> None:
        """Forget ``group``'s members and release its leases: another node coordinates it now (cluster mode).

        Its committed offsets stay in the ``_offsets`` table; members that come
        back here later rejoin (``UNKNOWN_MEMBER_ID``) instead of meeting stale state.
        """
        with self._guard:
            g = self._groups.pop(group, None)
        if g is None:
            return
        with g.lock:
            g.members.clear()
            for lease in g.leases.values():
                lease.release()
            g.leases.clear()

    def close(self) -> None:
        """Release every group lease this node holds (members are forgotten)."""
        with self._guard:
            groups = list(self._groups.values())
            self._groups.clear()
        for g in groups:
            with g.lock:
                for lease in g.leases.values():
                    lease.release()
                g.leases.clear()

    # -- offsets and records ----------------------------------------------------

    def commit(self, group: str, member_id: str, generation: int, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` (partition → next offset to read) for the member; durable when it returns.

        Raises:
            UnknownMemberIdError: the group never had this member.
            IllegalGenerationError: ``generation`` is not the member's current one, the member
                left or expired, or it does not own one of the partitions.
            OffsetOutOfRangeError: an offset outside [log start, high watermark].
            GroupSubscribedToTopicError: the node lost the group's lease of the topic.
        """
        g = self._group(group)
        with g.lock:
            self._expire_group(g)
            m = self._member_for_commit(g, member_id, generation)
            for tp in offsets:
                owner = g.pending.get(tp, (None, 0))[0]
                if tp not in m.assigned and owner != member_id:
                    raise IllegalGenerationError(
                        f"member '{member_id}' of group '{group}' does not own {tp.topic}-{tp.partition} "
                        f"in generation {generation}"
                    )
            by_topic: dict[str, dict[int, int]] = {}
            for tp, o in offsets.items():
                by_topic.setdefault(tp.topic, {})[tp.partition] = o
            # Under the group's lock: a partition cannot change owner while its commit is being written,
            # so its next owner starts from this commit, never from the one before.
            for topic, offs in sorted(by_topic.items()):
                lease = g.leases.get(topic)
                if lease is not None:
                    lease.acquire([topic])
                with self._offsets_lock:
                    self._store.commit_offsets(group, topic, offs)

    def fetch(
        self, group: str, member_id: str, fetch: FetchFn, *, max_records: int, max_bytes: int
    ) -> list[tuple[str, FetchResult]]:
        """Records of the member's partitions from the group's positions, which move past them.

        Partitions are read in turn from a cursor that moves one partition on at
        every call, so a busy partition never starves the others; at most
        ``max_records`` records and (after the first record) ``max_bytes``
        bytes in all. Returns (topic, slice) for each partition that had records.

        Raises:
            UnknownMemberIdError: the member left or its session expired.
        """
        plan = self._plan(group, member_id)
        out: list[tuple[str, FetchResult]] = []
        moved: dict[TopicPartition, tuple[int, int]] = {}
        left_records, left_bytes = max_records, max_bytes
        for tp, pos in plan:
            if left_records <= 0 or left_bytes <= 0:
                break
            try:
                result = fetch(tp.topic, tp.partition, pos, left_records, left_bytes)
            except OffsetOutOfRangeError:
                # Retention removed the position: Kafka's consumer applies auto.offset.reset.
                self._reset_position(group, member_id, tp, pos)
                continue
            n = len(result.records)
            if not n:
                continue
            out.append((tp.topic, result))
            moved[tp] = (pos, int(result.records["offset"][n - 1].as_py()) + 1)
            left_records -= n
            left_bytes -= sum(pc.sum(pc.binary_length(result.records[col])).as_py() or 0 for col in ("key", "value"))
        if moved:
            g = self._group(group)
            with g.lock:
                m = g.members.get(member_id)
                for tp, (old, new) in moved.items():
                    if m is not None and tp in m.assigned and g.positions.get(tp) == old:
                        g.positions[tp] = new
        return out

    # -- internals --------------------------------------------------------------

    def _group(self, name: str) -> _Group:
        with self._guard:
            g = self._groups.get(name)
            if g is None:
                g = self._groups[name] = _Group(name)
            return g

    def _live(self, g: _Group, member_id: str) -> _Member:
        m = g.members.get(member_id)
        if m is None:
            why = g.fenced.get(member_id, "it left, or no heartbeat came within session.timeout.ms")
            raise UnknownMemberIdError(f"consumer group '{g.name}' has no member '{member_id}' ({why}); join again")
        return m

    def _member_for_commit(self, g: _Group, member_id: str, generation: int) -> _Member:
        m = g.members.get(member_id)
        if m is None:
            if member_id in g.fenced:
                raise IllegalGenerationError(
                    f"member '{member_id}' of group '{g.name}' left or its session expired; "
                    f"its generation {generation} is fenced (the group is at generation {g.generation})"
                )
            raise UnknownMemberIdError(f"consumer group '{g.name}' has no member '{member_id}'")
        if generation != m.generation:
            raise IllegalGenerationError(
                f"member '{member_id}' of group '{g.name}' committed with generation {generation}, "
                f"its generation is {m.generation}: heartbeat to learn its assignment, then commit again"
            )
        return m

    def _expire_group(self, g: _Group) -> None:
        now = self._clock()
        dead: dict[str, str] = {}
        for mid, m in g.members.items():
            if now - m.last_seen > m.session_timeout_ms / 1000:
                dead[mid] = f"no heartbeat came within session.timeout.ms={m.session_timeout_ms}"
            elif now - m.last_fetch > m.max_poll_interval_ms / 1000:
                dead[mid] = f"no fetch came within max.poll.interval.ms={m.max_poll_interval_ms}"
        for mid, why in dead.items():
            self._remove(g, mid, why)
        if dead:
            self._rebalance(g)

    def _remove(self, g: _Group, member_id: str, why: str = "it left") -> None:
        m = g.members.pop(member_id)
        for tp in m.assigned:
            g.positions.pop(tp, None)
        m.assigned.clear()  # a fetch planned before the removal must not read on for it
        for tp in [tp for tp, (owner, _) in g.pending.items() if owner == member_id]:
            del g.pending[tp]
        g.fenced[member_id] = why
        while len(g.fenced) > _FENCED_KEPT:
            g.fenced.popitem(last=False)

    def _rebalance(self, g: _Group, joined: _Member | None = None) -> None:
        """A new target after a change of membership, then as much of it as revocations allow."""
        g.stale = True  # until the new target is in place: a rebalance that raises is redone by the next sweep
        subscriptions = {mid: m.topics for mid, m in g.members.items()}
        counts = {t: self._partition_count(t) for t in {t for m in g.members.values() for t in m.topics}}
        g.counts = counts
        current = {mid: sorted(m.assigned) for mid, m in g.members.items()}
        g.target = assign(g.assignor, subscriptions, counts, current)
        g.generation += 1
        if joined is not None:
            joined.generation = g.generation
        self._reconcile(g, bumped=True)
        self._release_unused_leases(g)
        g.stale = False

    def _partition_count(self, topic: str) -> int:
        """The topic's partitions; 0 once it is deleted (its members keep the group's other topics)."""
        try:
            return self._store.catalog.topic_config(topic)[0]  # table properties only, no file statistics
        except UnknownTopicOrPartitionError:
            return 0

    def _reconcile(self, g: _Group, *, bumped: bool = False) -> None:
        """Move the actual assignment toward the target: revoke what moves, give out what is free."""
        changed: set[str] = set()
        revoked: list[TopicPartition] = []
        for mid, m in g.members.items():
            target = set(g.target.get(mid, ()))
            for tp in sorted(m.assigned - target):
                m.assigned.discard(tp)
                g.positions.pop(tp, None)
                revoked.append(tp)
                g.pending[tp] = (mid, -1)
                changed.add(mid)
        owned = {tp for m in g.members.values() for tp in m.assigned}
        for mid, m in g.members.items():
            for tp in g.target.get(mid, ()):
                if tp not in m.assigned and tp not in owned and tp not in g.pending:
                    m.assigned.add(tp)
                    owned.add(tp)
                    g.positions.pop(tp, None)
                    changed.add(mid)
        if changed and not bumped:
            g.generation += 1
        for tp in revoked:
            g.pending[tp] = (g.pending[tp][0], g.generation)
        for mid in changed:
            g.members[mid].generation = g.generation

    def _hold_leases(self, g: _Group, topics: Iterable[str]) -> None:
        for topic in topics:
            if topic in g.leases:
                continue
            lease = (
                GroupLease(self._store.config.root, g.name)
                if self._lease_timeout_ms is None
                else GroupLease(self._store.config.root, g.name, timeout_ms=self._lease_timeout_ms)
            )
            lease.acquire([topic])
            g.leases[topic] = lease

    def _release_unused_leases(self, g: _Group) -> None:
        used = {t for m in g.members.values() for t in m.topics}
        for topic in [t for t in g.leases if t not in used]:
            g.leases.pop(topic).release()

    def _plan(self, group: str, member_id: str) -> list[tuple[TopicPartition, int]]:
        """The member's partitions in fetch order with their positions (resolving unknown ones)."""
        g = self._group(group)
        with g.lock:
            self._expire_group(g)
            m = self._live(g, member_id)
            m.last_fetch = self._clock()
            parts = sorted(m.assigned)
            if not parts:
                return []
            start = m.cursor % len(parts)
            m.cursor = start + 1
            order = parts[start:] + parts[:start]
            unknown = [tp for tp in order if tp not in g.positions]
            reset = m.auto_offset_reset
        if unknown:
            found = self._initial_positions(group, unknown, reset)
            with g.lock:
                for tp, pos in found.items():
                    if tp in m.assigned:
                        g.positions.setdefault(tp, pos)
        with g.lock:
            # only what the member still owns: a heartbeat may have revoked some since
            return [(tp, g.positions[tp]) for tp in order if tp in m.assigned and tp in g.positions]

    def _initial_positions(
        self, group: str, parts: list[TopicPartition], reset: OffsetReset
    ) -> dict[TopicPartition, int]:
        """Committed offset (clamped into the partition's range), else ``reset``'s end of the partition."""
        out: dict[TopicPartition, int] = {}
        for topic in sorted({tp.topic for tp in parts}):
            with self._offsets_lock:
                committed = self._store.committed(group, topic)
            info = self._store.describe_topic(topic).partitions
            for tp in parts:
                if tp.topic != topic or tp.partition >= len(info):
                    continue
                p = info[tp.partition]
                c = committed.get(GroupTopicPartition(group, topic, tp.partition))
                if c is not None:
                    out[tp] = min(max(c.offset, p.log_start_offset), p.high_watermark)
                else:
                    out[tp] = p.log_start_offset if reset == "earliest" else p.high_watermark
        return out

    def _reset_position(self, group: str, member_id: str, tp: TopicPartition, stale: int) -> None:
        g = self._group(group)
        with g.lock:
            m = g.members.get(member_id)
            reset: OffsetReset = m.auto_offset_reset if m is not None else "latest"
        p = self._store.describe_topic(tp.topic).partitions[tp.partition]
        new = p.log_start_offset if reset == "earliest" else p.high_watermark
        with g.lock:
            if g.positions.get(tp) == stale:
                g.positions[tp] = new
