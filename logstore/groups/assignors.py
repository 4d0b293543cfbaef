"""Partition assignors of consumer groups: pure functions, Kafka's semantics.

Each assignor maps the group's members (member id → subscribed topics) and
the topics' partition counts to a *target* assignment: member id → sorted
list of :class:`~logstore.structs.TopicPartition`. Every partition of a
subscribed topic goes to exactly one member subscribed to that topic.

The target is not handed out as is: the group coordinator
(:mod:`logstore.groups.coordinator`) first revokes a partition that moves from its
old owner, and only gives it to the new one once the old owner acknowledged
the revocation (or its session expired). So no assignor ever causes two live
owners of one partition, whatever it computes.

- ``range``: Kafka's ``RangeAssignor``. Per topic, the members subscribed to
  it sorted by member id; each takes a consecutive range, the first
  ``partitions % members`` ones take one extra.
- ``roundrobin``: Kafka's ``RoundRobinAssignor``. All subscribed partitions
  sorted by (topic, partition), dealt in turn over the members sorted by id,
  skipping a member not subscribed to the partition's topic.
- ``cooperative-sticky``: Kafka's ``CooperativeStickyAssignor`` target: as
  balanced as the subscriptions allow (partition counts differ by at most one
  among members that could take each other's partitions), moving as few
  partitions as possible from their ``current`` owners.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal, get_args

from logstore.errors import InvalidRequestError
from logstore.structs import TopicPartition

__all__ = ["ASSIGNORS", "Assignment", "AssignorName", "assign", "cooperative_sticky", "range_assign", "roundrobin"]

AssignorName = Literal["range", "roundrobin", "cooperative-sticky"]
"""The ``partition.assignment.strategy`` names, as Kafka spells them."""

Assignment = dict[str, list[TopicPartition]]
"""Member id → its partitions, sorted by (topic, partition)."""

Subscriptions = Mapping[str, Sequence[str]]
"""Member id → the topics it subscribes to."""

Counts = Mapping[str, int]
"""Topic → its number of partitions (a topic missing here has none)."""


def range_assign(subscriptions: Subscriptions, partitions: Counts) -> Assignment:
    """Kafka's range assignor: per topic, consecutive ranges over members sorted by id."""
    out: Assignment = {m: [] for m in subscriptions}
    for topic in sorted({t for ts in subscriptions.values() for t in ts}):
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        count = partitions.get(topic, 0)
        each, extra = divmod(count, len(members))
        start = 0
        for i, m in enumerate(members):
            n = each + (1 if i < extra else 0)
            out[m].extend(TopicPartition(topic, p) for p in range(start, start + n))
            start += n
    return {m: sorted(tps) for m, tps in out.items()}


def roundrobin(subscriptions: Subscriptions, partitions: Counts) -> Assignment:
    """Kafka's round-robin assignor: sorted partitions dealt over sorted members, skipping non-subscribers."""
    out: Assignment = {m: [] for m in subscriptions}
    members = sorted(subscriptions)
    if not members:
        return out
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    i = 0
    for topic in topics:
        for p in range(partitions.get(topic, 0)):
            while topic not in subscriptions[members[i % len(members)]]:
                i += 1
            out[members[i % len(members)]].append(TopicPartition(topic, p))
            i += 1
    return out


def cooperative_sticky(
    subscriptions: Subscriptions, partitions: Counts, current: Mapping[str, Sequence[TopicPartition]]
) -> Assignment:
    """A balanced target that keeps every partition it can with its ``current`` owner.

    A member keeps its current partitions of topics it still subscribes to,
    new (or orphaned) partitions go to the eligible member with the fewest, and
    then partitions move one at a time from a member holding at least two more
    than an eligible one, until none does. Each move is forced by the balance,
    so no partition moves that a balanced assignment could have left in place.
    """
    valid = {TopicPartition(t, p) for ts in subscriptions.values() for t in ts for p in range(partitions.get(t, 0))}
    owned: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    taken: set[TopicPartition] = set()
    for m in sorted(current):
        if m not in owned:
            continue
        for tp in sorted(current[m]):
            if tp in valid and tp.topic in subscriptions[m] and tp not in taken:
                owned[m].add(tp)
                taken.add(tp)
    members = sorted(subscriptions)
    for tp in sorted(valid - taken):
        eligible = [m for m in members if tp.topic in subscriptions[m]]
        owner = min(eligible, key=lambda m: (len(owned[m]), m))
        owned[owner].add(tp)
    while True:
        move = _one_balancing_move(subscriptions, owned)
        if move is None:
            break
        tp, src, dst = move
        owned[src].discard(tp)
        owned[dst].add(tp)
    return {m: sorted(tps) for m, tps in owned.items()}


def _one_balancing_move(
    subscriptions: Subscriptions, owned: Mapping[str, set[TopicPartition]]
) -> tuple[TopicPartition, str, str] | None:
    """A partition of the fullest member that a member with two or more fewer may take, or None when balanced."""
    by_load = sorted(owned, key=lambda m: (-len(owned[m]), m))
    for src in by_load:
        for dst in sorted(owned, key=lambda m: (len(owned[m]), m)):
            if len(owned[dst]) >= len(owned[src]) - 1:
                break
            movable = [tp for tp in owned[src] if tp.topic in subscriptions[dst]]
            if movable:
                return max(movable), src, dst
    return None


def assign(
    name: str,
    subscriptions: Subscriptions,
    partitions: Counts,
    current: Mapping[str, Sequence[TopicPartition]] | None = None,
) -> Assignment:
    """The target assignment of assignor ``name`` (``current`` matters to ``cooperative-sticky`` only).

    Raises:
        InvalidRequestError: ``name`` is not one of :data:`ASSIGNORS`.
    """
    if name == "cooperative-sticky":
        return cooperative_sticky(subscriptions, partitions, current or {})
    fn = _EAGER.get(name)
    if fn is None:
        raise InvalidRequestError(f"assignor must be one of {', '.join(ASSIGNORS)}, got '{name}'")
    return fn(subscriptions, partitions)


_EAGER: dict[str, Callable[[Subscriptions, Counts], Assignment]] = {"range": range_assign, "roundrobin": roundrobin}

ASSIGNORS: tuple[str, ...] = get_args(AssignorName)
"""Every assignor name, in Kafka's spelling."""
