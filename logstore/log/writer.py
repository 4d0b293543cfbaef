"""The partition log writer: offsets, atomic group commits, fencing, idempotence.

A :class:`TopicWriter` is the committer of one topic's partitions. Each call
to :meth:`TopicWriter.append` is one Delta commit holding every accepted
record of every batch handed to it, whatever partitions they span — a
multi-partition produce is atomic, and many produce requests share one
commit (group commit).

Guarantees, per partition:

* Offsets start at 0 and are strictly increasing and gap-free at write. They
  are assigned from the high watermark (HW) the writer holds in memory; the
  commit records the new HW as the ``logstore.hw.<p>`` app transaction.
* Exactly one committer wins each commit race: every commit carries the
  ``logstore.epoch`` app transaction, so two commits racing on the same table
  conflict and the loser re-reads the table, re-assigns offsets and tries
  again. No two records of a partition ever share an offset.
* A committer whose epoch is below the one in the table is a zombie: its
  commit fails with :class:`~logstore.errors.FencedLeaderEpochError` and
  leaves the table unchanged. Opening a writer claims a new epoch at once
  (an empty commit), so a zombie is fenced on its very next commit.
* Idempotent producers: ``(producer_id, sequence)`` is recorded with the
  records (app transaction + ``commitInfo``), so a retried sequence — even
  after a restart — writes nothing and returns the original offsets.
* A commit is created only at the log's next version (never at one that log
  cleanup removed), and its outcome is always decided: each carries a commit
  id that is read back after an I/O error at or after its creation, so a
  retry of a batch that landed returns its results instead of a second copy.
* Two writers opening at once never lead with one epoch: the loser of the
  claim race claims a higher epoch, or is fenced if a coordinator chose it.

Cluster mode (``leader_epochs`` given): the fence is per partition. The
writer commits only the partitions it leads, each commit carrying
``logstore.leader.<p>`` = the ZooKeeper ``leader_epoch`` of every partition
it touches instead of the table-wide ``logstore.epoch`` (which would make two
leaders of one topic fence each other). :meth:`TopicWriter.claim` commits a
``CLAIM`` of newly led partitions; a commit in the log holding a higher
``logstore.leader.<p>`` than this writer's fences it for ``p`` only
(:class:`~logstore.errors.FencedLeaderEpochError` with ``partitions``), and it
keeps committing its other partitions. A commit race lost to a commit that
touched none of this commit's partitions (nor its producers) leaves its
offsets valid: the same files are committed at the next version, unchanged.

A writer is not thread-safe: one thread (the ingest tier's committer task)
drives it. The Delta table handle stays open between commits.
"""

from __future__ import annotations

import collections
import contextlib
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import DeltaError

from logstore.common.lru import LruDict
from logstore.config import TopicConfig
from logstore.errors import (
    ConcurrentTransactionsError,
    FencedLeaderEpochError,
    InvalidRequestError,
    InvalidTimestampError,
    KafkaStorageError,
    LogstoreError,
    MessageTooLargeError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    UnknownTopicOrPartitionError,
)
from logstore.log import _delta, promises
from logstore.log._append import CommitInDoubt, LogAppender, StaleVersion, VersionTaken
from logstore.log.catalog import Catalog, high_watermark
from logstore.log.schema import (
    INPUT_SCHEMA,
    MAX_TIMESTAMP_MS,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TOPIC_SCHEMA,
    record_sizes,
)
from logstore.structs import AppendResult, ProducerBatch

__all__ = ["PRODUCER_WINDOW", "TopicWriter", "offsets_from"]

PRODUCER_WINDOW = 5
"""Committed batches per producer whose retry is answered with the original offsets (Kafka: 5)."""

_HISTORY_LIMIT = 1000


@dataclass
class _Producer:
    last_seq: int | None
    recent: collections.deque[tuple[int, dict[int, tuple[int, int]]]] = field(
        default_factory=lambda: collections.deque(maxlen=PRODUCER_WINDOW)
    )


@dataclass
class _Planned:
    index: int
    batch: ProducerBatch
    records: pa.Table


@dataclass
class _Unsettled:
    """A commit whose outcome is unknown, and the answer its batches get if it landed."""

    version: int
    commit_id: str
    batches: list[ProducerBatch]
    results: list[AppendResult | LogstoreError]


