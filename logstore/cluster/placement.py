"""Leader placement: which live node leads each partition, and with which epoch.

The controller calls :func:`place_leaders` whenever the live nodes or the
topics change. Placement is sticky — a partition whose leader is alive keeps
it — and every change of leader bumps the partition's ``leader_epoch``, the
fence its former leader can never commit past. :func:`preferred_leaders` is
where each partition *should* be among the live nodes (new and orphaned
partitions go there; a preferred-leader election moves the others back there,
:mod:`logstore.cluster.rebalance`).

Two placements (``leader.placement``):

* ``partition`` — each partition goes to the least-loaded live node, so one
  topic's partitions spread over the cluster (more nodes write one topic, but
  they race for its one Delta log);
* ``topic`` — a topic's partitions all go to one node (one writer per Delta
  log, no commit races; a single hot topic stays on one node).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

__all__ = [
    "Placement",
    "PartitionState",
    "TopicPartitionKey",
    "above_current",
    "group_coordinator",
    "place_leaders",
    "preferred_leaders",
]

Placement = Literal["partition", "topic"]
TopicPartitionKey = tuple[str, int]
_Item = TypeVar("_Item", str, int)
"""(topic, partition)."""


@dataclass(frozen=True)
class PartitionState:
    """A partition's leadership, as ``/brokers/topics/<t>/partitions/<p>/state`` holds it."""

    leader: int
    """The node id that alone assigns this partition's offsets and commits its records; -1 = none live."""
    leader_epoch: int
    """Bumped on every change of leader; the Delta writer's fence (older epochs cannot commit)."""
    handover_to: int | None = None
    """A hand-over under way (preferred-leader election): ``leader`` accepts no more produce for the partition,
    commits what it accepted, then says so (``drained``); the controller then makes this node the leader at
    ``leader_epoch + 1``. None = no hand-over."""
    drained: bool = False
    """``leader`` has committed (or failed) everything it accepted for the partition during the hand-over."""

    def to_json(self) -> bytes:
        """The znode's bytes: ``{"leader", "leader_epoch"}``, plus ``"handover_to"`` (and ``"drained"``) during one."""
        doc: dict[str, Any] = {"leader": self.leader, "leader_epoch": self.leader_epoch}
        if self.handover_to is not None:
            doc["handover_to"] = self.handover_to
            if self.drained:
                doc["drained"] = True
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> PartitionState:
        """Parse what :meth:`to_json` wrote (a state without the hand-over keys has none under way).

        Raises:
            ValueError, KeyError, TypeError: not a partition state.
        """
        doc = json.loads(data)
        handover = doc.get("handover_to")
        return cls(
            int(doc["leader"]),
            int(doc["leader_epoch"]),
            None if handover is None else int(handover),
            bool(doc.get("drained", False)),
        )


def above_current(state: PartitionState, current: PartitionState | None) -> PartitionState:
    """``state`` as it may be written over ``current`` (what the znode holds now; None = no znode).

    An epoch never goes down, and a leader other than ``current``'s gets an
    epoch above ``current``'s: the state is given ``current``'s epoch + 1 if it
    has less, whatever view of the partition it was planned from. So no two
    nodes are ever given one epoch, and no leader one below what an earlier
    leader may have claimed in the partition's Delta log.
    """
    if current is None:
        return state
    other = state.leader != current.leader
    if state.leader_epoch < current.leader_epoch or (other and state.leader_epoch == current.leader_epoch):
        return dataclasses.replace(state, leader_epoch=current.leader_epoch + 1)
    return state


