"""The coordinator of Kafka's classic consumer group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

Kafka's clients assign partitions themselves (client-side assignors): the
coordinator only gathers the members, picks an assignor all of them support,
hands the leader every member's subscription and passes the leader's
assignment on (:mod:`~logstore.groups.classic_group` holds the state machine).
It runs on one asyncio event loop (the Kafka listener's) and knows nothing of
the wire protocol: ``kafka_api.membership`` turns requests into these calls.

Groups live in this node's memory, as in a Kafka broker's, but are not
persisted: after a restart members find themselves unknown
(``UNKNOWN_MEMBER_ID``) and join again; their committed offsets are in
``_offsets`` and survive.

**One door per group.** While a classic group has members it holds the group
leases (:class:`~logstore.groups.leases.GroupLease`, marked ``door: kafka``)
of the topics its members subscribe to, so HTTP members
(:class:`~logstore.groups.coordinator.GroupCoordinator`) and Spark queries of
the same group are refused, and a JoinGroup is refused with
``INCONSISTENT_GROUP_PROTOCOL`` while any other reader holds a lease of the
group. Commits of a member renew the lease of their topic first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable

from logstore.common.logs import describe
from logstore.config import LogstoreConfig
from logstore.errors import (
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    LogstoreError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from logstore.groups.classic_group import (
    COMPLETING,
    EMPTY,
    PREPARING,
    STABLE,
    ClassicGroup,
    ClassicMember,
    GroupView,
    JoinAnswer,
    settle,
)
from logstore.groups.leases import GroupLease

__all__ = ["ClassicCoordinator", "Joining"]

log = logging.getLogger("logstore.groups.classic")

_SWEEP_S = 0.1
"""How often sessions and rebalance deadlines are checked (s)."""


class Joining:
    """A JoinGroup as the coordinator takes it (the request's fields, times in ms)."""

    def __init__(
        self,
        *,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...],
        topics: frozenset[str],
        requires_member_id: bool = False,
    ) -> None:
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.topics = topics
        """The topics its subscription names (for the group's leases); empty for protocols other than ``consumer``."""
        self.requires_member_id = requires_member_id
        """Whether a new dynamic member gets its id first (``MEMBER_ID_REQUIRED``: JoinGroup v4+, as in Kafka)."""

    def member(self, member_id: str, now: float) -> ClassicMember:
        return ClassicMember(
            member_id=member_id,
            instance_id=self.instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            protocols=self.protocols,
            last_seen=now,
        )