class TopicWriter:
    """The one committer of a topic's partitions (see the module docstring).

    Args:
        catalog: the catalog of the root holding the topic.
        topic: the topic's name.
        epoch: the leader epoch to claim; ``None`` claims the table's current
            epoch + 1 (embedded mode); a coordinator (ZooKeeper) passes its own.
        join: commit under the table's current epoch without claiming a new one.
            For cooperative writers (the Spark sink) that share a topic with a
            leader: they win or lose commit races but fence no one.
        max_attempts: commit attempts per :meth:`append` before giving up with
            :class:`~logstore.errors.ConcurrentTransactionsError`.
        clock_ms: wall clock in ms, for CreateTime defaults and LogAppendTime.
        leader_epochs: cluster mode: the partitions this writer leads, with
            their ZooKeeper leader epochs, already claimed (usually empty at
            first; :meth:`claim` adds partitions). None = embedded mode.

    Raises:
        UnknownTopicOrPartitionError: no such topic.
        FencedLeaderEpochError: ``epoch`` is below the table's epoch.
    """

    def __init__(
        self,
        catalog: Catalog,
        topic: str,
        *,
        epoch: int | None = None,
        join: bool = False,
        max_attempts: int = 20,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        leader_epochs: Mapping[int, int] | None = None,
    ) -> None:
        self.topic = topic
        self._leaders: dict[int, int] | None = None if leader_epochs is None else dict(leader_epochs)
        self._table_leaders: dict[int, int] = {}
        """Per partition, the highest ``logstore.leader.<p>`` the log holds (as far as this writer has read)."""
        self._touching: tuple[set[int], set[str]] | None = None
        """Partitions and producers of the commit being made (cluster mode), to judge a lost race."""
        self._foreign_ok = False
        self._catalog = catalog
        self._dt = catalog.table(topic)
        self._version = self._dt.version()
        self._appender = LogAppender(
            catalog.topic_path(topic), catalog.config.checkpoint_interval, fsync=catalog.config.commit_fsync
        )
        self._join = join
        self._max_attempts = max_attempts
        self._clock_ms = clock_ms
        self._producers: LruDict[str, _Producer] = LruDict(catalog.config.producer_state_max_entries)
        self._num_partitions = 0
        self._config = TopicConfig()
        self._hw: list[int] = []
        self._waiting: list[int] = []
        self._unsettled: _Unsettled | None = None
        self._load_state()
        current = self._table_epoch()
        if join or self._leaders is not None:
            self.epoch = current
        else:
            self.epoch = current + 1 if epoch is None else epoch
            self._claim(chosen=epoch is None)

    # -- public -----------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    @property
    def config(self) -> TopicConfig:
        return self._config

    @property
    def table_version(self) -> int:
        """The newest Delta version this writer knows of (its own last commit, or what it loaded)."""
        return self._version

    @property
    def leader_epochs(self) -> dict[int, int]:
        """Cluster mode: the partitions this writer leads and their epochs (empty when embedded)."""
        return dict(self._leaders or {})

    def claim(self, epochs: Mapping[int, int]) -> None:
        """Cluster mode: lead ``epochs``' partitions, committing a ``CLAIM`` of ``logstore.leader.<p>`` = epoch.

        After it returns, no commit of an older leader of these partitions can
        land (every commit is made at the log's next version, after reading the
        versions before it, and a writer that reads a higher epoch than its own
        stops). Call with the writer lock held, after the previous leader's
        acks=1 records are replayed.

        Raises:
            FencedLeaderEpochError: the log already holds a higher epoch for one of
                them (``partitions`` names which); nothing was claimed.
        """
        assert self._leaders is not None, "claim() is for cluster mode"
        wanted = {int(p): int(e) for p, e in epochs.items()}
        if not wanted:
            return
        for _attempt in range(self._max_attempts):
            self.catch_up()
            if max(wanted) >= self._num_partitions:
                self._refresh()
            newer = tuple(sorted(p for p, e in wanted.items() if self._table_leaders.get(p, -1) > e))
            if newer:
                raise FencedLeaderEpochError(
                    f"topic '{self.topic}': partitions {list(newer)} are held by a newer leader epoch",
                    partitions=newer,
                )
            self._touching = (set(wanted), set())
            try:
                self._commit_files(
                    [], [(_delta.app_leader(p), e) for p, e in sorted(wanted.items())], {"operation": "CLAIM"}
                )
            except CommitInDoubt as e:
                raise KafkaStorageError(f"cannot claim partitions of topic '{self.topic}': {e}") from e
            except _Replan as replan:
                if replan.full:
                    self._refresh()
                continue
            finally:
                self._touching = None
            for p, epoch in wanted.items():
                self._table_leaders[p] = max(self._table_leaders.get(p, -1), epoch)
            self._leaders.update(wanted)
            return
        raise ConcurrentTransactionsError(f"topic '{self.topic}': could not claim partitions {sorted(wanted)}")

    def resign(self, partitions: Sequence[int]) -> None:
        """Cluster mode: stop leading ``partitions`` (another node leads them now); commits nothing."""
        if self._leaders is not None:
            for p in partitions:
                self._leaders.pop(p, None)

    def append_foreign(self, batches: Sequence[ProducerBatch]) -> list[AppendResult | LogstoreError]:
        """Cluster mode: :meth:`append_held` for any partition, led or not, carrying no leader epochs.

        For the replay of a departed leader's acks=1 write-ahead log before its
        partitions are claimed: the records go where its promises put them, and
        the commit claims no leadership (the claims that follow do).
        """
        self._foreign_ok = True
        try:
            return self._append(batches)
        finally:
            self._foreign_ok = False

    def high_watermark(self, partition: int) -> int:
        """The offset the next record of ``partition`` will get (as of the last commit seen)."""
        return self._hw[partition]

    def append(self, batches: Sequence[ProducerBatch]) -> list[AppendResult | LogstoreError]:
        """Commit every acceptable batch in one Delta commit; one result per batch.

        A batch with bad input (record too large, unknown partition, out-of-order
        sequence) gets its error in its slot and does not stop the others. A retry
        of a committed sequence gets its original offsets with ``duplicate=True``.
        When the call returns, accepted records are durable in the table.

        When a commit's outcome is unknown (an I/O error at or after creating its
        commit file, and reading it back failed too), this raises
        :class:`~logstore.errors.KafkaStorageError` and the next call first reads
        that commit back: if it landed, a retry with the same batch objects gets
        the original results and nothing is appended twice.

        Raises:
            FencedLeaderEpochError: a newer committer claimed the topic; nothing
                of this call was committed.
            ConcurrentTransactionsError: the commit race was lost ``max_attempts`` times.
            KafkaStorageError: the table could not be written; the outcome may be
                unknown, so retry idempotently. Also when a stopped ingest node's
                acks=1 records (:mod:`logstore.log.promises`) cannot be replayed first.
        """
        # Writers of this table on this host take turns (a file lock), so a cooperative
        # writer is not starved by a busy leader; across hosts the commit race decides.
        with self._appender.exclusive():
            # A node that died holding acks=1 promises on this topic: its records go first.
            promises.settle(self, self._appender.root)
            return self._append(batches)

    def _append(self, batches: Sequence[ProducerBatch]) -> list[AppendResult | LogstoreError]:
        if self._unsettled is not None:
            answer = self._settle(batches)
            if answer is not None:
                return answer
        for _attempt in range(self._max_attempts):
            _moved, full = self._absorb(self._version + 1)  # catch up before writing files
            if full:
                self._refresh()
            results, planned = self._plan(batches)
            if not planned:
                self._fill_pending_duplicates(batches, results)
                return [r for r in results if r is not None]
            try:
                version, offsets = self._commit(planned)
            except _InDoubt as doubt:
                for item, offs in zip(planned, doubt.offsets, strict=True):
                    results[item.index] = AppendResult(offs, item.records["partition"].combine_chunks(), doubt.version)
                self._fill_pending_duplicates(batches, results)
                answer = [r for r in results if r is not None]
                self._unsettled = _Unsettled(doubt.version, doubt.commit_id, list(batches), answer)
                raise KafkaStorageError(
                    f"commit {doubt.version} to topic '{self.topic}' may or may not have landed: {doubt.reason}; "
                    "retry the same batches to learn which"
                ) from None
            except _Replan as replan:
                if replan.full:
                    self._refresh()
                # Racing writers that retry in lockstep keep colliding; a short random pause breaks the tie.
                time.sleep(random.uniform(0, min(0.01, 0.0005 * 2**_attempt)))
                continue
            except (KafkaStorageError, OSError) as e:
                self._refresh()
                if isinstance(e, KafkaStorageError):
                    raise
                raise KafkaStorageError(f"commit to topic '{self.topic}' failed: {e}") from e
            for item, offs in zip(planned, offsets, strict=True):
                results[item.index] = AppendResult(offs, item.records["partition"].combine_chunks(), version)
            self._fill_pending_duplicates(batches, results)
            return [r for r in results if r is not None]
        raise ConcurrentTransactionsError(
            f"topic '{self.topic}': lost the commit race {self._max_attempts} times in a row"
        )

    def hold(self) -> contextlib.AbstractContextManager[None]:
        """Hold the table's writer lock across several :meth:`append_held` calls (one thread only).

        While it is held no writer on this host that takes turns through it
        (:meth:`append`, cooperative or not) commits; :meth:`others_waiting`
        tells the holder that one waits for its turn. A cluster-mode writer
        holds it shared with the other leaders of the topic
        (:meth:`LogAppender.exclusive`).
        """
        return self._appender.exclusive(shared=self._leaders is not None)

    def try_hold(self) -> contextlib.AbstractContextManager[None] | None:
        """:meth:`hold` if the writer lock is free now, else None (without waiting or announcing itself).

        Unlike :meth:`hold`, the lock may be let go of from another thread than the one that took it.
        """
        return self._appender.try_exclusive(shared=self._leaders is not None)

    def append_held(self, batches: Sequence[ProducerBatch]) -> list[AppendResult | LogstoreError]:
        """:meth:`append` for a caller inside :meth:`hold` (which settles stopped nodes' promises itself)."""
        return self._append(batches)

    def others_waiting(self) -> bool:
        """Whether another writer on this host waits for the writer lock this writer holds."""
        return self._appender.others_waiting()

    def catch_up(self) -> None:
        """Step over commits made by others since this writer last looked (new offsets, partitions, config).

        Raises:
            FencedLeaderEpochError: a newer committer claimed the topic.
            KafkaStorageError: the table could not be re-read.
        """
        _moved, full = self._absorb(self._version + 1)
        if full:
            self._refresh()

    def _settle(self, batches: Sequence[ProducerBatch]) -> list[AppendResult | LogstoreError] | None:
        """Decide the unsettled commit; its results if it landed and ``batches`` are its batches again."""
        unsettled = self._unsettled
        assert unsettled is not None
        try:
            landed = self._appender.settle(unsettled.version, unsettled.commit_id)
        except OSError as e:
            raise KafkaStorageError(f"commit {unsettled.version} to topic '{self.topic}' is still in doubt: {e}") from e
        self._unsettled = None
        if not landed:
            return None
        _moved, full = self._absorb(self._version + 1)  # the commit is in the log: fold it in like any other
        if full:
            self._refresh()
        same = len(batches) == len(unsettled.batches) and all(
            a is b for a, b in zip(batches, unsettled.batches, strict=True)
        )
        return unsettled.results if same else None

    def close(self) -> None:
        """Finish pending checkpoints and release background threads."""
        self._appender.wait_for_checkpoints()
        self._appender.close()

    def producer_sequence(self, producer_id: str) -> int | None:
        """The last sequence committed by ``producer_id`` on this topic, or None."""
        return self._producer(producer_id).last_seq

    def refresh(self) -> None:
        """Re-read the table (new partitions, config, other committers' commits).

        Raises:
            FencedLeaderEpochError: a newer committer claimed the topic.
        """
        self._refresh()

    # -- planning ---------------------------------------------------------------

    def _plan(
        self, batches: Sequence[ProducerBatch]
    ) -> tuple[list[AppendResult | LogstoreError | None], list[_Planned]]:
        results: list[AppendResult | LogstoreError | None] = [None] * len(batches)
        planned: list[_Planned] = []
        pending_seq: dict[str, list[int]] = {}
        waiting: list[int] = []
        refreshed = False
        for i, batch in enumerate(batches):
            try:
                records = _as_input(batch.records)
                if len(records) and pc.max(records["partition"]).as_py() >= self._num_partitions and not refreshed:
                    self._refresh()  # partitions may have been added since we last looked
                    refreshed = True
                self._check_partitions(records)
                self._check_leading(records)
                if not batch.validated:
                    self.check_records(records)
                if batch.producer_id is not None:
                    dup = self._check_sequence(batch, pending_seq)
                    if dup is not None:
                        if dup in pending_seq.get(batch.producer_id, ()):
                            waiting.append(i)  # the original is in this very call
                        else:
                            results[i] = self._duplicate_result(batch, records, dup)
                        continue
                    assert batch.sequence is not None
                    pending_seq.setdefault(batch.producer_id, []).append(batch.sequence)
                planned.append(_Planned(i, batch, records))
            except LogstoreError as e:
                results[i] = e
        self._waiting = waiting
        return results, [p for p in planned if len(p.records) or p.batch.producer_id is not None]

    def check_records(self, records: pa.Table) -> int:
        """Check ``records`` against this topic's limits; returns their size in bytes.

        The size is what ``message.max.bytes`` counts (key + value + headers).
        A front end that calls this before queueing a batch marks the batch
        ``validated`` so :meth:`append` does not check it twice. Safe to call
        from another thread than the committer's.

        Raises:
            MessageTooLargeError: a record over the topic's ``message.max.bytes``.
            InvalidTimestampError: a negative timestamp, or one past year 9999
                (:data:`~logstore.log.schema.MAX_TIMESTAMP_MS`), which a Delta TIMESTAMP cannot hold.
        """
        if not len(records):
            return 0
        sizes = record_sizes(records)
        biggest = pc.max(sizes).as_py()
        limit = self._config.message_max_bytes
        if biggest > limit:
            raise MessageTooLargeError(
                f"a record of {biggest} bytes exceeds message.max.bytes={limit} of topic '{self.topic}'"
            )
        ts = records["timestamp"]
        if ts.null_count < len(ts):
            bounds = pc.min_max(ts.cast(pa.int64()))
            if bounds["min"].as_py() < 0:
                raise InvalidTimestampError("record timestamps must be milliseconds since the epoch, not negative")
            if bounds["max"].as_py() > MAX_TIMESTAMP_MS * 1000:  # statistics round the maximum up to a ms
                raise InvalidTimestampError(
                    f"record timestamps must be at most {MAX_TIMESTAMP_MS} ms since the epoch (year 9999)"
                )
        return int(pc.sum(sizes).as_py())

    def _check_partitions(self, records: pa.Table) -> None:
        if not len(records):
            return
        parts = pc.min_max(records["partition"])
        lo, hi = parts["min"].as_py(), parts["max"].as_py()
        if lo < 0 or hi >= self._num_partitions:
            bad = lo if lo < 0 else hi
            raise UnknownTopicOrPartitionError(
                f"partition {bad} of topic '{self.topic}' does not exist (partitions: 0..{self._num_partitions - 1})"
            )

    def _check_leading(self, records: pa.Table) -> None:
        if self._leaders is None or self._foreign_ok or not len(records):
            return
        parts = np.unique(records["partition"].combine_chunks().to_numpy(zero_copy_only=False))
        missing = [int(p) for p in parts if int(p) not in self._leaders]
        if missing:
            raise NotLeaderOrFollowerError(
                f"this node does not lead partitions {missing} of topic '{self.topic}'; retry at their leader"
            )

    def _producer(self, producer_id: str) -> _Producer:
        state = self._producers.get(producer_id)
        if state is None:
            if self._dt.version() < self._version:
                # The handle lags this writer's own commits, which may hold the producer's last
                # sequence (it was dropped from the bounded cache): read them before trusting it.
                _delta.refresh(self._dt)
            state = _Producer(_delta.txn_version(self._dt, _delta.app_producer(producer_id)))
            self._producers[producer_id] = state
        return state

    def _check_sequence(self, batch: ProducerBatch, pending: dict[str, list[int]]) -> int | None:
        """None for a new sequence; the sequence itself for a retry of a committed one."""
        pid, seq = batch.producer_id, batch.sequence
        assert pid is not None
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise InvalidRequestError("an idempotent batch needs an integer sequence >= 0 with its producer_id")
        last = pending[pid][-1] if pid in pending else self._producer(pid).last_seq
        if last is None or seq == last + 1:
            return None
        if seq <= last:
            return seq
        raise OutOfOrderSequenceNumberError(
            f"producer '{pid}' sent sequence {seq} to topic '{self.topic}' but the next expected is {last + 1}"
        )

    def _duplicate_result(self, batch: ProducerBatch, records: pa.Table, seq: int) -> AppendResult | LogstoreError:
        assert batch.producer_id is not None
        firsts = self._find_committed(batch.producer_id, seq)
        if firsts is None:
            return OutOfOrderSequenceNumberError(
                f"producer '{batch.producer_id}' retried sequence {seq} of topic '{self.topic}', which is older "
                f"than the last {PRODUCER_WINDOW} committed batches; the next expected is "
                f"{(self._producer(batch.producer_id).last_seq or 0) + 1}"
            )
        parts = records["partition"].combine_chunks()
        counts = np.bincount(parts.to_numpy(), minlength=self._num_partitions) if len(parts) else np.zeros(0, np.int64)
        expected = {p: c for p, (_, c) in firsts.items()}
        got = {p: int(c) for p, c in enumerate(counts) if c}
        if expected != got:
            return InvalidRequestError(
                f"producer '{batch.producer_id}' retried sequence {seq} with different records than it committed"
            )
        base = np.zeros(self._num_partitions, np.int64)
        for p, (first, _) in firsts.items():
            base[p] = first
        return AppendResult(pa.array(offsets_from(parts.to_numpy(), base)), parts, self._version, duplicate=True)

    def _find_committed(self, producer_id: str, seq: int) -> dict[int, tuple[int, int]] | None:
        state = self._producer(producer_id)
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

    def _fill_pending_duplicates(
        self, batches: Sequence[ProducerBatch], results: list[AppendResult | LogstoreError | None]
    ) -> None:
        # A batch repeated inside one append call: answer it like a retry after the commit.
        for i in self._waiting:
            seq = batches[i].sequence
            assert seq is not None
            results[i] = self._duplicate_result(batches[i], _as_input(batches[i].records), seq)

    # -- committing -------------------------------------------------------------

    def _commit(self, planned: list[_Planned]) -> tuple[int, list[pa.Array]]:
        now_ms = self._clock_ms()
        table = pa.concat_tables([p.records for p in planned]) if len(planned) > 1 else planned[0].records
        parts = table["partition"].combine_chunks().to_numpy() if len(table) else np.zeros(0, np.int32)
        base = np.asarray(self._hw, np.int64)
        offsets = offsets_from(parts, base)
        counts = (
            np.bincount(parts, minlength=self._num_partitions)
            if len(parts)
            else np.zeros(self._num_partitions, np.int64)
        )
        new_hw = base + counts
        touched = [int(p) for p in np.nonzero(counts)[0]]

        out = self._stamp(table, offsets, now_ms)

        if self._leaders is None:
            txns = [(_delta.APP_EPOCH, self.epoch)]
        else:
            txns = [(_delta.app_leader(p), self._leaders[p]) for p in touched if p in self._leaders]
        txns += [(_delta.app_hw(p), int(new_hw[p])) for p in touched]
        landed: list[tuple[str, int, dict[int, tuple[int, int]]]] = []
        per_batch: list[pa.Array] = []
        start = 0
        for item in planned:
            n = len(item.records)
            batch_offsets = offsets[start : start + n]
            per_batch.append(pa.array(batch_offsets, pa.int64()))
            if item.batch.producer_id is not None:
                assert item.batch.sequence is not None
                landed.append(
                    (item.batch.producer_id, item.batch.sequence, _firsts(parts[start : start + n], batch_offsets))
                )
            start += n
        last_seq = {pid: seq for pid, seq, _ in landed}
        txns += [(_delta.app_producer(pid), seq) for pid, seq in last_seq.items()]
        metadata = [
            {"id": pid, "seq": seq, "first": {str(p): list(v) for p, v in firsts.items()}}
            for pid, seq, firsts in landed
        ]
        files = self._appender.write_files(out)
        if self._leaders is not None:
            self._touching = (set(touched), set(last_seq))
        try:
            self._commit_files(files, txns, {_delta.PRODUCERS_METADATA: metadata} if metadata else None)
        except CommitInDoubt as e:
            raise _InDoubt(e.version, e.commit_id, str(e), per_batch) from e
        finally:
            self._touching = None

        # Only this commit's partitions: a race lost to commits elsewhere moved the others' meanwhile.
        for p in touched:
            self._hw[p] = int(new_hw[p])
        for pid, seq, firsts in landed:
            state = self._producer(pid)
            state.last_seq = seq
            state.recent.append((seq, firsts))
        return self._version, per_batch

    def _commit_files(self, files: list[Any], txns: list[tuple[str, int]], info: dict[str, Any] | None) -> None:
        """Commit at the next free version; a version taken by a commit that moves offsets means re-plan."""
        version = self._version + 1
        while True:
            try:
                self._appender.commit(version, files, txns, info)
            except StaleVersion:
                self._appender.discard(files)
                raise _Replan(True) from None
            except VersionTaken:
                moved, full = self._absorb(version, self._touching)
                if moved:
                    self._appender.discard(files)
                    raise _Replan(full) from None
                if full:
                    # The winner changed what only a re-read shows (other partitions' offsets, say);
                    # this commit's partitions are untouched, so its files and offsets stay valid.
                    self._refresh()
                version = self._version + 1
                continue
            self._version = version
            return

    def _absorb(self, version: int, touching: tuple[set[int], set[str]] | None = None) -> tuple[bool, bool]:
        """Step over the commits from ``version`` on; (did any move offsets, is a re-read needed).

        With ``touching`` (cluster mode: the partitions and producers of the
        commit being made), "moved" means moved offsets of those partitions or
        sequences of those producers; commits elsewhere are folded in but leave
        the commit being made valid.
        """
        commits: dict[int, list[dict[str, Any]]] = {}
        for v, action in self._appender.actions_since(version):
            commits.setdefault(v, []).append(action)
        moved = full = False
        for actions in commits.values():
            if any(_moves_offsets(a) for a in actions):
                moved = moved or touching is None or _touches(actions, *touching)
                full = full or not self._apply_winner(actions)
        if commits:
            self._version = max(commits)
        return moved, full

    def _apply_winner(self, actions: list[dict[str, Any]]) -> bool:
        """Fold another committer's commit into this writer's state; False if only a re-read can.

        A logstore commit says where the high watermarks, the epoch and its
        producers now stand, which keeps a lost race cheap. Data from another
        engine, a new partition count or a config change need a re-read.

        Raises:
            FencedLeaderEpochError: the winner holds a newer epoch.
        """
        txns = {str(a["txn"].get("appId")): int(a["txn"].get("version", 0)) for a in actions if "txn" in a}
        leaders = {int(app.removeprefix(_delta.LEADER_PREFIX)): v for app, v in txns.items() if _is_leader_app(app)}
        ours = _delta.APP_EPOCH in txns or leaders or any(app.startswith("logstore.hw.") for app in txns)
        if not ours or any("metaData" in a or "protocol" in a for a in actions):
            return False
        epoch = txns.get(_delta.APP_EPOCH)
        if epoch is None:
            pass
        elif self._join or self._leaders is not None:
            # A cluster leader shares the table with cooperative writers, whose table-wide epoch fences no leader.
            self.epoch = max(self.epoch, epoch)
        elif epoch > self.epoch:
            raise FencedLeaderEpochError(
                f"topic '{self.topic}' was claimed by epoch {epoch}; this committer (epoch {self.epoch}) is fenced"
            )
        for p, e in leaders.items():
            self._table_leaders[p] = max(self._table_leaders.get(p, -1), e)
        for app, version in txns.items():
            if app.startswith("logstore.hw."):
                p = int(app.removeprefix("logstore.hw."))
                if p >= len(self._hw):
                    return False
                self._hw[p] = max(self._hw[p], version)
            elif app.startswith("logstore.producer."):
                pid = app.removeprefix("logstore.producer.")
                self._producers.setdefault(pid, _Producer(version)).last_seq = version
        self._check_fence()
        return True

    def _check_fence(self) -> None:
        """Cluster mode: stop leading every partition the log holds a newer epoch of, and say which."""
        if self._leaders is None:
            return
        fenced = tuple(sorted(p for p, e in self._leaders.items() if self._table_leaders.get(p, -1) > e))
        if not fenced:
            return
        epochs = {p: (self._leaders[p], self._table_leaders[p]) for p in fenced}
        self.resign(fenced)
        raise FencedLeaderEpochError(
            f"topic '{self.topic}': partitions {list(fenced)} were claimed by newer leader epochs "
            f"(ours, theirs: {epochs}); this node no longer commits them",
            partitions=fenced,
        )

    def _stamp(self, table: pa.Table, offsets: np.ndarray, now_ms: int) -> pa.Table:
        n = len(table)
        now = pa.scalar(now_ms * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
        if self._config.message_timestamp_type == "LogAppendTime":
            ts: pa.Array | pa.ChunkedArray = pa.repeat(now, n)
            ts_type = TIMESTAMP_LOG_APPEND_TIME
        else:
            ts = pc.fill_null(table["timestamp"], now) if table["timestamp"].null_count else table["timestamp"]
            ts_type = TIMESTAMP_CREATE_TIME
        return pa.Table.from_arrays(
            [
                table["partition"],
                pa.array(offsets, pa.int64()),
                ts,
                pa.repeat(pa.scalar(ts_type, pa.int32()), n),
                table["key"],
                table["value"],
                table["headers"],
            ],
            schema=TOPIC_SCHEMA,
        )

    def _claim(self, *, chosen: bool) -> None:
        """:meth:`_claim_locked` under the writer lock: a holder (the ingest node) first commits what it promised."""
        with self._appender.exclusive():
            self._claim_locked(chosen=chosen)

    def _claim_locked(self, *, chosen: bool) -> None:
        """Commit this writer's epoch (an empty commit carrying ``logstore.epoch``).

        Losing the race to another writer's claim of this epoch or a newer one
        means another leader holds it: a writer that chose its epoch itself
        claims the next one up; one given its epoch by a coordinator is fenced.
        No two leaders ever hold one epoch.
        """
        for _attempt in range(self._max_attempts):
            current = self._table_epoch()
            if current > self.epoch:
                if not chosen:
                    raise FencedLeaderEpochError(
                        f"topic '{self.topic}' is held by epoch {current}; cannot claim older epoch {self.epoch}"
                    )
                self.epoch = current + 1
            version = self._version + 1
            try:
                self._commit_files([], [(_delta.APP_EPOCH, self.epoch)], {"operation": "CLAIM"})
                return
            except CommitInDoubt as e:
                raise KafkaStorageError(f"cannot claim topic '{self.topic}': {e}") from e
            except FencedLeaderEpochError:
                if not chosen:
                    raise
            except _Replan:
                pass
            rival = self._rival_claim(version)
            if rival >= self.epoch:
                if not chosen:
                    raise FencedLeaderEpochError(
                        f"topic '{self.topic}': another writer claimed epoch {rival} first; "
                        f"this writer's epoch {self.epoch} is taken"
                    )
                self.epoch = rival + 1
            _delta.refresh(self._dt)
            self._version = max(self._version, self._dt.version())
            self._load_state()
        raise ConcurrentTransactionsError(f"topic '{self.topic}': could not claim epoch {self.epoch}")

    def _rival_claim(self, version: int) -> int:
        """The highest epoch claimed by a ``CLAIM`` commit from ``version`` on; -1 if none."""
        commits: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
        for v, action in self._appender.actions_since(version):
            commits[v].append(action)
        top = -1
        for actions in commits.values():
            if any(a.get("commitInfo", {}).get("operation") == "CLAIM" for a in actions):
                for a in actions:
                    if a.get("txn", {}).get("appId") == _delta.APP_EPOCH:
                        top = max(top, int(a["txn"]["version"]))
        return top

    # -- state ------------------------------------------------------------------

    def _table_epoch(self) -> int:
        return _delta.txn_version(self._dt, _delta.APP_EPOCH) or 0

    def _load_state(self) -> None:
        self._num_partitions, self._config = self._catalog.topic_config(self.topic, self._dt)
        files = _delta.data_files(self._dt)
        by_part: dict[int, list[_delta.DataFile]] = collections.defaultdict(list)
        for f in files:
            by_part[f.partition].append(f)
        self._hw = [high_watermark(self._dt, p, by_part[p]) for p in range(self._num_partitions)]
        for p in range(self._num_partitions):
            e = _delta.txn_version(self._dt, _delta.app_leader(p))
            if e is not None:
                self._table_leaders[p] = max(self._table_leaders.get(p, -1), e)

    def _refresh(self) -> None:
        try:
            _delta.refresh(self._dt)
        except (DeltaError, OSError) as e:
            raise KafkaStorageError(f"cannot re-read topic '{self.topic}': {e}") from e
        self._version = max(self._version, self._dt.version())
        self._load_state()
        for state in self._producers.values():
            state.last_seq = None
        for pid in [pid for pid, s in self._producers.items() if not s.recent]:
            del self._producers[pid]
        for pid, state in self._producers.items():
            state.last_seq = _delta.txn_version(self._dt, _delta.app_producer(pid))
        current = self._table_epoch()
        if self._leaders is not None:
            self.epoch = current
            self._check_fence()
        elif self._join:
            self.epoch = current
        elif current > self.epoch:
            raise FencedLeaderEpochError(
                f"topic '{self.topic}' was claimed by epoch {current}; this committer (epoch {self.epoch}) is fenced"
            )


class _InDoubt(Exception):
    """The commit of planned batches may or may not have landed at ``version``."""

    def __init__(self, version: int, commit_id: str, reason: str, offsets: list[pa.Array]) -> None:
        super().__init__(reason)
        self.version = version
        self.commit_id = commit_id
        self.reason = reason
        self.offsets = offsets


class _Replan(Exception):
    """A concurrent commit changed offsets, partitions or config: plan again (after a re-read if ``full``)."""

    def __init__(self, full: bool) -> None:
        super().__init__("re-plan")
        self.full = full


def _is_leader_app(app: str) -> bool:
    return app.startswith(_delta.LEADER_PREFIX) and app.removeprefix(_delta.LEADER_PREFIX).isdigit()


def _touches(actions: list[dict[str, Any]], partitions: set[int], producers: set[str]) -> bool:
    """Whether a commit moved offsets of ``partitions`` or sequences of ``producers`` (or may have: not ours)."""
    for a in actions:
        if "metaData" in a or "protocol" in a:
            return True
        if "add" in a and a["add"].get("dataChange", True):
            p = a["add"].get("partitionValues", {}).get("partition")
            if p is None or int(p) in partitions:
                return True
        if "txn" in a:
            app = str(a["txn"].get("appId"))
            if app == _delta.APP_EPOCH:
                return True  # a table-wide claim or a cooperative writer: it may have moved any offset
            for prefix in ("logstore.hw.", _delta.LEADER_PREFIX):
                if app.startswith(prefix) and int(app.removeprefix(prefix)) in partitions:
                    return True
            if app.startswith("logstore.producer.") and app.removeprefix("logstore.producer.") in producers:
                return True
    return False


def _moves_offsets(action: dict[str, Any]) -> bool:
    if "txn" in action:
        app = str(action["txn"].get("appId"))
        return app == _delta.APP_EPOCH or _is_leader_app(app)
    if "metaData" in action or "protocol" in action:
        return True
    return "add" in action and bool(action["add"].get("dataChange", True))


def _as_input(records: pa.Table) -> pa.Table:
    """``records`` in :data:`INPUT_SCHEMA` column order; missing optional columns are null."""
    if records.schema.equals(INPUT_SCHEMA):
        return records
    n = len(records)
    cols = []
    for f in INPUT_SCHEMA:
        if f.name in records.column_names:
            try:
                cols.append(records[f.name].cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise InvalidRequestError(f"column '{f.name}' cannot be read as {f.type}: {e}") from e
        elif f.name in ("partition", "value"):
            raise InvalidRequestError(f"records need a '{f.name}' column")
        else:
            cols.append(pa.nulls(n, f.type))
    if records["partition"].null_count:
        raise InvalidRequestError("every record needs a partition")
    return pa.Table.from_arrays(cols, schema=INPUT_SCHEMA)


def offsets_from(parts: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Offsets for records on ``parts`` (in order), each partition counting up from ``base[p]``."""
    if not len(parts):
        return np.zeros(0, np.int64)
    if np.all(parts == parts[0]):
        return base[parts[0]] + np.arange(len(parts), dtype=np.int64)
    order = np.argsort(parts, kind="stable")
    sorted_parts = parts[order]
    counts = np.bincount(parts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    ranks = np.arange(len(parts), dtype=np.int64) - starts[sorted_parts]
    out = np.empty(len(parts), np.int64)
    out[order] = base[sorted_parts] + ranks
    return out


def _firsts(parts: np.ndarray, offsets: np.ndarray) -> dict[int, tuple[int, int]]:
    """Per partition: (first offset, record count) of one batch."""
    out: dict[int, tuple[int, int]] = {}
    for p in np.unique(parts):
        mask = parts == p
        out[int(p)] = (int(offsets[mask].min()), int(mask.sum()))
    return out
