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
  records, per partition (app transactions + ``commitInfo``), so a retried
  sequence — even after a restart or at a new leader — writes nothing on the
  partitions where it landed and gets the original offsets there; on
  partitions where it did not, its records are written
  (:mod:`~logstore.log.producer_state`).
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

A writer is given its collaborators, one job each (Kafka's ``UnifiedLog`` and
the classes it is given): :mod:`~logstore.log.validator` checks and stamps
records, :class:`~logstore.log.producer_state.ProducerStateManager` keeps
idempotent producers' sequences, :class:`~logstore.log.epochs.LeaderEpochs`
its epochs and fence, :class:`~logstore.log.writer_lock.WriterLock` the turns
of a host's writers, and :func:`~logstore.log.promises.settle` commits a dead
node's acks=1 records first. What stays here is the append itself: offsets
from the high watermarks, the commit race and its outcome.

A writer is not thread-safe: one thread (the ingest tier's committer task)
drives it. The Delta table handle stays open between commits.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logstore.config import CompressionType, TopicConfig
from logstore.errors import ConcurrentTransactionsError, KafkaStorageError, LogstoreError
from logstore.log import _delta, promises, validator
from logstore.log.append import CommitInDoubt, LogAppender
from logstore.log.catalog import Catalog
from logstore.log.compression import parquet_codec
from logstore.log.epochs import LeaderEpochs
from logstore.log.log_state import LogState, Replan
from logstore.log.producer_state import ProducerStateManager, counts_of
from logstore.log.writer_lock import WriterLock
from logstore.structs import AppendResult, ProducerBatch

__all__ = ["TopicWriter"]


@dataclass
class _Planned:
    """A batch to commit: the records to write, and what its answer is made of."""

    index: int
    records: pa.Table
    """The records written: the batch's, less those on partitions where it is a retry."""
    parts: pa.Array
    """The partition of each of the batch's records (all of them), in order."""
    producer_id: str | None = None
    sequence: int | None = None
    retried: dict[int, int] = field(default_factory=dict)
    """Partitions where the batch is a retry of a committed one → that batch's first offset there."""
    compression: CompressionType | None = None
    """The codec the batch came in from a Kafka client (:attr:`~logstore.structs.ProducerBatch.compression`)."""

    def result(self, written: pa.Array, version: int) -> AppendResult:
        """The batch's answer, given the offsets of the records written (in order); ``duplicate`` if none were."""
        if not self.retried:
            return AppendResult(written, self.parts, version)
        parts = self.parts.to_numpy(zero_copy_only=False)
        offsets = np.empty(len(parts), np.int64)
        fresh = ~np.isin(parts, list(self.retried))
        offsets[fresh] = written.to_numpy(zero_copy_only=False)
        for p, first in self.retried.items():
            at = np.flatnonzero(parts == p)
            offsets[at] = first + np.arange(len(at), dtype=np.int64)
        return AppendResult(pa.array(offsets, pa.int64()), self.parts, version, duplicate=not fresh.any())


@dataclass
class _Unsettled:
    """A commit whose outcome is unknown, and the answer its batches get if it landed."""

    version: int
    commit_id: str
    batches: list[ProducerBatch]
    results: list[AppendResult | LogstoreError] | None
    """None when some of the batches waited for that commit (their answers are not known yet)."""


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
        leader_epochs: cluster mode: the partitions this writer leads and their ZooKeeper leader
            epochs, already claimed (usually none at first: :meth:`claim` adds). None = embedded mode.
        node_id: cluster mode: this node's ``node.id``, which its claims record (-1 = none).

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
        node_id: int = -1,
    ) -> None:
        self.topic = topic
        table = catalog.table(topic)
        root = catalog.topic_path(topic)
        self._appender = LogAppender(root, catalog.config.checkpoint_interval, fsync=catalog.config.commit_fsync)
        self._lock = WriterLock(root)
        self._epochs = LeaderEpochs(topic, join=join, leaders=leader_epochs, node_id=node_id)
        self._producers = ProducerStateManager(
            topic,
            table,
            catalog.config.producer_state_max_entries,
            lambda: self._log.version,
            lambda: self._log.num_partitions,
        )
        self._log = LogState(catalog, topic, table, self._appender, self._epochs, self._producers)
        self._node_compression = catalog.config.topic_defaults.compression_type
        self._max_attempts = max_attempts
        self._clock_ms = clock_ms
        self._foreign_ok = False
        self._unsettled: _Unsettled | None = None
        current = self._log.table_epoch()
        if join or self._epochs.cluster:
            self._epochs.epoch = current
        else:
            self._epochs.epoch = current + 1 if epoch is None else epoch
            self._claim(chosen=epoch is None)

    # -- public -----------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        return self._log.num_partitions

    @property
    def config(self) -> TopicConfig:
        return self._log.config

    @property
    def topic_id(self) -> str | None:
        """The ID of the topic this writer writes (:mod:`logstore.log.topic_id`); None: created before IDs."""
        return self._log.topic_id

    @property
    def epoch(self) -> int:
        """Embedded mode: the table-wide leader epoch this writer commits under."""
        return self._epochs.epoch

    @property
    def table_version(self) -> int:
        """The newest Delta version this writer knows of (its own last commit, or what it loaded)."""
        return self._log.version

    @property
    def leader_epochs(self) -> dict[int, int]:
        """Cluster mode: the partitions this writer leads and their epochs (empty when embedded)."""
        return self._epochs.led()

    def claim(self, epochs: Mapping[int, int]) -> None:
        """Cluster mode: lead ``epochs``' partitions, committing a ``CLAIM`` of ``logstore.leader.<p>`` = epoch.

        After it returns, no commit of an older leader of these partitions can
        land (every commit is made at the log's next version, after reading the
        versions before it, and a writer that reads a higher epoch than its own
        stops). Call with the writer lock held, after the previous leader's
        acks=1 records are replayed.

        Raises:
            FencedLeaderEpochError: the log holds a higher epoch for some (``partitions``),
                or the same one claimed by another node; nothing was claimed.
        """
        assert self._epochs.cluster, "claim() is for cluster mode"
        self._log.claim_partitions({int(p): int(e) for p, e in epochs.items()}, self._max_attempts)

    def resign(self, partitions: Sequence[int]) -> None:
        """Cluster mode: stop leading ``partitions`` (another node leads them now); commits nothing."""
        self._epochs.resign(partitions)

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
        return self._log.hw[partition]

    def append(self, batches: Sequence[ProducerBatch]) -> list[AppendResult | LogstoreError]:
        """Commit every acceptable batch in one Delta commit; one result per batch.

        A batch with bad input (record too large, unknown partition, out-of-order
        sequence) gets its error in its slot and does not stop the others. A retry
        of a committed sequence gets its original offsets with ``duplicate=True``;
        one that landed on some of its partitions only gets those partitions'
        original offsets and its other records are written.
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
        with self._lock.exclusive():
            # A node that died holding acks=1 promises on this topic: its records go first.
            promises.settle(self, self._lock.root)
            return self._append(batches)

    def hold(self) -> contextlib.AbstractContextManager[None]:
        """Hold the table's writer lock across several :meth:`append_held` calls (one thread only).

        While it is held no writer on this host that takes turns through it
        (:meth:`append`, cooperative or not) commits; :meth:`others_waiting`
        tells the holder that one waits for its turn. A cluster-mode writer
        holds it shared with the other leaders of the topic.
        """
        return self._lock.exclusive(shared=self._epochs.cluster)

    def try_hold(self) -> contextlib.AbstractContextManager[None] | None:
        """:meth:`hold` if the writer lock is free now, else None (without waiting or announcing itself).

        Unlike :meth:`hold`, the lock may be let go of from another thread than the one that took it.
        """
        return self._lock.try_exclusive(shared=self._epochs.cluster)

    def append_held(self, batches: Sequence[ProducerBatch]) -> list[AppendResult | LogstoreError]:
        """:meth:`append` for a caller inside :meth:`hold` (which settles stopped nodes' promises itself)."""
        return self._append(batches)

    def others_waiting(self) -> bool:
        """Whether another writer on this host waits for the writer lock this writer holds."""
        return self._lock.others_waiting()

    def check_records(self, records: pa.Table) -> int:
        """:func:`~logstore.log.validator.check_records` against this topic's config; their size in bytes.

        A front end that calls this before queueing a batch marks the batch
        ``validated`` so :meth:`append` does not check it twice. Safe to call
        from another thread than the committer's.
        """
        return validator.check_records(records, self._log.config, self.topic)

    def catch_up(self) -> None:
        """Step over commits made by others since this writer last looked (new offsets, partitions, config).

        Raises:
            FencedLeaderEpochError: a newer committer claimed the topic.
            KafkaStorageError: the table could not be re-read.
        """
        self._log.catch_up()

    def producer_sequence(self, producer_id: str) -> int | None:
        """The highest sequence ``producer_id`` committed on this topic (on any partition), or None."""
        return self._producers.last_sequence(producer_id)

    def landed(self, batch: ProducerBatch) -> bool:
        """Whether an idempotent batch (a replayed write-ahead log frame) is committed on each of its partitions.

        See :meth:`~logstore.log.producer_state.ProducerStateManager.landed`; False without a producer id.
        """
        if batch.producer_id is None or batch.sequence is None:
            return False
        partitions = pc.unique(validator.as_input(batch.records)["partition"]).to_pylist()
        return self._producers.landed(batch.producer_id, batch.sequence, partitions)

    def landed_everywhere(self, producer_id: str | None, sequence: int | None) -> bool:
        """:meth:`landed` on every partition of the topic: for skipping a logged frame by its header alone."""
        if producer_id is None or sequence is None:
            return False
        return self._producers.landed(producer_id, sequence, range(self._log.num_partitions))

    def refresh(self) -> None:
        """Re-read the table (new partitions, config, other committers' commits).

        Raises:
            FencedLeaderEpochError: a newer committer claimed the topic.
        """
        self._log.refresh()

    def close(self) -> None:
        """Finish pending checkpoints and release background threads and the lock's files."""
        self._appender.wait_for_checkpoints()
        self._appender.close()
        self._lock.close()

    # -- appending --------------------------------------------------------------

    def _append(self, batches: Sequence[ProducerBatch]) -> list[AppendResult | LogstoreError]:
        if self._unsettled is not None:
            answer = self._settle(batches)
            if answer is not None:
                return answer
        results: list[AppendResult | LogstoreError | None] = [None] * len(batches)
        todo = list(range(len(batches)))
        while todo:
            # A batch repeating a sequence an earlier batch of this call writes on one of its partitions is
            # decided after that commit, in the next round: a retry there, and maybe new on other partitions.
            round_results, waiting = self._append_round([batches[i] for i in todo])
            for j, i in enumerate(todo):
                results[i] = round_results[j]
            todo = [todo[j] for j in waiting]
        return [r for r in results if r is not None]

    def _append_round(
        self, batches: Sequence[ProducerBatch]
    ) -> tuple[list[AppendResult | LogstoreError | None], list[int]]:
        """One commit of ``batches``: their results (None for the waiting ones) and the waiting ones' indexes."""
        for _attempt in range(self._max_attempts):
            self.catch_up()  # before writing files
            results, planned, waiting = self._plan(batches)
            if not planned:
                return results, waiting
            try:
                version, offsets = self._commit(planned)
            except _InDoubt as doubt:
                for item, offs in zip(planned, doubt.offsets, strict=True):
                    results[item.index] = item.result(offs, doubt.version)
                answer = None if waiting else [r for r in results if r is not None]
                self._unsettled = _Unsettled(doubt.version, doubt.commit_id, list(batches), answer)
                raise KafkaStorageError(
                    f"commit {doubt.version} to topic '{self.topic}' may or may not have landed: {doubt.reason}; "
                    "retry the same batches to learn which"
                ) from None
            except Replan as replan:
                if replan.full:
                    self._log.refresh()
                # Racing writers that retry in lockstep keep colliding; a short random pause breaks the tie.
                time.sleep(random.uniform(0, min(0.01, 0.0005 * 2**_attempt)))
                continue
            except (KafkaStorageError, OSError) as e:
                self._log.refresh()
                if isinstance(e, KafkaStorageError):
                    raise
                raise KafkaStorageError(f"commit to topic '{self.topic}' failed: {e}") from e
            for item, offs in zip(planned, offsets, strict=True):
                results[item.index] = item.result(offs, version)
            return results, waiting
        raise ConcurrentTransactionsError(
            f"topic '{self.topic}': lost the commit race {self._max_attempts} times in a row"
        )

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
        self.catch_up()  # the commit is in the log: fold it in like any other
        same = len(batches) == len(unsettled.batches) and all(
            a is b for a, b in zip(batches, unsettled.batches, strict=True)
        )
        return unsettled.results if same else None

    def _plan(
        self, batches: Sequence[ProducerBatch]
    ) -> tuple[list[AppendResult | LogstoreError | None], list[_Planned], list[int]]:
        results: list[AppendResult | LogstoreError | None] = [None] * len(batches)
        planned: list[_Planned] = []
        pending: dict[tuple[str, int], int] = {}
        waiting: list[int] = []
        refreshed = False
        log = self._log
        for i, batch in enumerate(batches):
            try:
                records = validator.as_input(batch.records)
                if len(records) and pc.max(records["partition"]).as_py() >= log.num_partitions and not refreshed:
                    log.refresh()  # partitions may have been added since we last looked
                    refreshed = True
                validator.check_partitions(records, log.num_partitions, self.topic)
                if not self._foreign_ok:
                    self._epochs.check_leading(records)
                if not batch.validated:
                    self.check_records(records)
                item = _plan_one(self._producers, i, batch, records, pending)
                if item is None:
                    waiting.append(i)
                elif len(item.records):
                    planned.append(item)
                else:  # nothing to write: a retry on every partition it touches, or an empty batch
                    results[i] = item.result(pa.array([], pa.int64()), log.version)
            except LogstoreError as e:
                results[i] = e
        return results, planned, waiting

    def _commit(self, planned: list[_Planned]) -> tuple[int, list[pa.Array]]:
        now_ms = self._clock_ms()
        table = pa.concat_tables([p.records for p in planned]) if len(planned) > 1 else planned[0].records
        parts = table["partition"].combine_chunks().to_numpy() if len(table) else np.zeros(0, np.int32)
        log = self._log
        base = np.asarray(log.hw, np.int64)
        offsets = validator.offsets_from(parts, base)
        counts = (
            np.bincount(parts, minlength=log.num_partitions) if len(parts) else np.zeros(log.num_partitions, np.int64)
        )
        new_hw = base + counts
        touched = [int(p) for p in np.nonzero(counts)[0]]

        out = validator.stamp(table, offsets, now_ms, log.config)

        txns = self._epochs.commit_txns(touched)
        txns += [(_delta.app_hw(p), int(new_hw[p])) for p in touched]
        landed: list[tuple[str, int, dict[int, tuple[int, int]]]] = []
        per_batch: list[pa.Array] = []
        start = 0
        for item in planned:
            n = len(item.records)
            batch_offsets = offsets[start : start + n]
            per_batch.append(pa.array(batch_offsets, pa.int64()))
            if item.producer_id is not None:
                assert item.sequence is not None
                firsts = validator.first_offsets(parts[start : start + n], batch_offsets)
                landed.append((item.producer_id, item.sequence, firsts))
            start += n
        # Sequences of one producer increase through a commit: the last one on each partition is its highest.
        sequences = {(pid, p): seq for pid, seq, firsts in landed for p in firsts}
        highest = {pid: seq for pid, seq, _ in landed}
        txns += [(_delta.app_sequence(p, pid), seq) for (pid, p), seq in sequences.items()]
        txns += [(_delta.app_producer_max(pid), seq) for pid, seq in highest.items()]
        metadata = [
            {"id": pid, "seq": seq, "first": {str(p): list(v) for p, v in firsts.items()}}
            for pid, seq, firsts in landed
        ]
        # The topic's compression.type as the writer last read it: a `topics alter` is a commit it reads first.
        codec = parquet_codec(
            self._log.config.compression_type, self._node_compression, [p.compression for p in planned]
        )
        files = self._appender.write_files(out, codec)
        touching = (set(touched), set(highest)) if self._epochs.cluster else None
        try:
            log.commit(files, txns, {_delta.PRODUCERS_METADATA: metadata} if metadata else None, touching)
        except CommitInDoubt as e:
            raise _InDoubt(e.version, e.commit_id, str(e), per_batch) from e

        # Only this commit's partitions: a race lost to commits elsewhere moved the others' meanwhile.
        for p in touched:
            log.hw[p] = int(new_hw[p])
        for pid, seq, firsts in landed:
            self._producers.committed(pid, seq, firsts)
        return log.version, per_batch

    def _claim(self, *, chosen: bool) -> None:
        """Claim this writer's table-wide epoch under the writer lock (a holder first commits what it promised)."""
        with self._lock.exclusive():
            self._log.claim_epoch(chosen=chosen, max_attempts=self._max_attempts)


def _plan_one(
    producers: ProducerStateManager,
    index: int,
    batch: ProducerBatch,
    records: pa.Table,
    pending: dict[tuple[str, int], int],
) -> _Planned | None:
    """What of a checked batch to write: all of it, or for an idempotent one the partitions where it is new.

    None: the batch waits for an earlier one of the same commit (see :class:`~logstore.log.producer_state.Checked`).
    ``pending`` gains the partitions where it is new.

    Raises:
        LogstoreError: its sequence is refused (out of order, or a retry with different records).
    """
    parts = records["partition"].combine_chunks()
    if batch.producer_id is None:
        return _Planned(index, records, parts, compression=batch.compression)
    part_numbers = parts.to_numpy(zero_copy_only=False)
    checked = producers.check(batch.producer_id, batch.sequence, counts_of(part_numbers), pending)
    if checked.waiting:
        return None
    assert batch.sequence is not None
    for p in checked.new:
        pending[(batch.producer_id, p)] = batch.sequence
    item = _Planned(index, records, parts, batch.producer_id, batch.sequence, checked.retried, batch.compression)
    if checked.retried:
        item.records = records.filter(pa.array(np.isin(part_numbers, checked.new)))
    return item


class _InDoubt(Exception):
    """The commit of planned batches may or may not have landed at ``version``."""

    def __init__(self, version: int, commit_id: str, reason: str, offsets: list[pa.Array]) -> None:
        super().__init__(reason)
        self.version = version
        self.commit_id = commit_id
        self.reason = reason
        self.offsets = offsets
