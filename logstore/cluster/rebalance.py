"""Preferred-leader election: moving partitions back to their preferred leader, by a safe hand-over between live nodes.

Kafka's ``auto.leader.rebalance.enable``: a node that died and came back
leads nothing (placement is sticky), so every
``leader.imbalance.check.interval.seconds`` the controller looks at each live
node's *imbalance* — of the partitions whose preferred leader it is
(:func:`~logstore.cluster.placement.preferred_leaders`), the share it does not
lead — and moves the partitions of every node over
``leader.imbalance.per.broker.percentage`` to it. ``logstore cluster
elect-leaders`` asks for the same now, for all partitions or some, whatever the
ratio (as ``kafka-leader-election --election-type preferred``): its route
writes a request znode under ``/admin/preferred_replica_election`` and the
controller acts on it and deletes it.

Why a hand-over. A failover moves a partition only away from a node that is
not live, and its new leader replays that node's acks=1 write-ahead log; a
live leader's log is never replayed, so taking a partition from a live
leader at once would lose the acks=1 records it promised but has not
committed yet. The move is therefore made in three writes of the partition's
state znode ``/brokers/topics/<t>/partitions/<p>/state``:

1. the controller writes ``{"leader": A, "leader_epoch": e, "handover_to": B}``;
2. node A stops accepting produce for the partition at once
   (``NOT_LEADER_OR_FOLLOWER``: clients retry), commits every batch it
   accepted for it — promised acks=1 batches included — and then writes
   ``"drained": true`` into the same state, conditionally on the znode's
   version (so it never overwrites a decision the controller made meanwhile);
3. the controller, seeing ``drained``, writes ``{"leader": B, "leader_epoch": e + 1}``.
   B claims the partition at ``e + 1`` in the Delta log as after any change of
   leader, which fences A for good.

Only the controller changes a leader or an epoch (each write checks its
controller epoch), so two nodes never claim one epoch. Nothing A acknowledged
is lost: it is committed before step 2 ends. If A dies during the hand-over,
the failover takes over (its write-ahead log is replayed, ``e + 1`` elsewhere);
if B dies, or A has not drained within ``HANDOVER_TIMEOUT_S``, the controller
cancels: ``{"leader": A, "leader_epoch": e}`` again, and A accepts produce again.

Where code runs: :class:`LeaderRebalancer` on the controller's worker thread;
:func:`report_drained` on the leaving leader's cluster thread;
:func:`request_election` on a route's thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import BadVersionError, NoNodeError

from logstore.cluster.placement import PartitionState, Placement, TopicPartitionKey, above_current, preferred_leaders

__all__ = [
    "ELECTIONS",
    "HANDOVER_TIMEOUT_S",
    "LeaderRebalancer",
    "election_moves",
    "imbalanced",
    "report_drained",
    "request_election",
    "stage_state",
]

log = logging.getLogger("logstore.cluster")

ELECTIONS = "/admin/preferred_replica_election"
"""Parent of the election requests: persistent sequential children ``{"partitions": [[t, p], …] | null}``."""
HANDOVER_TIMEOUT_S = 30.0
"""How long a leader has to drain a partition it hands over before the controller cancels the hand-over (seconds)."""

Write = Callable[[dict[TopicPartitionKey, PartitionState]], None]
"""The controller's write of partition states (checks its controller epoch; updates its view of the states)."""


def imbalanced(
    current: Mapping[TopicPartitionKey, PartitionState],
    preferred: Mapping[TopicPartitionKey, int],
    live: Collection[int],
    percentage: int,
) -> list[TopicPartitionKey]:
    """The partitions to give back to their preferred leader, by Kafka's rule.

    A live node's imbalance is the share of the partitions it is preferred
    for that it does not lead; when it is over ``percentage`` % all those
    partitions move to it — each only when its leader is live too (a dead
    leader's partitions are the failover's) and no hand-over is under way.
    """
    preferred_count: Counter[int] = Counter(preferred.values())
    not_led: dict[int, list[TopicPartitionKey]] = {}
    for tp, node in preferred.items():
        state = current.get(tp)
        if state is not None and state.leader != node:
            not_led.setdefault(node, []).append(tp)
    moves: list[TopicPartitionKey] = []
    for node, tps in sorted(not_led.items()):
        if node in live and len(tps) * 100 > percentage * preferred_count[node]:
            moves += election_moves(current, preferred, live, tps)
    return sorted(moves)


