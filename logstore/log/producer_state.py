"""Idempotent producers of one topic, per (producer, partition): last sequence and recent batches.

Kafka's ``ProducerStateManager``: a batch with a ``producer_id`` carries one
``sequence`` for all its records, increasing per producer and topic. The
writer checks it on each partition the batch touches, against what that
producer committed *on that partition*: a sequence above the partition's last
is new there (sequences on one partition increase but need not be
consecutive: the batches between went to other partitions); one at or below
it is a retry if the partition remembers that batch — its records there are
answered with their original offsets and written nothing — and otherwise out
of order. So one request may be new on some partitions and a retry on others
(a request split between leaders whose first attempt landed at one of them),
and a producer id may write any partitions through any node.

Where the state lives, all of it in the topic's Delta log so any writer — after
a restart or as a partition's new leader — reads it back:

* the last committed sequence of producer ``id`` on partition ``p``: the
  ``logstore.seq.<p>.<id>`` app transaction (:func:`~logstore.log._delta.app_sequence`);
* a sequence ``id`` committed on the topic, whatever the partition:
  ``logstore.pid.<id>`` (:func:`~logstore.log._delta.app_producer_max`), so a
  producer the topic never saw costs two look-ups (this and the legacy one
  below), not one per partition. Each commit writes its own highest sequence
  there; of two leaders' commits racing, the later may hold the lower one, so
  :meth:`ProducerStateManager.last_sequence` reads every partition's;
* the offsets each batch got: the ``logstore.producers`` entry of its
  commit's ``commitInfo`` (``{id, seq, first: {p: [first offset, count]}}``);
  each partition remembers the newest :data:`PRODUCER_WINDOW` batches of each
  producer, read back from the commit history after a restart.

App transactions are kept by every checkpoint for as long as the table lives:
a producer costs the table one ``txn`` action per partition it ever wrote,
plus one. A long-lived producer id is cheap; inventing one per process on a
topic of many partitions grows every checkpoint by that much.

Tables written before per-partition state hold ``logstore.producer.<id>``, the
producer's last sequence on the whole topic. It is no longer written; where a
partition has no ``logstore.seq.<p>.<id>`` it is that partition's last
sequence (a floor: every older batch of the producer either landed whole or
not at all), so a producer's first request after the upgrade is new where it
was new before.

:class:`ProducerStateManager` caches the state in memory for at most
``producer.state.max.entries`` producers (least recently used dropped first:
everything dropped can be read back from the log). It is driven by the
topic's :class:`~logstore.log.writer.TopicWriter` from the writer's one thread.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from deltalake import DeltaTable

from logstore.common.lru import LruDict
from logstore.errors import InvalidRequestError, OutOfOrderSequenceNumberError
from logstore.log import _delta

__all__ = ["PRODUCER_WINDOW", "Checked", "ProducerStateManager"]

PRODUCER_WINDOW = 5
"""Committed batches per (producer, partition) whose retry is answered with the original offsets (Kafka: 5)."""

_HISTORY_LIMIT = 1000
"""Commits read back, newest first, to find a partition's recent batches after a restart."""


@dataclass
class _Partition:
    last: int | None
    """The last sequence committed on the partition (or the legacy per-topic floor); None = never."""
    recent: collections.deque[tuple[int, int, int]] = field(
        default_factory=lambda: collections.deque(maxlen=PRODUCER_WINDOW)
    )
    """(sequence, first offset, record count) of the newest committed batches on the partition, oldest first."""
    known: bool = False
    """``recent`` holds the newest batches there are (up to the window); else the commit history may hold more."""


@dataclass
class _Producer:
    top: int | None
    """A sequence committed on the topic (``logstore.pid.<id>``, or the legacy one); None = the topic never saw
    the producer."""
    floor: int | None
    """The legacy per-topic sequence (``logstore.producer.<id>``), the last sequence of unwritten partitions."""
    parts: dict[int, _Partition] = field(default_factory=dict)


