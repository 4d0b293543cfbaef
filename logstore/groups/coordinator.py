"""The group coordinator: members, generations, assignments, fencing and positions of consumer groups.

Kafka's consumer-group protocol with server-side assignment (KIP-848): a
member joins with its topics and gets an id, a generation and its partitions
at once; the others learn of the change by heartbeat. The coordinator lives
in the node (``logstore serve``); in cluster mode each group has one
coordinator node, and the others forward its members' calls there.

Each group's members, generations and assignment are a
:class:`~logstore.groups.group.ConsumerGroup` (one live owner per partition,
generations, sessions: see there); the coordinator holds them, each under its
group's lock, and adds what needs the store:

- **Expiry.** Checked on every call and by :meth:`GroupCoordinator.expire`,
  which the node calls on a timer.
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
- **Fencing.** The lease's generation is the coordinator's fencing token: on
  taking a lease it writes the generation into ``_offsets`` before it reads the
  group's offsets there, and every commit carries it; the table refuses a commit
  with an older one (``NOT_COORDINATOR``). So a coordinator that lost the group —
  also one stalled between its lease check and its write for longer than the
  lease lasts — never answers a commit its successor did not read.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import pyarrow.compute as pc

from logstore.common.logs import describe
from logstore.config import LogstoreConfig
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
from logstore.groups.assignors import ASSIGNORS
from logstore.groups.group import DEFAULT_MAX_POLL_INTERVAL_MS, ConsumerGroup, Member, MemberState, OffsetReset
from logstore.groups.leases import GroupLease
from logstore.log.catalog import Catalog
from logstore.structs import FetchResult, GroupTopicPartition, OffsetCommit, TopicInfo, TopicPartition

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_POLL_INTERVAL_MS",
    "DEFAULT_SESSION_TIMEOUT_MS",
    "FetchFn",
    "GroupCoordinator",
    "GroupStore",
    "MemberState",
    "OffsetReset",
]

DEFAULT_SESSION_TIMEOUT_MS = 45_000
"""Kafka's ``session.timeout.ms`` default."""

FetchFn = Callable[[str, int, int, int, int], FetchResult]
"""``fetch(topic, partition, offset, max_records, max_bytes)``: a slice of one partition."""


class GroupStore(Protocol):
    """What the coordinator needs of its store (:class:`~logstore.store.LogStore` is one)."""

    @property
    def config(self) -> LogstoreConfig: ...

    @property
    def catalog(self) -> Catalog: ...

    def describe_topic(self, topic: str) -> TopicInfo: ...

    def committed(self, group: str, topic: str) -> dict[GroupTopicPartition, OffsetCommit]: ...

    def commit_offsets(
        self, group: str, topic: str, offsets: Mapping[int, int], *, fence: int | None = None
    ) -> None: ...

    def fence_offsets(self, group: str, topic: str, generation: int) -> None: ...


PausedSet = frozenset[TopicPartition]
"""Partitions a member paused (``Consumer.pause``): its fetches skip them."""
_NONE: PausedSet = frozenset()