class ClassicCoordinator:
    """Every classic group of one node (see the module docstring); call it on one event loop only.

    Args:
        config: ``logstore.root`` (for the leases), ``group.initial.rebalance.delay.ms``,
            ``group.min.session.timeout.ms`` and ``group.max.session.timeout.ms``.
        clock: monotonic seconds (the loop's time by default).
    """

    def __init__(self, config: LogstoreConfig, *, clock: Callable[[], float] | None = None) -> None:
        self._config = config
        self._clock = clock or asyncio.get_running_loop().time
        self._groups: dict[str, ClassicGroup] = {}
        self._leases: dict[str, GroupLease] = {}
        self._topics: dict[str, set[str]] = {}
        self._lease_lock: dict[str, asyncio.Lock] = {}
        self._releasing: dict[str, asyncio.Task[None]] = {}
        self._given: dict[tuple[str, str], float] = {}
        """(group, member id) handed out with ``MEMBER_ID_REQUIRED`` → until when it may join (loop time)."""
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start checking sessions and rebalance deadlines (every ``_SWEEP_S``)."""
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def close(self) -> None:
        """Stop; waiting requests get ``REBALANCE_IN_PROGRESS`` (they rejoin elsewhere), leases are released."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for g in self._groups.values():
            for m in g.members.values():
                for fut in (m.joining, m.syncing):
                    if fut is not None and not fut.done():
                        fut.set_exception(RebalanceInProgressError("this node is shutting down"))
        self._groups.clear()
        for name in list(self._leases):
            await asyncio.to_thread(self._leases.pop(name).release)

    # -- the protocol -------------------------------------------------------------

    async def join(self, group: str, joining: Joining) -> JoinAnswer:
        """Join (or rejoin) ``group``; answers once the rebalance completes.

        Raises:
            InvalidGroupIdError: an empty group id.
            InvalidSessionTimeoutError: ``session.timeout.ms`` outside the node's bounds.
            InconsistentGroupProtocolError: no protocol type, no assignor shared with the members, or
                another door (HTTP members, a Spark query) reads the group.
            UnknownMemberIdError, FencedInstanceIdError: a member id the group does not know.
        """
        if not group:
            raise InvalidGroupIdError("group.id must be a non-empty string")
        lo, hi = self._config.group_min_session_timeout_ms, self._config.group_max_session_timeout_ms
        if not lo <= joining.session_timeout_ms <= hi:
            raise InvalidSessionTimeoutError(
                f"session.timeout.ms={joining.session_timeout_ms} is outside this node's bounds "
                f"[group.min.session.timeout.ms={lo}, group.max.session.timeout.ms={hi}]"
            )
        if not joining.protocol_type or not joining.protocols:
            raise InconsistentGroupProtocolError("a member must name its protocol type and at least one assignor")
        given = self._given.pop((group, joining.member_id), None) is not None
        if joining.member_id and not given:  # a rejoin: of a member this group has (before any lease is taken)
            self._known(group, joining.member_id).member(joining.member_id, joining.instance_id)
        if not joining.member_id and joining.instance_id is None and joining.requires_member_id:
            member_id = f"{joining.client_id or 'member'}-{uuid.uuid4()}"
            self._given[(group, member_id)] = self._clock() + joining.session_timeout_ms / 1000
            raise MemberIdRequiredError(f"join group '{group}' again with member id '{member_id}'", member_id=member_id)
        await self._hold(group, joining.topics)
        g = self._group(group)
        if not g.compatible(joining.protocol_type, joining.protocols, joining.member_id):
            self._release_if_empty(group)
            raise InconsistentGroupProtocolError(
                f"consumer group '{group}' has members of protocol type '{g.protocol_type}' with assignors "
                f"{sorted({n for m in g.members.values() for n, _ in m.protocols})}; this member offers "
                f"'{joining.protocol_type}' with {[n for n, _ in joining.protocols]}: set the same "
                "partition.assignment.strategy on every member"
            )
        now = self._clock()
        if not joining.member_id or given:
            member_id = joining.member_id or f"{joining.client_id or 'member'}-{uuid.uuid4()}"
            old = g.instances.get(joining.instance_id) if joining.instance_id is not None else None
            if old is not None:
                return await self._rejoin_static(g, old, joining.member(member_id, now), now)
            m = joining.member(member_id, now)
            m.joining = asyncio.get_running_loop().create_future()
            g.add(m, joining.protocol_type, now)
        else:
            m = g.member(joining.member_id, joining.instance_id)
            unchanged = m.protocols == joining.protocols
            m.protocols, m.last_seen = joining.protocols, now
            m.session_timeout_ms, m.rebalance_timeout_ms = joining.session_timeout_ms, joining.rebalance_timeout_ms
            if unchanged and (g.state == COMPLETING or (g.state == STABLE and m.member_id != g.leader)):
                return g.answer(m.member_id)  # it missed its answer, or rejoins for nothing: no rebalance
            if m.joining is not None and not m.joining.done():
                m.joining.set_exception(RebalanceInProgressError("a newer JoinGroup of this member replaced this one"))
            m.joining = asyncio.get_running_loop().create_future()
            if g.state != PREPARING:
                g.prepare(now)
        fut = m.joining
        g.maybe_complete(now)
        return await fut

    async def _rejoin_static(self, g: ClassicGroup, old_id: str, member: ClassicMember, now: float) -> JoinAnswer:
        """A static member back under a new id: in a Stable group it keeps its assignment without a rebalance."""
        old = g.members[old_id]
        unchanged = old.protocols == member.protocols
        g.replace(old_id, member)
        if g.state == STABLE and unchanged and member.member_id != g.leader:
            return g.answer(member.member_id)
        member.joining = asyncio.get_running_loop().create_future()
        if g.state != PREPARING:
            g.prepare(now)
        fut = member.joining
        g.maybe_complete(now)
        return await fut

    async def sync(
        self, group: str, generation: int, member_id: str, instance_id: str | None, assignments: dict[str, bytes]
    ) -> tuple[str, str, bytes]:
        """The member's assignment (protocol type, assignor, bytes); the leader's call carries everyone's.

        Raises:
            UnknownMemberIdError, FencedInstanceIdError, IllegalGenerationError: not a current member.
            RebalanceInProgressError: the group started another rebalance: join again.
        """
        g = self._known(group, member_id)
        m = g.current(member_id, instance_id, generation)
        m.last_seen = self._clock()
        if g.state == PREPARING:
            raise RebalanceInProgressError(f"consumer group '{group}' is rebalancing: join again")
        if g.state == COMPLETING:
            settle(m.syncing, error=RebalanceInProgressError("a newer SyncGroup of this member replaced this one"))
            m.syncing = asyncio.get_running_loop().create_future()
            fut = m.syncing
            g.sync(m, assignments)
            return g.protocol_type, g.protocol, await fut
        return g.protocol_type, g.protocol, m.assignment

    def heartbeat(self, group: str, generation: int, member_id: str, instance_id: str | None) -> None:
        """Keep the member's session alive.

        Raises:
            UnknownMemberIdError, FencedInstanceIdError, IllegalGenerationError: not a current member.
            RebalanceInProgressError: the group is rebalancing: the member joins again.
        """
        g = self._known(group, member_id)
        m = g.current(member_id, instance_id, generation)
        m.last_seen = self._clock()
        if g.state == PREPARING:
            raise RebalanceInProgressError(f"consumer group '{group}' is rebalancing: join again")

    def leave(self, group: str, members: list[tuple[str, str | None]]) -> list[LogstoreError | None]:
        """Remove members (member id, instance id; a static member may be named by its instance id alone)."""
        g = self._groups.get(group)
        out: list[LogstoreError | None] = []
        now = self._clock()
        for member_id, instance_id in members:
            try:
                if g is None:
                    raise UnknownMemberIdError(f"consumer group '{group}' has no members")
                if not member_id and instance_id is not None:
                    member_id = g.instances.get(instance_id, "")
                g.member(member_id, instance_id)
                g.remove(member_id, "it left the group (LeaveGroup)")
                out.append(None)
            except LogstoreError as e:
                out.append(e)
        if g is not None and any(e is None for e in out):
            g.changed(now)
            self._release_if_empty(group)
        return out

    def check_commit(self, group: str, generation: int, member_id: str, instance_id: str | None) -> bool:
        """May this commit go to ``_offsets``? True when the group is a classic group with members.

        A commit with generation -1 and no member id (a consumer that assigned its partitions itself) is
        allowed while the group has no members, as in Kafka; a member's commit must carry its current
        generation, and renews the group's leases of the topics first.

        Raises:
            IllegalGenerationError: a generation the group never had, or not the current one.
            UnknownMemberIdError, FencedInstanceIdError: not a member of the group.
            RebalanceInProgressError: the group waits for the leader's assignment.
        """
        g = self._groups.get(group)
        if g is None or g.state == EMPTY:
            if generation < 0:
                return False
            if g is None:
                raise IllegalGenerationError(
                    f"consumer group '{group}' has no generation {generation} here (it has no members: join first, "
                    "or commit with generation -1)"
                )
        m = g.current(member_id, instance_id, generation)
        m.last_seen = self._clock()
        if g.state == COMPLETING:  # a current member that has no assignment yet (as Kafka answers it)
            raise RebalanceInProgressError(f"consumer group '{group}' is rebalancing: commit after its SyncGroup")
        return True

    async def renew(self, group: str, topics: set[str]) -> None:
        """Renew the group's leases of ``topics`` before a member's commit (raises if another reader took one)."""
        lease = self._leases.get(group)
        held = topics & self._topics.get(group, set())
        if lease is not None and held:
            await asyncio.to_thread(lease.acquire, held)

    def view(self, group: str) -> GroupView | None:
        g = self._groups.get(group)
        return None if g is None else g.view()

    def views(self) -> list[GroupView]:
        return [g.view() for _, g in sorted(self._groups.items())]

    # -- internals ------------------------------------------------------------------

    def _group(self, group: str) -> ClassicGroup:
        g = self._groups.get(group)
        if g is None:
            g = self._groups[group] = ClassicGroup(group, self._config.group_initial_rebalance_delay_ms / 1000)
        return g

    def _known(self, group: str, member_id: str) -> ClassicGroup:
        g = self._groups.get(group)
        if g is None:
            raise UnknownMemberIdError(f"consumer group '{group}' has no member '{member_id}'; join again")
        return g

    async def _hold(self, group: str, topics: frozenset[str]) -> None:
        """Hold the group's leases of ``topics`` (and check, at the first, that no other door reads the group)."""
        lock = self._lease_lock.setdefault(group, asyncio.Lock())
        async with lock:
            releasing = self._releasing.pop(group, None)
            if releasing is not None:  # the group emptied just now: its old leases go first
                with contextlib.suppress(Exception):
                    await releasing
            held = self._topics.setdefault(group, set())
            new = set(topics) - held
            if not new and group in self._leases:
                return
            lease = self._leases.get(group)
            if lease is None:
                lease = GroupLease(self._config.root, group, door="kafka")
            try:
                await asyncio.to_thread(self._take, lease, new, first=group not in self._leases)
            except LogstoreError:
                if group not in self._leases:
                    self._lease_lock.pop(group, None)
                    self._topics.pop(group, None)
                raise
            self._leases[group] = lease
            held |= new

    @staticmethod
    def _take(lease: GroupLease, topics: set[str], *, first: bool) -> None:
        if first:
            others = lease.live_doors()
            if others:
                doors = sorted({d or "HTTP members or a Spark query" for d in others.values()})
                raise InconsistentGroupProtocolError(
                    f"consumer group '{lease.group}' is read by another door ({', '.join(doors)}: a live lease under "
                    "_groups); a group is served by one door at a time: stop those readers or use another group.id"
                )
        try:
            lease.acquire(topics)
        except GroupSubscribedToTopicError as e:
            raise InconsistentGroupProtocolError(f"{e.message}; a group is served by one door at a time") from e

    def _release_if_empty(self, group: str) -> None:
        g = self._groups.get(group)
        if g is not None and g.members:
            return
        lease = self._leases.pop(group, None)
        self._topics.pop(group, None)
        if g is not None and g.state == EMPTY and g.generation == 0:
            del self._groups[group]  # never had a generation: nothing to show
        if lease is not None:
            task = asyncio.get_running_loop().create_task(asyncio.to_thread(lease.release))
            task.add_done_callback(_log_failure)
            self._releasing[group] = task

    def tick(self) -> None:
        """Remove members whose session ran out and complete rebalances whose time is up (every ``_SWEEP_S``)."""
        now = self._clock()
        for key in [k for k, until in self._given.items() if until < now]:
            del self._given[key]  # handed out, never used: the client gave up
        for name, g in list(self._groups.items()):
            try:
                g.expire(now)
                g.maybe_complete(now)
                if not g.members:
                    self._release_if_empty(name)
            except Exception as e:  # one group's defect must not stop the sweep of the others
                log.exception("classic group '%s': sweep failed: %s", name, describe(e))

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_S)
            self.tick()


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("releasing a group lease failed: %s", describe(task.exception()))  # type: ignore[arg-type]