@dataclass(frozen=True)
class Checked:
    """How one idempotent batch stands on each partition it touches."""

    new: list[int]
    """Partitions where the sequence is new: its records there are written."""
    retried: dict[int, int]
    """Partitions where it is a retry of a committed batch: partition → that batch's first offset."""
    waiting: bool = False
    """An earlier batch of the same call holds this sequence on one of its partitions: decide after its commit."""


class ProducerStateManager:
    """Sequences of the idempotent producers of one topic, per partition (not thread-safe: the writer's thread).

    Args:
        topic: the topic's name, for messages.
        table: the writer's warm handle of the topic table (refreshed in place when it lags).
        max_entries: producers kept in memory (``producer.state.max.entries``).
        known_version: the newest table version the writer knows of; a handle older
            than that is refreshed before a producer's state is read from it.
        num_partitions: the topic's partition count as the writer knows it.
    """

    def __init__(
        self,
        topic: str,
        table: DeltaTable,
        max_entries: int,
        known_version: Callable[[], int],
        num_partitions: Callable[[], int],
    ) -> None:
        self._topic = topic
        self._dt = table
        self._known_version = known_version
        self._num_partitions = num_partitions
        self._producers: LruDict[str, _Producer] = LruDict(max_entries)

    def __len__(self) -> int:
        """Producers whose state is held in memory (at most ``max_entries``)."""
        return len(self._producers)

    def last_sequence(self, producer_id: str) -> int | None:
        """The highest sequence ``producer_id`` committed on this topic, on any partition, or None.

        Reads every partition's sequence: ``logstore.pid.<id>`` is written by
        the leaders of different partitions, and the last of two racing commits may hold the lower one.
        """
        producer = self._producer(producer_id)
        if producer.top is None:
            return None
        lasts = [self._partition(producer_id, p).last for p in range(self._num_partitions())]
        return max([producer.top, *(s for s in lasts if s is not None)])

    def partition_sequence(self, producer_id: str, partition: int) -> int | None:
        """The last sequence ``producer_id`` committed on ``partition`` (or its legacy floor), or None."""
        return self._partition(producer_id, partition).last

    def landed(self, producer_id: str, seq: int, partitions: Iterable[int]) -> bool:
        """Whether batch ``seq`` of ``producer_id`` is committed on each of ``partitions``.

        For a write-ahead log frame replayed after a crash or at a new leader: one
        node commits a producer's batches of a partition in order, so a sequence
        at or below the partition's last was committed there.
        """
        for p in partitions:
            last = self.partition_sequence(producer_id, p)
            if last is None or seq > last:
                return False
        return True

    def check(
        self, producer_id: str, seq: object, counts: Mapping[int, int], pending: dict[tuple[str, int], int]
    ) -> Checked:
        """How a batch of sequence ``seq`` with ``counts`` records per partition stands on each of them.

        ``pending``: (producer, partition) → the sequence an earlier batch of the
        same commit writes there.

        Raises:
            InvalidRequestError: the sequence is not an integer >= 0, or it retries a
                committed batch with a different number of records on a partition.
            OutOfOrderSequenceNumberError: on some partition the sequence is below
                the last committed one and not a batch that partition remembers.
        """
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise InvalidRequestError("an idempotent batch needs an integer sequence >= 0 with its producer_id")
        new: list[int] = []
        retried: dict[int, int] = {}
        waiting = False
        for p, count in sorted(counts.items()):
            planned = pending.get((producer_id, p))
            if planned is not None and seq > planned:
                new.append(p)
                continue
            if planned == seq:
                waiting = True
                continue
            state = self._partition(producer_id, p)
            if planned is None and (state.last is None or seq > state.last):
                new.append(p)
                continue
            found = self._remembered(producer_id, p, state, seq)
            if found is None:
                raise OutOfOrderSequenceNumberError(
                    f"producer '{producer_id}' sent sequence {seq} to partition {p} of topic '{self._topic}', "
                    f"which committed sequence {planned if planned is not None else state.last} there and "
                    f"remembers no batch {seq} among its last {PRODUCER_WINDOW}: "
                    "it is older than those, or out of order"
                )
            first, committed_count = found
            if committed_count != count:
                raise InvalidRequestError(
                    f"producer '{producer_id}' retried sequence {seq} with different records than it committed "
                    f"(partition {p} of topic '{self._topic}': {count} records, {committed_count} committed)"
                )
            retried[p] = first
        return Checked(new, retried, waiting)

    def committed(self, producer_id: str, seq: int, firsts: Mapping[int, tuple[int, int]]) -> None:
        """This writer's commit holds ``seq`` of ``producer_id``, at ``firsts`` (per partition: first offset, count)."""
        producer = self._producer(producer_id)
        producer.top = seq if producer.top is None else max(producer.top, seq)
        for p, (first, count) in firsts.items():
            state = self._partition(producer_id, p)
            state.last = seq
            state.recent.append((seq, first, count))

    def absorb(self, producer_id: str, partition: int | None, seq: int) -> None:
        """Another writer's commit holds ``seq`` of ``producer_id`` on ``partition`` (None: its topic-wide entries).

        Only producers held in memory are updated; the others are read from
        the table when they next send.
        """
        producer = self._producers.get(producer_id)
        if producer is None:
            return
        if partition is None:
            producer.top = seq if producer.top is None else max(producer.top, seq)
            return
        state = producer.parts.get(partition)
        if state is not None:
            state.last = seq
            state.known = False  # its offsets are in that commit's commitInfo, read back if retried

    def reload(self) -> None:
        """Forget what the (just refreshed) table may contradict; it is read back on next use."""
        self._producers = LruDict(self._producers.max_entries)

    # -- reading the log ------------------------------------------------------------

    def _producer(self, producer_id: str) -> _Producer:
        producer = self._producers.get(producer_id)
        if producer is None:
            self._current()
            floor = _delta.txn_version(self._dt, _delta.app_producer(producer_id))
            top = _delta.txn_version(self._dt, _delta.app_producer_max(producer_id))
            producer = _Producer(top if top is not None else floor, floor)
            self._producers[producer_id] = producer
        return producer

    def _partition(self, producer_id: str, partition: int) -> _Partition:
        producer = self._producer(producer_id)
        state = producer.parts.get(partition)
        if state is None:
            if producer.top is None:
                state = _Partition(None, known=True)  # the topic never saw this producer
            else:
                self._current()
                last = _delta.txn_version(self._dt, _delta.app_sequence(partition, producer_id))
                state = _Partition(last if last is not None else producer.floor)
            producer.parts[partition] = state
        return state

    def _current(self) -> None:
        if self._dt.version() < self._known_version():
            # The handle lags the writer's own commits, which may hold the producer's sequences
            # (it was dropped from the bounded cache): read them before trusting it.
            _delta.refresh(self._dt)

    def _remembered(self, producer_id: str, partition: int, state: _Partition, seq: int) -> tuple[int, int] | None:
        """(first offset, count) of batch ``seq`` on ``partition`` if it is among the remembered ones."""
        for s, first, count in state.recent:
            if s == seq:
                return first, count
        if state.known:
            return None
        # After a restart (or another writer's commit) the window lives only in the commit history.
        _delta.refresh(self._dt)
        found: list[tuple[int, int, int]] = []
        for commit in self._dt.history(_HISTORY_LIMIT):  # newest first; a commit's batches are in commit order
            for entry in reversed(commit.get(_delta.PRODUCERS_METADATA) or []):
                at = entry.get("first", {}).get(str(partition)) if entry.get("id") == producer_id else None
                if at is not None:
                    found.append((int(entry["seq"]), int(at[0]), int(at[1])))
            if len(found) >= PRODUCER_WINDOW:
                break
        state.recent.clear()
        state.recent.extend(reversed(found[:PRODUCER_WINDOW]))
        state.known = True
        for s, first, count in state.recent:
            if s == seq:
                return first, count
        return None


def counts_of(parts: np.ndarray) -> dict[int, int]:
    """Records per partition of a batch whose records are on ``parts``."""
    if not len(parts):
        return {}
    values, counts = np.unique(parts, return_counts=True)
    return {int(p): int(c) for p, c in zip(values.tolist(), counts.tolist(), strict=True)}
