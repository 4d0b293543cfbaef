"""Partitions read by offset for a :class:`~logstore.client.Consumer` that keeps its own positions.

A consumer given its partitions with ``assign()`` (no group membership, as
Kafka's ``assign``) fetches each partition from its own position through
``GET /v1/topics/{t}/partitions/{p}/records``; any node serves committed
records. This module also answers the offset questions of both kinds of
consumer: watermarks, the group's committed offsets, offsets for times.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from logstore.client.message import Message
from logstore.client.remote import RemoteStore
from logstore.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from logstore.structs import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, OFFSET_STORED, TopicPartition

__all__ = ["PartitionReader"]

_MULTI_PARTITION_WAIT_S = 0.1
"""Longest long poll on one partition while others are assigned: a record elsewhere waits at most this long."""


class PartitionReader:
    """Fetches partitions from positions the consumer keeps, and looks offsets up, over a :class:`RemoteStore`.

    Args:
        remote: the cluster's nodes.
        group: the consumer's ``group.id`` (whose committed offsets ``OFFSET_STORED`` means).
        auto_offset_reset: ``earliest`` or ``latest``: where a partition with no committed offset,
            or whose position retention removed, starts.
        max_records: records per fetch (``max.poll.records``).
    """

    def __init__(self, remote: RemoteStore, group: str, auto_offset_reset: str, max_records: int) -> None:
        self.remote = remote
        self._group = group
        self._reset = auto_offset_reset
        self._max_records = max_records
        self._turn = 0

    def start_offset(self, tp: TopicPartition) -> int:
        """Where reading an assigned partition starts, from the offset it was assigned with.

        An offset >= 0 is taken as it is; ``OFFSET_BEGINNING`` is the log start,
        ``OFFSET_END`` the high watermark; ``OFFSET_STORED`` (and no offset) the
        group's committed offset, else ``auto.offset.reset``.
        """
        if tp.offset >= 0:
            return tp.offset
        low, high = self.watermarks(tp)
        if tp.offset == OFFSET_BEGINNING:
            return low
        if tp.offset == OFFSET_END:
            return high
        if tp.offset in (OFFSET_STORED, OFFSET_INVALID):
            (committed,) = self.committed([tp])
            if committed.offset >= 0:
                return min(max(committed.offset, low), high)
        return low if self._reset == "earliest" else high

    def reset_offset(self, tp: TopicPartition) -> int:
        """``auto.offset.reset``'s end of the partition (for a position retention removed)."""
        low, high = self.watermarks(tp)
        return low if self._reset == "earliest" else high

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        """(log start offset, high watermark) of the partition now.

        Raises:
            UnknownTopicOrPartitionError: no such topic or partition.
        """
        info = self.remote.describe_topic(tp.topic)
        if not 0 <= tp.partition < len(info.partitions):
            raise UnknownTopicOrPartitionError(
                f"topic '{tp.topic}' has {len(info.partitions)} partitions, no partition {tp.partition}"
            )
        p = info.partitions[tp.partition]
        return p.log_start_offset, p.high_watermark

    def committed(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """The group's committed offsets (next offset to read) of ``partitions``; ``OFFSET_INVALID`` where none."""
        out = []
        by_topic: dict[str, dict[int, int]] = {}
        for tp in partitions:
            if tp.topic not in by_topic:
                by_topic[tp.topic] = {
                    k.partition: c.offset for k, c in self.remote.committed(self._group, tp.topic).items()
                }
            out.append(TopicPartition(tp.topic, tp.partition, by_topic[tp.topic].get(tp.partition, OFFSET_INVALID)))
        return out

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` (next offset to read) to the group without membership (Kafka's OffsetCommit).

        Raises:
            UnknownMemberIdError: the group has live members (commit as one of them).
        """
        by_topic: dict[str, dict[int, int]] = {}
        for tp, o in offsets.items():
            by_topic.setdefault(tp.topic, {})[tp.partition] = o
        for topic, offs in sorted(by_topic.items()):
            self.remote.commit_offsets(self._group, topic, offs)

    def offsets_for_times(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Per partition, the earliest offset whose timestamp is at or after its ``offset`` (ms); -1 where none is."""
        out = []
        for tp in partitions:
            offset = self.remote.offset_for_time(tp.topic, tp.partition, tp.offset)
            _, high = self.watermarks(tp)
            out.append(TopicPartition(tp.topic, tp.partition, OFFSET_END if offset >= high else offset))
        return out

    def fetch(
        self, positions: list[tuple[TopicPartition, int]], wait_s: float
    ) -> tuple[list[Message], dict[TopicPartition, int]]:
        """One round over ``positions`` (partition, next offset), starting one partition further each call.

        Returns the messages (offset order within a partition, at most
        ``max.poll.records``) and the new positions of partitions whose
        position retention had removed (``auto.offset.reset``). When no
        partition had records, waits up to ``wait_s`` on one of them (at most
        0.1 s while several are assigned).
        """
        if not positions:
            return [], {}
        start = self._turn % len(positions)
        self._turn = start + 1
        order = positions[start:] + positions[:start]
        out: list[Message] = []
        resets: dict[TopicPartition, int] = {}
        for tp, pos in order:
            if len(out) >= self._max_records:
                break
            out += self._fetch_one(tp, pos, self._max_records - len(out), 0, resets)
        if not out and not resets and wait_s > 0:
            tp, pos = order[0]
            wait = wait_s if len(order) == 1 else min(wait_s, _MULTI_PARTITION_WAIT_S)
            out = self._fetch_one(tp, pos, self._max_records, int(wait * 1000), resets)
        return out, resets

    def _fetch_one(
        self, tp: TopicPartition, pos: int, max_records: int, wait_ms: int, resets: dict[TopicPartition, int]
    ) -> list[Message]:
        try:
            result = self.remote.fetch(tp.topic, tp.partition, pos, max_records=max_records, wait_ms=wait_ms)
        except OffsetOutOfRangeError:
            resets[tp] = self.reset_offset(tp)  # retention removed the position: Kafka's auto.offset.reset
            return []
        return _messages(tp.topic, result.records)


def _messages(topic: str, records: pa.Table) -> list[Message]:
    """A fetched slice's rows as messages (columns converted whole)."""
    if not len(records):
        return []
    ts = pc.cast(records["timestamp"], pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_pylist()
    headers = [[(h["key"], h["value"]) for h in hs] if hs else None for hs in records["headers"].to_pylist()]
    return [
        Message(topic, p, o, k, v, h, t)
        for p, o, k, v, h, t in zip(
            records["partition"].to_pylist(),
            records["offset"].to_pylist(),
            records["key"].to_pylist(),
            records["value"].to_pylist(),
            headers,
            ts,
            strict=True,
        )
    ]
