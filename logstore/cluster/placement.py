"""Leader placement: which live node leads each partition, and with which epoch.

The controller calls :func:`place_leaders` whenever the live nodes or the
topics change. Placement is sticky — a partition whose leader is alive keeps
it — and every change of leader bumps the partition's ``leader_epoch``, the
fence its former leader can never commit past.

Two placements (``leader.placement``):

* ``partition`` — each partition goes to the least-loaded live node, so one
  topic's partitions spread over the cluster (more nodes write one topic, but
  they race for its one Delta log);
* ``topic`` — a topic's partitions all go to one node (one writer per Delta
  log, no commit races; a single hot topic stays on one node).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Placement", "PartitionState", "TopicPartitionKey", "group_coordinator", "place_leaders"]

Placement = Literal["partition", "topic"]
TopicPartitionKey = tuple[str, int]
"""(topic, partition)."""


@dataclass(frozen=True)
class PartitionState:
    """A partition's leadership, as ``/brokers/topics/<t>/partitions/<p>/state`` holds it."""

    leader: int
    """The node id that alone assigns this partition's offsets and commits its records; -1 = none live."""
    leader_epoch: int
    """Bumped on every change of leader; the Delta writer's fence (older epochs cannot commit)."""


def place_leaders(
    partitions: Iterable[TopicPartitionKey],
    current: Mapping[TopicPartitionKey, PartitionState],
    live: Sequence[int],
    placement: Placement = "partition",
) -> dict[TopicPartitionKey, PartitionState]:
    """The new states of the partitions that need a leader (the others keep theirs).

    A partition needs one when it has no state yet or its leader is not in
    ``live``. Its new leader is the live node leading the fewest partitions
    (``partition``) or topics (``topic``; a topic whose other partitions have
    a live leader joins that node), ties to the lowest id. Its epoch is the
    old one + 1 (0 for a new partition). With no live node, nothing changes.
    """
    live_set = set(live)
    order = sorted(live_set)
    if not order:
        return {}
    wanted = sorted(set(partitions))
    kept = {tp: s for tp, s in current.items() if s.leader in live_set}
    load: Counter[int] = Counter({n: 0 for n in order})
    topic_leader: dict[str, int] = {}
    for (topic, _p), s in sorted(kept.items()):
        if placement == "topic":
            if topic not in topic_leader:
                topic_leader[topic] = s.leader
                load[s.leader] += 1
        else:
            load[s.leader] += 1
    changes: dict[TopicPartitionKey, PartitionState] = {}
    for tp in wanted:
        if tp in kept:
            continue
        topic = tp[0]
        if placement == "topic" and topic in topic_leader:
            node = topic_leader[topic]
        else:
            node = min(order, key=lambda n: (load[n], n))
            load[node] += 1
            if placement == "topic":
                topic_leader[topic] = node
        old = current.get(tp)
        changes[tp] = PartitionState(node, 0 if old is None else old.leader_epoch + 1)
    return changes


def group_coordinator(group: str, live: Iterable[int]) -> int | None:
    """The live node that coordinates ``group``: rendezvous (highest-random-weight) hashing; None with no live node.

    Each node's weight for the group is the blake2b hash of ``"<group>:<node id>"``;
    the heaviest wins (ties, which need a hash collision, to the lowest id). Every
    node computes the same answer from the same live set, and when a node leaves
    only the groups it coordinated move: every other group keeps its heaviest node.
    """

    def weight(node: int) -> tuple[int, int]:
        digest = hashlib.blake2b(f"{group}:{node}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big"), -node

    nodes = set(live)
    return max(nodes, key=weight) if nodes else None
