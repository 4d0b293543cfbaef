"""A preferred-leader election asked of this node (``logstore cluster elect-leaders``, its HTTP route).

Kafka's ``kafka-leader-election --election-type preferred``: the node writes
the request for the controller (:func:`logstore.cluster.rebalance.request_election`),
the controller hands each partition that is not on its preferred leader over
to it, and the node waits until the leaders it sees settle, then answers per
partition — as Kafka's ElectLeaders response, with an error name or none:

* none — the partition moved to its preferred leader;
* ``ELECTION_NOT_NEEDED`` — it was already there;
* ``PREFERRED_LEADER_NOT_AVAILABLE`` — its preferred leader is not live;
* ``UNKNOWN_TOPIC_OR_PARTITION`` — no such partition;
* ``REQUEST_TIMED_OUT`` — it had not moved by the deadline (the hand-over may
  still finish, or be cancelled: ``cluster status`` shows where it is).

Runs on the caller's thread (it waits, polling the node's cached view).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from logstore.cluster import ClusterMetadata, PartitionState
from logstore.cluster.placement import Placement, TopicPartitionKey, preferred_leaders
from logstore.node.membership import ClusterMembership

__all__ = ["ElectionResult", "elect_preferred_leaders", "preferred_of", "report_drained"]

_POLL_S = 0.05
"""How often the waiting node looks at its cached view of the partition states (seconds)."""


@dataclass(frozen=True)
class ElectionResult:
    """One partition's outcome of a preferred-leader election."""

    topic: str
    partition: int
    leader: int
    """Its leader when the answer was made (-1: none)."""
    preferred: int
    """Its preferred leader among the live nodes (-1: none)."""
    error: str | None
    """None: moved to the preferred leader; else a Kafka error name (see the module docstring)."""


class _Drains(Protocol):
    def drained(self, partition: int) -> bool: ...


def report_drained(cluster: ClusterMembership, meta: ClusterMetadata, pipelines: Mapping[str, _Drains]) -> None:
    """Say ``drained`` for every partition this node hands over that has nothing in flight any more.

    The leaving leader's side of a hand-over (:mod:`logstore.cluster.rebalance`),
    on the node's cluster thread: the partition is no longer accepted (the
    broker leaves it out of the partitions it leads); once every batch
    accepted for it is answered — committed, or failed to its producer —
    nothing this node acknowledged for it is left uncommitted, and the
    controller may give it to its new leader. ``pipelines``: the node's open
    topic pipelines (a topic without one accepted nothing).
    """
    me = cluster.node_id
    for (topic, p), state in sorted(meta.partitions.items()):
        if state.leader != me or state.handover_to is None or state.drained:
            continue
        pipeline = pipelines.get(topic)
        if pipeline is None or pipeline.drained(p):
            cluster.report_drained(topic, p, state.leader_epoch)


def preferred_of(meta: ClusterMetadata, placement: Placement) -> dict[TopicPartitionKey, int]:
    """Every partition's preferred leader in this view: the balanced placement over its live nodes."""
    return preferred_leaders(meta.partitions, [n.node_id for n in meta.nodes], placement)


def elect_preferred_leaders(
    cluster: ClusterMembership | None,
    meta: ClusterMetadata,
    placement: Placement,
    partitions: list[TopicPartitionKey] | None,
    *,
    timeout_s: float,
) -> list[ElectionResult]:
    """Move ``partitions`` (None: every partition) to their preferred leaders; one result per partition.

    ``meta`` is the view to start from (embedded mode: the one-node cluster,
    where ``cluster`` is None and every partition already is on its preferred
    leader). Waits at most ``timeout_s`` for the hand-overs.
    """
    targets = sorted(meta.partitions) if partitions is None else sorted(set(partitions))
    preferred = preferred_of(meta, placement)
    done: dict[TopicPartitionKey, ElectionResult] = {}
    pending: list[TopicPartitionKey] = []
    for tp in targets:
        state, node = meta.partitions.get(tp), preferred.get(tp, -1)
        if state is None:
            done[tp] = ElectionResult(tp[0], tp[1], -1, -1, "UNKNOWN_TOPIC_OR_PARTITION")
        elif state.leader == node and state.handover_to is None:
            done[tp] = ElectionResult(tp[0], tp[1], state.leader, node, "ELECTION_NOT_NEEDED")
        else:
            pending.append(tp)
    if pending and cluster is not None:
        cluster.request_election(None if partitions is None else pending)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            meta = cluster.metadata()
            preferred = preferred_of(meta, placement)
            for tp in list(pending):
                state = meta.partitions.get(tp)
                if state is not None and _settled(state, preferred.get(tp)):
                    done[tp] = ElectionResult(tp[0], tp[1], state.leader, state.leader, None)
                    pending.remove(tp)
    live = {n.node_id for n in meta.nodes}
    for tp in pending:
        state, node = meta.partitions.get(tp), preferred.get(tp, -1)
        leader = -1 if state is None else state.leader
        error = "REQUEST_TIMED_OUT" if node in live else "PREFERRED_LEADER_NOT_AVAILABLE"
        done[tp] = ElectionResult(tp[0], tp[1], leader, node, error)
    return [done[tp] for tp in targets]


def _settled(state: PartitionState, preferred: int | None) -> bool:
    return state.handover_to is None and state.leader == preferred