def election_moves(
    current: Mapping[TopicPartitionKey, PartitionState],
    preferred: Mapping[TopicPartitionKey, int],
    live: Collection[int],
    wanted: Iterable[TopicPartitionKey] | None = None,
) -> list[TopicPartitionKey]:
    """Of ``wanted`` (default: every partition), those led by a live node other than their live preferred leader."""
    out = []
    for tp in sorted(preferred if wanted is None else set(wanted)):
        state, node = current.get(tp), preferred.get(tp)
        if state is None or node is None or state.handover_to is not None:
            continue
        if state.leader != node and state.leader in live and node in live:
            out.append(tp)
    return out


class LeaderRebalancer:
    """The controller's preferred-leader elections and hand-overs (see the module docstring).

    Args:
        zk: the controller's ZooKeeper client (of the cluster's chroot).
        placement: ``leader.placement``: the preferred leaders are the placement from scratch.
        auto: ``auto.leader.rebalance.enable``.
        interval_s: ``leader.imbalance.check.interval.seconds``.
        percentage: ``leader.imbalance.per.broker.percentage``.
    """

    def __init__(
        self, zk: KazooClient, *, placement: Placement, auto: bool, interval_s: float, percentage: int
    ) -> None:
        self._zk = zk
        self._placement = placement
        self._auto = auto
        self._interval_s = interval_s
        self._percentage = percentage
        self._next_check = time.monotonic() + interval_s
        self._started: dict[TopicPartitionKey, float] = {}
        """Hand-overs this controller started or found, with ``time.monotonic()`` of when it first saw them."""

    def step(
        self,
        states: Mapping[TopicPartitionKey, PartitionState],
        partitions: Sequence[TopicPartitionKey],
        live: Sequence[int],
        write: Write,
    ) -> None:
        """One round: finish or cancel hand-overs, act on election requests, and on the imbalance check when due."""
        self._progress(states, live, write)
        preferred = preferred_leaders(partitions, live, self._placement)
        try:
            requests = sorted(self._zk.get_children(ELECTIONS))
        except NoNodeError:
            requests = []
        moves: set[TopicPartitionKey] = set()
        for name in requests:
            moves.update(self._requested(f"{ELECTIONS}/{name}", states, preferred, live))
        now = time.monotonic()
        if self._auto and now >= self._next_check:
            self._next_check = now + self._interval_s
            moves.update(imbalanced(states, preferred, live, self._percentage))
        if moves:
            self._start(moves, states, preferred, write)
        for name in requests:  # acted on: the route that wrote it waits for the leaders to settle
            with contextlib.suppress(NoNodeError):
                self._zk.delete(f"{ELECTIONS}/{name}")

    def _requested(
        self,
        path: str,
        states: Mapping[TopicPartitionKey, PartitionState],
        preferred: Mapping[TopicPartitionKey, int],
        live: Sequence[int],
    ) -> list[TopicPartitionKey]:
        try:
            data, _ = self._zk.get(path)
        except NoNodeError:
            return []
        try:
            wanted = json.loads(data or b"{}").get("partitions")
            tps = None if wanted is None else [(str(t), int(p)) for t, p in wanted]
        except (ValueError, TypeError, AttributeError):
            log.warning("unreadable preferred-leader election request %s: %r (dropped)", path, data)
            return []
        return election_moves(states, preferred, live, tps)

    def _start(
        self,
        moves: Iterable[TopicPartitionKey],
        states: Mapping[TopicPartitionKey, PartitionState],
        preferred: Mapping[TopicPartitionKey, int],
        write: Write,
    ) -> None:
        changes = {tp: dataclasses.replace(states[tp], handover_to=preferred[tp], drained=False) for tp in moves}
        write(changes)
        now = time.monotonic()
        for tp, state in sorted(changes.items()):
            self._started[tp] = now
            log.info(
                "partition %s-%d: preferred leader %d; node %d hands it over", tp[0], tp[1], preferred[tp], state.leader
            )

    def _progress(self, states: Mapping[TopicPartitionKey, PartitionState], live: Sequence[int], write: Write) -> None:
        """Finish the hand-overs whose leader drained; cancel those whose target left or that take too long."""
        now = time.monotonic()
        changes: dict[TopicPartitionKey, PartitionState] = {}
        under_way = {tp: s for tp, s in states.items() if s.handover_to is not None}
        self._started = {tp: t for tp, t in self._started.items() if tp in under_way}
        for tp, cached in sorted(under_way.items()):
            started = self._started.setdefault(tp, now)
            state = self._read(tp)  # the leader wrote "drained" itself: the controller's view lags it
            moved = state is not None and (state.leader, state.leader_epoch) != (cached.leader, cached.leader_epoch)
            if state is None or state.handover_to is None or moved:
                continue  # gone, or changed since the controller last wrote it: the next round sees it
            assert state.handover_to is not None
            gone = state.handover_to not in live
            if gone or now - started > HANDOVER_TIMEOUT_S:
                reason = f"node {state.handover_to} left" if gone else f"not drained after {HANDOVER_TIMEOUT_S:.0f} s"
                log.warning(
                    "partition %s-%d: hand-over from node %d to node %d cancelled: %s",
                    tp[0],
                    tp[1],
                    state.leader,
                    state.handover_to,
                    reason,
                )
                changes[tp] = PartitionState(state.leader, state.leader_epoch)
            elif state.drained:
                changes[tp] = PartitionState(state.handover_to, state.leader_epoch + 1)
        if changes:
            write(changes)

    def _read(self, tp: TopicPartitionKey) -> PartitionState | None:
        try:
            data, _ = self._zk.get(f"/brokers/topics/{tp[0]}/partitions/{tp[1]}/state")
            return PartitionState.from_json(data)
        except (NoNodeError, ValueError, KeyError, TypeError):
            return None


