"""Idempotent producers of one topic: each one's last sequence and recent batches (Kafka's ProducerStateManager).

A batch with a ``producer_id`` carries a ``sequence``; the next one a producer
may send is its last committed sequence + 1. Where the state lives:

* the last committed sequence: the ``logstore.producer.<id>`` app transaction of
  the topic's Delta log (kept across checkpoints), so it survives any restart;
* the offsets each of the last :data:`PRODUCER_WINDOW` batches got: the
  ``logstore.producers`` entry of each commit's ``commitInfo``, so a retry of
  one of them is answered with its original offsets, also after a restart.

:class:`ProducerStateManager` caches both in memory for at most
``producer.state.max.entries`` producers (least recently used dropped first:
everything dropped can be read back from the log). It is driven by the topic's
:class:`~logstore.log.writer.TopicWriter` from the writer's one thread.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from logstore.common.lru import LruDict
from logstore.errors import InvalidRequestError, LogstoreError, OutOfOrderSequenceNumberError
from logstore.log import _delta
from logstore.log.validator import offsets_from
from logstore.structs import AppendResult, ProducerBatch

__all__ = ["PRODUCER_WINDOW", "ProducerStateManager"]

PRODUCER_WINDOW = 5
"""Committed batches per producer whose retry is answered with the original offsets (Kafka: 5)."""

_HISTORY_LIMIT = 1000
"""Commits read back, newest first, to find a retried batch after a restart."""


@dataclass
class _Producer:
    last_seq: int | None
    recent: collections.deque[tuple[int, dict[int, tuple[int, int]]]] = field(
        default_factory=lambda: collections.deque(maxlen=PRODUCER_WINDOW)
    )
    """(sequence, per partition (first offset, record count)) of the latest committed batches."""


class ProducerStateManager:
    """Sequences of the idempotent producers of one topic (not thread-safe: the writer's thread).

    Args:
        topic: the topic's name, for messages.
        table: the writer's warm handle of the topic table (refreshed in place when it lags).
        max_entries: producers kept in memory (``producer.state.max.entries``).
        known_version: the newest table version the writer knows of; a handle older
            than that is refreshed before a producer's state is read from it.
    """

    def __init__(self, topic: str, table: DeltaTable, max_entries: int, known_version: Callable[[], int]) -> None:
        self._topic = topic
        self._dt = table
        self._known_version = known_version
        self._producers: LruDict[str, _Producer] = LruDict(max_entries)

    def __len__(self) -> int:
        """Producers whose state is held in memory (at most ``max_entries``)."""
        return len(self._producers)

    def last_sequence(self, producer_id: str) -> int | None:
        """The last sequence ``producer_id`` committed on this topic, or None."""
        return self._state(producer_id).last_seq

    def check(self, batch: ProducerBatch, pending: dict[str, list[int]]) -> int | None:
        """None for the producer's next sequence; the sequence itself for a retry of a committed one.

        ``pending``: sequences of each producer planned earlier in the same commit.

        Raises:
            InvalidRequestError: the sequence is not an integer >= 0.
            OutOfOrderSequenceNumberError: the sequence skips ahead of the next expected one.
        """
        pid, seq = batch.producer_id, batch.sequence
        assert pid is not None
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise InvalidRequestError("an idempotent batch needs an integer sequence >= 0 with its producer_id")
        last = pending[pid][-1] if pid in pending else self._state(pid).last_seq
        if last is None or seq == last + 1:
            return None
        if seq <= last:
            return seq
        raise OutOfOrderSequenceNumberError(
            f"producer '{pid}' sent sequence {seq} to topic '{self._topic}' but the next expected is {last + 1}"
        )

    def duplicate_result(
        self, batch: ProducerBatch, records: pa.Table, seq: int, num_partitions: int, version: int
    ) -> AppendResult | LogstoreError:
        """The answer to a retry of committed sequence ``seq``: its original offsets, or why there are none.

        ``records`` (:data:`~logstore.log.schema.INPUT_SCHEMA`) must spread over the
        partitions as the committed batch did; ``version`` is reported as the commit.
        """
        assert batch.producer_id is not None
        firsts = self._find_committed(batch.producer_id, seq)
        if firsts is None:
            return OutOfOrderSequenceNumberError(
                f"producer '{batch.producer_id}' retried sequence {seq} of topic '{self._topic}', which is older "
                f"than the last {PRODUCER_WINDOW} committed batches; the next expected is "
                f"{(self._state(batch.producer_id).last_seq or 0) + 1}"
            )
        parts = records["partition"].combine_chunks()
        counts = np.bincount(parts.to_numpy(), minlength=num_partitions) if len(parts) else np.zeros(0, np.int64)
        expected = {p: c for p, (_, c) in firsts.items()}
        got = {p: int(c) for p, c in enumerate(counts) if c}
        if expected != got:
            return InvalidRequestError(
                f"producer '{batch.producer_id}' retried sequence {seq} with different records than it committed"
            )
        base = np.zeros(num_partitions, np.int64)
        for p, (first, _) in firsts.items():
            base[p] = first
        return AppendResult(pa.array(offsets_from(parts.to_numpy(), base)), parts, version, duplicate=True)

    def committed(self, producer_id: str, seq: int, firsts: dict[int, tuple[int, int]]) -> None:
        """This writer's commit holds ``seq`` of ``producer_id``, at ``firsts`` (per partition: first offset, count)."""
        state = self._state(producer_id)
        state.last_seq = seq
        state.recent.append((seq, firsts))

    def absorb(self, producer_id: str, seq: int) -> None:
        """Another writer's commit holds ``seq`` of ``producer_id`` (its ``logstore.producer.<id>``)."""
        self._producers.setdefault(producer_id, _Producer(seq)).last_seq = seq

    def reload(self) -> None:
        """Re-read the last sequences from the (just refreshed) table; forget producers with no recent batch."""
        for state in self._producers.values():
            state.last_seq = None
        for pid in [pid for pid, s in self._producers.items() if not s.recent]:
            del self._producers[pid]
        for pid, state in self._producers.items():
            state.last_seq = _delta.txn_version(self._dt, _delta.app_producer(pid))

    def _state(self, producer_id: str) -> _Producer:
        state = self._producers.get(producer_id)
        if state is None:
            if self._dt.version() < self._known_version():
                # The handle lags the writer's own commits, which may hold the producer's last
                # sequence (it was dropped from the bounded cache): read them before trusting it.
                _delta.refresh(self._dt)
            state = _Producer(_delta.txn_version(self._dt, _delta.app_producer(producer_id)))
            self._producers[producer_id] = state
        return state

    def _find_committed(self, producer_id: str, seq: int) -> dict[int, tuple[int, int]] | None:
        state = self._state(producer_id)
        for s, firsts in state.recent:
            if s == seq:
                return firsts
        if state.last_seq is None or seq < state.last_seq - PRODUCER_WINDOW + 1:
            return None
        # After a restart the window lives only in the commit history.
        _delta.refresh(self._dt)
        for commit in self._dt.history(_HISTORY_LIMIT):
            for entry in commit.get(_delta.PRODUCERS_METADATA) or []:
                if entry.get("id") == producer_id and entry.get("seq") == seq:
                    return {int(p): (int(v[0]), int(v[1])) for p, v in entry["first"].items()}
        return None