def place_leaders(
    partitions: Iterable[TopicPartitionKey],
    current: Mapping[TopicPartitionKey, PartitionState],
    live: Sequence[int],
    placement: Placement = "partition",
    preferred: Mapping[TopicPartitionKey, int] | None = None,
) -> dict[TopicPartitionKey, PartitionState]:
    """The new states of the partitions that need a leader (the others keep theirs).

    A partition needs one when it has no state yet or its leader is not in
    ``live``. A new partition goes to its ``preferred`` leader when that node
    is live (the controller passes :func:`preferred_leaders`: a new topic
    starts where a preferred-leader election would put it); an orphan (its
    leader died), or a new partition without a live preferred leader, to the
    live node leading the fewest partitions (``partition``) or topics
    (``topic``), ties to its preferred leader, then to the lowest id — so a
    failover keeps the loads even. With ``topic``, a topic whose other
    partitions have a live leader joins that node. Its epoch is the old one + 1
    (0 for a new partition). With no live node, nothing changes.
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
            node = _leader_for(tp, current.get(tp), order, load, preferred or {})
            load[node] += 1
            if placement == "topic":
                topic_leader[topic] = node
        old = current.get(tp)
        changes[tp] = PartitionState(node, 0 if old is None else old.leader_epoch + 1)
    return changes


def _leader_for(
    tp: TopicPartitionKey,
    old: PartitionState | None,
    order: Sequence[int],
    load: Counter[int],
    preferred: Mapping[TopicPartitionKey, int],
) -> int:
    """A new partition: its preferred leader if live. An orphan: the least-loaded live node, preferred among equals."""
    choice = preferred.get(tp)
    if old is None and choice in order:
        assert choice is not None
        return choice
    return min(order, key=lambda n: (load[n], n != choice, n))


def preferred_leaders(
    partitions: Iterable[TopicPartitionKey], live: Sequence[int], placement: Placement = "partition"
) -> dict[TopicPartitionKey, int]:
    """Each partition's *preferred leader* among the live nodes: a balanced rendezvous assignment.

    ``partition``: topic by topic (by name), each live node gets
    ``⌊k/n⌋`` or ``⌈k/n⌉`` of a topic's ``k`` partitions — the ``k mod n``
    extra ones going to the nodes with the fewest partitions so far (ties to
    the higher rendezvous weight of ``"<topic>:<node>"``), so node loads also
    differ by at most one overall; within those shares, the (partition, node)
    pairs are taken by descending rendezvous weight (blake2b of
    ``"<topic>-<partition>:<node>"``), each partition going to the first node
    with room. ``topic``: whole topics the same way (weights of
    ``"<topic>:<node>"``, shares of the topic count).

    Every node computes the same answer from the same partitions and live
    nodes. Rendezvous weights make it stable: when a node leaves, mostly its
    own partitions change their preferred leader (about one in six of the
    others with three nodes, measured in docs/cluster.md); when it comes back,
    mostly those go back to it. Empty with no live node.
    """
    return dict(_preferred(tuple(sorted(set(partitions))), tuple(sorted(set(live))), placement))


@functools.lru_cache(maxsize=16)
def _preferred(
    partitions: tuple[TopicPartitionKey, ...], nodes: tuple[int, ...], placement: Placement
) -> tuple[tuple[TopicPartitionKey, int], ...]:
    if not nodes:
        return ()
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    load: Counter[int] = Counter(dict.fromkeys(nodes, 0))
    out: dict[TopicPartitionKey, int] = {}
    if placement == "topic":
        chosen = _share(sorted(by_topic), nodes, load, "topics", "")
        return tuple(((t, p), chosen[t]) for t, ps in by_topic.items() for p in ps)
    for topic, ps in by_topic.items():
        chosen_p = _share(ps, nodes, load, topic, f"{topic}-")
        out.update(((topic, p), node) for p, node in chosen_p.items())
    return tuple(out.items())


def _share(
    items: Sequence[_Item], nodes: Sequence[int], load: Counter[int], group: str, prefix: str
) -> dict[_Item, int]:
    """``items`` onto ``nodes``, each node ``⌊k/n⌋`` or ``⌈k/n⌉`` of them, by descending rendezvous weight.

    An item's weight on a node is that of ``"<prefix><item>:<node>"``. The extra ones go to the least loaded
    nodes (``load``, updated here), ties to the higher weight of ``"<group>:<node>"``.
    """
    base, extra = divmod(len(items), len(nodes))
    order = sorted(nodes, key=lambda n: (load[n], -_weight(f"{group}:{n}"), n))
    room = {n: base + (1 if i < extra else 0) for i, n in enumerate(order)}
    pairs = sorted(
        ((_weight(f"{prefix}{item}:{n}"), -n, i, n) for i, item in enumerate(items) for n in nodes), reverse=True
    )
    chosen: dict[_Item, int] = {}
    for _w, _neg, i, n in pairs:
        item = items[i]
        if item in chosen or room[n] == 0:
            continue
        chosen[item] = n
        room[n] -= 1
        load[n] += 1
    return chosen


def _weight(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


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