def report_drained(zk: KazooClient, node_id: int, topic: str, partition: int, leader_epoch: int) -> bool:
    """The leaving leader's step 2: mark its hand-over of a partition drained (it committed all it accepted).

    A conditional write on the znode's version, and only while the state is
    still this node's hand-over at ``leader_epoch``: it never overwrites a
    change the controller made meanwhile. Returns whether it wrote.
    """
    path = f"/brokers/topics/{topic}/partitions/{partition}/state"
    try:
        data, stat = zk.get(path)
        state = PartitionState.from_json(data)
    except (NoNodeError, ValueError, KeyError, TypeError):
        return False
    if state.leader != node_id or state.leader_epoch != leader_epoch or state.handover_to is None or state.drained:
        return False
    try:
        zk.set(path, dataclasses.replace(state, drained=True).to_json(), version=stat.version)
    except (BadVersionError, NoNodeError):
        return False
    log.info("partition %s-%d: drained, handed over to node %d", topic, partition, state.handover_to)
    return True


def request_election(zk: KazooClient, partitions: Iterable[TopicPartitionKey] | None) -> str:
    """Ask the controller for a preferred-leader election of ``partitions`` (None: all); returns the request's path.

    The controller deletes the request once it has started the hand-overs.
    """
    doc = {"partitions": None if partitions is None else [[t, p] for t, p in sorted(partitions)]}
    path: str = zk.create(
        f"{ELECTIONS}/request-", json.dumps(doc, separators=(",", ":")).encode(), sequence=True, makepath=True
    )
    return path


def stage_state(zk: KazooClient, txn: TransactionRequest, path: str, state: PartitionState) -> PartitionState:
    """Add the controller's write of partition state ``state`` at ``path`` to ``txn``; the state it will write.

    The znode is read first: the state is raised above what it holds
    (:func:`~logstore.cluster.placement.above_current`), and written only if
    the znode is still at that version (or, absent, still absent), so a
    concurrent writer makes ``txn`` fail instead of being overwritten.
    """
    try:
        data, stat = zk.get(path)
    except NoNodeError:
        txn.create(path, state.to_json())
        return state
    try:
        current: PartitionState | None = PartitionState.from_json(data)
    except (ValueError, KeyError, TypeError):
        current = None  # not a partition state: overwritten, as before
    state = above_current(state, current)
    txn.set_data(path, state.to_json(), version=stat.version)
    return state