class GroupCoordinator:
    """The embedded coordinator of every group of one store (thread-safe, no threads of its own).

    Args:
        store: the store whose topics, ``_offsets`` table and group leases it uses.
        clock: monotonic seconds, for session expiry.
        lease_timeout_ms: how long the group leases outlive this node if it dies.
    """

    def __init__(
        self,
        store: GroupStore,
        *,
        clock: Callable[[], float] = time.monotonic,
        lease_timeout_ms: int | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._lease_timeout_ms = lease_timeout_ms
        self._groups: dict[str, ConsumerGroup] = {}
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
            InconsistentGroupProtocolError: the group's live members use another assignor, or it has members
                through the Kafka listener.
            UnknownTopicOrPartitionError: a topic does not exist.
            GroupSubscribedToTopicError: a Spark query of the group reads one of the topics.
            NotCoordinatorError: a newer holder of the group's lease fenced the offsets meanwhile.
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
            if not g.leases:
                _refuse_kafka_group(self._store.config.root, group)
            self._hold_leases(g, wanted)
            if not g.members:
                g.assignor = assignor
            now = self._clock()
            member = Member(
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
            m = g.live(member_id)
            m.last_seen = self._clock()
            g.acknowledge(m, acknowledged)
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
            g.remove(member_id)
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
            return g.live(member_id).state()

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
                log.warning(
                    "group '%s': expiry or rebalance failed (%s); retrying at the next sweep", g.name, describe(e)
                )

    def _sweep(self, g: ConsumerGroup) -> None:
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
            NotCoordinatorError: a newer holder of the lease fenced this one (nothing was committed).
        """
        g = self._group(group)
        with g.lock:
            self._expire_group(g)
            m = g.member_for_commit(member_id, generation)
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
            for topic, offs in sorted(by_topic.items()):  # fenced by the lease's generation (module docstring)
                lease = g.leases.get(topic)
                if lease is not None:
                    lease.acquire([topic])
                with self._offsets_lock:
                    fence = None if lease is None else lease.generation(topic)
                    self._store.commit_offsets(group, topic, offs, fence=fence)

    def seek(self, group: str, member_id: str, positions: Mapping[TopicPartition, int]) -> None:
        """Move the fetch positions of partitions the member owns (``Consumer.seek``): :meth:`ConsumerGroup.seek`.

        An offset out of range is reset by ``auto.offset.reset`` at the next fetch; nothing is committed.
        """
        g = self._group(group)
        with g.lock:
            self._expire_group(g)
            g.seek(member_id, positions)

    def fetch(
        self, group: str, member_id: str, fetch: FetchFn, *, max_records: int, max_bytes: int, paused: PausedSet = _NONE
    ) -> list[tuple[str, FetchResult]]:
        """Records of the member's partitions (but ``paused`` ones) from the group's positions, which move past them.

        Partitions are read in turn from a cursor that moves one partition on at
        every call, so a busy partition never starves the others; at most
        ``max_records`` records and (after the first record) ``max_bytes``
        bytes in all. Returns (topic, slice) for each partition that had records.

        Raises:
            UnknownMemberIdError: the member left or its session expired.
        """
        plan = [(tp, pos) for tp, pos in self._plan(group, member_id) if tp not in paused]
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

    def _group(self, name: str) -> ConsumerGroup:
        with self._guard:
            g = self._groups.get(name)
            if g is None:
                g = self._groups[name] = ConsumerGroup(name)
            return g

    def _expire_group(self, g: ConsumerGroup) -> None:
        if g.remove_expired(self._clock()):
            self._rebalance(g)

    def _rebalance(self, g: ConsumerGroup, joined: Member | None = None) -> None:
        """A new target after a change of membership, then as much of it as revocations allow."""
        g.stale = True  # until the new target is in place: a rebalance that raises is redone by the next sweep
        counts = {t: self._partition_count(t) for t in {t for m in g.members.values() for t in m.topics}}
        g.retarget(counts, joined)
        self._release_unused_leases(g)
        g.stale = False

    def _partition_count(self, topic: str) -> int:
        """The topic's partitions; 0 once it is deleted (its members keep the group's other topics)."""
        try:
            return self._store.catalog.topic_config(topic)[0]  # table properties only, no file statistics
        except UnknownTopicOrPartitionError:
            return 0

    def _hold_leases(self, g: ConsumerGroup, topics: Iterable[str]) -> None:
        for topic in topics:
            if topic in g.leases:
                continue
            with self._offsets_lock:
                g.leases[topic] = _fenced_lease(self._store, g.name, topic, self._lease_timeout_ms)

    def _release_unused_leases(self, g: ConsumerGroup) -> None:
        used = {t for m in g.members.values() for t in m.topics}
        for topic in [t for t in g.leases if t not in used]:
            g.leases.pop(topic).release()

    def _plan(self, group: str, member_id: str) -> list[tuple[TopicPartition, int]]:
        """The member's partitions in fetch order with their positions (resolving unknown ones)."""
        g = self._group(group)
        with g.lock:
            self._expire_group(g)
            m = g.live(member_id)
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


def _fenced_lease(store: GroupStore, group: str, topic: str, timeout_ms: int | None) -> GroupLease:
    """The group's lease of ``topic``, taken, with its generation written as the fence of the group's offsets there.

    Before this coordinator reads any offset of the group: each commit of an
    earlier holder either landed before the fence (and is read) or is refused.

    Raises:
        GroupSubscribedToTopicError: another live reader holds the lease.
        NotCoordinatorError: a newer holder's fence is in the table already (the lease is released again).
    """
    root = store.config.root
    lease = GroupLease(root, group) if timeout_ms is None else GroupLease(root, group, timeout_ms=timeout_ms)
    lease.acquire([topic])
    try:
        store.fence_offsets(group, topic, lease.generation(topic))
    except LogstoreError:
        lease.release()
        raise
    return lease


def _refuse_kafka_group(root: str, group: str) -> None:
    """A group with members through the Kafka listener (its leases say ``door: kafka``) takes no HTTP member."""
    if "kafka" in GroupLease(root, group).live_doors().values():
        raise InconsistentGroupProtocolError(
            f"consumer group '{group}' has members through the Kafka protocol listener (JoinGroup); a group is "
            "served by one door at a time: stop those consumers or use another group.id"
        )
