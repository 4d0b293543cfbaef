"""What a :class:`~logstore.client.Consumer` reads: its partitions, its positions in them, paused ones, fetched records.

aiokafka's ``subscription_state``: the consumer's side of where it is, kept
apart from how records are fetched (group membership, or assigned
partitions) so that ``seek``, ``position``, ``pause`` and ``resume`` act the
same way on both.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from logstore.client.message import Message
from logstore.errors import InvalidRequestError
from logstore.structs import OFFSET_INVALID, TopicPartition

__all__ = ["SubscriptionState", "key_of"]


def key_of(tp: TopicPartition) -> TopicPartition:
    """``tp`` without its offset and other fields: how partitions are keyed here."""
    return TopicPartition(tp.topic, tp.partition)


class SubscriptionState:
    """The consumer's partitions and positions; used from the application's thread only (inside its calls)."""

    def __init__(self) -> None:
        self.manual = False
        """True once ``assign()`` gave the partitions (no group membership)."""
        self.assignment: set[TopicPartition] = set()
        self.positions: dict[TopicPartition, int] = {}
        """Partition → the next offset to return (the last returned + 1, or where a seek put it)."""
        self.paused: set[TopicPartition] = set()
        self.buffer: deque[Message] = deque()
        """Fetched records not returned yet, in fetch order (offsets ascend within a partition)."""

    def assign(self, starts: Mapping[TopicPartition, int]) -> None:
        """Read exactly the partitions of ``starts``, each from its offset."""
        self.manual = True
        self.assignment = set(starts)
        self.positions = dict(starts)
        self.paused &= self.assignment
        self.buffer = deque(m for m in self.buffer if TopicPartition(m.topic(), m.partition()) in starts)

    def unassign(self) -> None:
        self.assignment, self.positions, self.paused, self.buffer = set(), {}, set(), deque()

    def owned(self, partition: TopicPartition, what: str) -> TopicPartition:
        """``partition`` as a key of the assignment.

        Raises:
            InvalidRequestError: it is not assigned to this consumer.
        """
        tp = key_of(partition)
        if tp not in self.assignment:
            assigned = ", ".join(f"{a.topic}-{a.partition}" for a in sorted(self.assignment)) or "none"
            raise InvalidRequestError(
                f"{what}: {tp.topic}-{tp.partition} is not assigned to this consumer (assigned: {assigned})"
            )
        return tp

    def drop_buffered(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Drop the fetched, unreturned records of ``tps``; the offset of the first dropped per partition."""
        gone = {(tp.topic, tp.partition) for tp in tps}
        first: dict[TopicPartition, int] = {}
        kept: deque[Message] = deque()
        for m in self.buffer:
            if (m.topic(), m.partition()) in gone:
                first.setdefault(TopicPartition(m.topic(), m.partition()), m.offset())
            else:
                kept.append(m)
        self.buffer = kept
        return first

    def take(self, n: int) -> list[Message]:
        """Up to ``n`` buffered records, the positions moved past them."""
        out = [self.buffer.popleft() for _ in range(min(n, len(self.buffer)))]
        for m in out:
            self.positions[TopicPartition(m.topic(), m.partition())] = m.offset() + 1
        return out

    def position(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Each partition with its next offset to return; ``OFFSET_INVALID`` where none is known yet."""
        return [
            TopicPartition(tp.topic, tp.partition, self.positions.get(key_of(tp), OFFSET_INVALID)) for tp in partitions
        ]

    def readable(self) -> list[tuple[TopicPartition, int]]:
        """The assigned partitions not paused, with their positions (partition order)."""
        return [(tp, self.positions[tp]) for tp in sorted(self.assignment) if tp not in self.paused]

    def consumed(self) -> dict[TopicPartition, int]:
        """The positions of the assigned partitions (what a commit without arguments commits)."""
        return {tp: o for tp, o in self.positions.items() if tp in self.assignment}

    def pause(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Pause ``partitions``, dropping their buffered records; returns where each dropped run started.

        Raises:
            InvalidRequestError: a partition is not assigned to this consumer.
        """
        tps = [self.owned(p, "pause") for p in partitions]
        self.paused.update(tps)
        return self.drop_buffered(tps)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch ``partitions`` again.

        Raises:
            InvalidRequestError: a partition is not assigned to this consumer.
        """
        for p in partitions:
            self.paused.discard(self.owned(p, "resume"))
