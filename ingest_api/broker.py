"""The ingest node: per-topic accumulators, one committer thread per topic, acks.

A produce request becomes a :class:`~logstore.structs.ProducerBatch` in its
topic's :class:`TopicPipeline`. The pipeline's committer thread takes every
batch pending when it wakes (after ``linger.ms`` or once ``batch.size`` bytes
wait) and commits them together with the core's
:class:`~logstore.writer.TopicWriter` — many requests per Delta commit, in
submit order.

Acknowledgement by ``acks``:

* ``0`` — once the batch is queued in memory; lost if the process dies first.
* ``1`` — once the batch is fsynced in the node's write-ahead log (WAL). The
  answer carries offsets *promised* at acceptance when the node can make them
  final (below); otherwise the request waits for its commit and answers with
  the committed offsets. Either way every offset in an answer is final.
* ``all`` — once the Delta commit holding the batch is durable.

When an acks=1 promise is final. A batch is promised offsets only while all
of these hold, checked under the pipeline's lock at acceptance:

1. *The committer holds the table's writer lock and has caught up with the
   table since taking it* (:meth:`TopicWriter.hold`, :meth:`catch_up`). Every
   writer on this host commits only under that lock — cooperative ones (the
   Spark sink, ``logstore produce --root``) and epoch-claiming ones alike — so
   nothing but this pipeline moves the offsets while it holds it. A writer
   that wants the lock announces itself (``others_waiting``); the pipeline then
   stops promising, commits every batch it promised, and only then lets go.
2. *Every batch ahead of it in the pipeline is committed or is itself a
   promised acks=1 batch* — and so in the WAL ahead of it, because frames are
   numbered and written in submit order and a frame is fsynced only with all
   frames before it. A batch of acks=0/all, a retry, a producer new to this
   node, or anything whose outcome only the writer knows makes the batches
   behind it wait for their commit instead.
3. *No frame ahead of it failed to be logged* while it is uncommitted: the WAL
   fails later frames until such a frame is committed.

After a crash the WAL is replayed in frame order through the idempotent
writer before this node commits anything else, and (by 1) no other writer on
this host committed in between while the node held the lock at the crash —
so replay puts every promised record at its promised offset. Commits by
writers on other hosts, which do not share the lock, are outside the promise.

No exception ends a committer thread: a commit that raises fails the
requests of that commit (each batch alone, so only the one that cannot be
committed fails) and the pipeline goes on. Memory is bounded by
``buffer.memory``: bytes accepted but not yet committed; past it requests are
refused with ``THROTTLING_QUOTA_EXCEEDED`` (HTTP 429).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa

from ingest_api.metrics import Metrics
from ingest_api.parse import ParsedRecords
from logstore import promises
from logstore.config import LogstoreConfig
from logstore.errors import (
    FencedLeaderEpochError,
    LogstoreError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    RecordListTooLargeError,
    ThrottlingQuotaExceededError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from logstore.lru import LruDict
from logstore.partitioner import Partitioner
from logstore.reader import TopicReader
from logstore.schema import INPUT_SCHEMA
from logstore.store import LogStore
from logstore.structs import AppendResult, FetchResult, ProducerBatch
from logstore.wal import DirectoryLock, WriteAheadLog
from logstore.writer import TopicWriter, offsets_from

__all__ = ["Acks", "Broker", "TopicPipeline", "wal_dir_of"]

log = logging.getLogger("logstore.ingest")

Acks = Literal["0", "1", "all"]

_IDLE_TICK_S = 0.05
"""How often a committer that holds the writer lock (idle, or lingering) looks for a waiting writer."""
_HAND_OVER_S = 1.0
"""How long a committer that let go of the writer lock waits for an announced writer to take it."""


class _BufferPool:
    """Bytes accepted but not committed, across all topics of the node."""

    def __init__(self, limit: int, metrics: Metrics) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()
        self._metrics = metrics

    def reserve(self, n: int) -> None:
        with self._lock:
            if self.used + n > self.limit and self.used > 0:
                raise ThrottlingQuotaExceededError(
                    f"buffer.memory={self.limit} bytes is full ({self.used} pending); retry shortly"
                )
            self.used += n
            self._metrics.buffer_bytes.set(self.used)

    def release(self, n: int) -> None:
        with self._lock:
            self.used -= n
            self._metrics.buffer_bytes.set(self.used)


@dataclass
class _Pending:
    batch: ProducerBatch
    nbytes: int
    future: Future[AppendResult]
    predicted: bool
    """Offsets were promised from the LEO at submit time (commit order = submit order)."""
    promised: np.ndarray | None = None
    frame: int | None = None
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass(frozen=True)
class Submitted:
    """What the route waits for, by acks level."""

    committed: Future[AppendResult]
    logged: Future[None] | None
    """acks=1: done once the write-ahead log holds the batch."""
    promised: np.ndarray | None
    """acks=1 fast path: offsets assigned at acceptance."""
    partitions: pa.Array


class TopicPipeline:
    """Accumulator, write-ahead log and committer thread of one topic on this node."""

    def __init__(self, broker: Broker, topic: str) -> None:
        self.topic = topic
        self._broker = broker
        self._config = broker.config
        self.writer = TopicWriter(broker.store.catalog, topic)
        self._partitioner = Partitioner()
        self._cond = threading.Condition()
        self._pending: list[_Pending] = []
        self._pending_bytes = 0
        self._closing = False
        self._dead: LogstoreError | None = None
        self._num_partitions = self.writer.num_partitions
        self._topic_config = self.writer.config
        self._leo = np.zeros(self._num_partitions, np.int64)
        # bounded: a producer dropped from it is new to this node again, and the writer decides its batches
        self._last_seq: LruDict[str, int] = LruDict(self._config.producer_state_max_entries)
        self._uncertain = 0
        self._promising = False
        """Acks=1 batches may be promised offsets: the writer lock is held and the writer caught up."""
        self._hold = contextlib.ExitStack()
        self._held = False
        self._wal_pid = promises.wal_producer_id(broker.node_id)
        self._table_root = broker.store.catalog.topic_path(topic)
        self.wal = WriteAheadLog(os.path.join(broker.wal_dir, topic))
        self._acquire()
        try:
            self._replay()
        except BaseException:
            self._release()
            raise
        with self._cond:
            self._leo = self._writer_hw()
        self._wal_seq = self._next_wal_seq()
        self._thread = threading.Thread(target=self._run, name=f"committer-{topic}", daemon=True)
        self._thread.start()

    # -- accepting --------------------------------------------------------------

    def submit(self, parsed: ParsedRecords, acks: Acks) -> Submitted:
        """Queue a produce request; see :class:`Submitted` for what to wait on.

        Raises:
            UnknownTopicOrPartitionError, MessageTooLargeError, InvalidTimestampError,
            OutOfOrderSequenceNumberError, ThrottlingQuotaExceededError,
            NotLeaderOrFollowerError: the request is refused whole.
        """
        if self._dead is not None:
            raise NotLeaderOrFollowerError(f"this node no longer commits topic '{self.topic}': {self._dead.message}")
        explicit = parsed.partitions
        if any(p is not None and p >= self._num_partitions for p in explicit):
            self._refresh_partitions()
        num_partitions = self._num_partitions
        n = len(parsed)
        if parsed.keys.null_count == n and all(p is None for p in explicit):
            if parsed.producer_id is not None:
                sticky = self._partitioner.assign(
                    self.topic,
                    [None],
                    [None],
                    num_partitions,
                    producer_id=parsed.producer_id,
                    sequence=parsed.sequence,
                )[0]
            else:
                sticky = self._partitioner.assign(self.topic, [None], [None], num_partitions)[0]
            parts = pa.repeat(sticky, n)
        else:
            parts = self._partitioner.assign(
                self.topic,
                parsed.keys,
                explicit,
                num_partitions,
                producer_id=parsed.producer_id,
                sequence=parsed.sequence,
            )
        records = pa.Table.from_arrays(
            [parts, parsed.timestamps, parsed.keys, parsed.values, parsed.headers], schema=INPUT_SCHEMA
        )
        nbytes = self.writer.check_records(records)
        counts = np.bincount(parts.to_numpy(zero_copy_only=False), minlength=num_partitions).astype(np.int64)
        self._broker.buffer.reserve(nbytes)
        try:
            return self._enqueue(records, parsed, acks, nbytes, counts, parts)
        except BaseException:
            self._broker.buffer.release(nbytes)
            raise

    def _enqueue(
        self, records: pa.Table, parsed: ParsedRecords, acks: Acks, nbytes: int, counts: np.ndarray, parts: pa.Array
    ) -> Submitted:
        pid, seq = parsed.producer_id, parsed.sequence
        with self._cond:
            if self._closing:
                raise NotLeaderOrFollowerError(f"this node is shutting down; retry topic '{self.topic}' elsewhere")
            # Only an acks=1 batch is in the WAL, so only it can be replayed at a promised offset.
            predicted = acks == "1" and self._promising
            if pid is not None:
                assert seq is not None
                last = self._last_seq.get(pid)
                if last is None or seq <= last:
                    predicted = False  # new to this node or a retry: the writer decides, after the commit
                elif seq > last + 1:
                    raise OutOfOrderSequenceNumberError(
                        f"producer '{pid}' sent sequence {seq} to topic '{self.topic}' "
                        f"but the next expected is {last + 1}"
                    )
                else:
                    self._last_seq[pid] = seq
            if self._uncertain:
                # A batch ahead whose offsets were not promised is pending or committing: it may
                # take offsets first, and is not in the WAL to be replayed ahead of this one.
                predicted = False
            if not predicted:
                self._uncertain += 1
            if acks == "1" and pid is None:
                pid, seq = self._wal_pid, self._wal_seq
                self._wal_seq += 1
            item = _Pending(
                ProducerBatch(records, pid, seq, validated=True), nbytes, Future(), predicted, counts=counts
            )
            if predicted:
                self._leo = _grown(self._leo, len(counts))
                item.promised = offsets_from(parts.to_numpy(zero_copy_only=False), self._leo)
                self._leo[: len(counts)] += counts
            logged = None
            if acks == "1":
                item.frame, logged = self.wal.append({"producer_id": pid, "sequence": seq}, records)
                how = "promised" if predicted else "committed"
                self._broker.metrics.acks1_batches.labels(self.topic, how).inc()
            self._pending.append(item)
            self._pending_bytes += nbytes
            self._cond.notify()
        return Submitted(item.future, logged, item.promised, parts)

    # -- committing -------------------------------------------------------------

    def _run(self) -> None:
        """The committer thread: commit what is pending, hand the writer lock over when asked."""
        failures = 0
        try:
            while True:
                try:
                    items = self._take()
                    if items is None:
                        return
                    if items:
                        self._commit(items)
                    self._hand_over_if_asked(idle=not items)
                    if not self._held and self._dead is None and not self._closing:
                        self._acquire()  # after a hand-over: take turns again, so acks=1 can be promised
                    failures = 0
                except FencedLeaderEpochError as e:
                    self._die(e, [])
                except Exception:  # a bug or a storage fault must not stop the topic: log it, back off, go on
                    failures += 1
                    log.exception("topic %s: committer step failed (%d in a row)", self.topic, failures)
                    time.sleep(min(5.0, 0.05 * 2**failures))
        finally:
            self._release()

    def _take(self) -> list[_Pending] | None:
        """The next group to commit; [] after an idle tick; None once closed."""
        linger = self._config.linger_ms / 1000
        with self._cond:
            while not self._pending and not self._closing:
                if self._dead is not None:
                    self._cond.wait()
                    continue
                self._cond.wait(_IDLE_TICK_S)
                if not self._pending:
                    return []
            if not self._pending:
                return None
            now = time.monotonic()
            deadline, probe = now + linger, now + _IDLE_TICK_S
            while self._pending_bytes < self._config.batch_size and not self._closing:
                now = time.monotonic()
                if now >= deadline:
                    break
                if now >= probe:  # every tick, not on every submit's wake-up
                    probe = now + _IDLE_TICK_S
                    if self._held and self.writer.others_waiting():
                        break  # a writer waits for its turn: commit now, then hand over
                self._cond.wait(min(deadline, probe) - now)
            items, self._pending = self._pending, []
            self._pending_bytes = 0
            return items

    def _acquire(self) -> None:
        """Take the writer lock and catch up; from then on acks=1 batches may be promised offsets."""
        if self._held:
            return
        # A writer that announced itself is let through before this node takes the lock again.
        deadline = time.monotonic() + _HAND_OVER_S
        while time.monotonic() < deadline and self.writer.others_waiting():
            time.sleep(0.001)
        self._hold.enter_context(self.writer.hold())
        self._held = True
        try:
            self.writer.catch_up()
            # Another node that died holding promises on this topic: its records go first.
            promises.settle(self.writer, self._table_root, own_node=self._broker.node_id)
            # Durably before the first promise: should this node die now, the next writer
            # replays its WAL before committing anything.
            promises.write_marker(self._table_root, self._broker.node_id, self._broker.wal_dir)
        except BaseException:
            self._release()
            raise
        with self._cond:
            assert not any(i.predicted for i in self._pending), "promises are only made under the lock"
            self._sync_partitions()
            self._leo = self._writer_hw()
            self._promising = True

    def _release(self) -> None:
        """Stop promising and let go of the writer lock (every promised batch must be committed)."""
        with self._cond:
            self._promising = False
        if self._held:
            self._held = False
            try:
                promises.remove_marker(self._table_root, self._broker.node_id)
            except OSError:
                log.exception("topic %s: cannot remove this node's promise marker", self.topic)
            self._hold.close()
            self._hold = contextlib.ExitStack()

    def _hand_over_if_asked(self, *, idle: bool) -> None:
        if not self._held:
            return
        if not self.writer.others_waiting():
            if idle:
                self._catch_up_idle()
            return
        with self._cond:
            self._promising = False
            rest, self._pending = self._pending, []
            self._pending_bytes = 0
        if rest:  # holds every batch promised offsets: they must land before anyone else commits
            self._commit(rest)
        self._release()

    def _catch_up_idle(self) -> None:
        """Notice commits by others (a raised partition count) while no produce arrives."""
        try:
            self.writer.catch_up()
        except FencedLeaderEpochError as e:
            self._die(e, [])
            return
        with self._cond:
            self._sync_partitions()
            self._leo = self._writer_hw() + self._promised_pending()

    def _commit(self, items: list[_Pending]) -> None:
        """Commit ``items`` in order and answer them; never raises."""
        try:
            self._acquire()
            results = self._append(items)
        except FencedLeaderEpochError as e:
            self._die(e, items)
            return
        except Exception:  # not a LogstoreError: a bug or a poisoned batch; find it, keep the others
            log.exception("topic %s: commit of %d batches failed unexpectedly", self.topic, len(items))
            self._append_one_by_one(items)
            return
        self._finish(items, results)

    def _append(self, items: list[_Pending]) -> list[AppendResult | LogstoreError]:
        attempt = 0
        while True:
            started = time.perf_counter()
            try:
                results = self.writer.append_held([i.batch for i in items])
            except FencedLeaderEpochError:
                raise
            except LogstoreError as e:
                attempt += 1
                log.warning("commit to topic %s failed (attempt %d): %s", self.topic, attempt, e)
                if self._closing and attempt >= 5:
                    return [e] * len(items)
                time.sleep(min(1.0, 0.01 * 2**attempt))
                continue
            metrics = self._broker.metrics
            metrics.commit_latency.labels(self.topic).observe(time.perf_counter() - started)
            metrics.batch_records.observe(sum(len(i.batch.records) for i in items))
            return results

    def _append_one_by_one(self, items: list[_Pending]) -> None:
        """After an unexpected error: commit each batch alone, so only a batch that cannot be committed fails."""
        results: list[AppendResult | LogstoreError] = []
        for item in items:
            try:
                self._acquire()
                results.extend(self._append([item]))
            except FencedLeaderEpochError as e:
                self._finish(items[: len(results)], results)
                self._die(e, items[len(results) :])
                return
            except Exception as e:
                log.exception(
                    "topic %s: a batch of %d records cannot be committed", self.topic, len(item.batch.records)
                )
                results.append(UnknownServerError(f"topic '{self.topic}': the batch could not be committed: {e!r}"))
                self._skip_sequence(item.batch)
        self._finish(items, results)

    def _skip_sequence(self, batch: ProducerBatch) -> None:
        """Commit an empty batch in place of a failed idempotent one, so its producer's next sequence fits."""
        if batch.producer_id is None or not self._held:
            return
        empty = ProducerBatch(batch.records.slice(0, 0), batch.producer_id, batch.sequence, validated=True)
        try:
            self.writer.append_held([empty])
        except Exception:
            log.exception("topic %s: cannot skip sequence %s of %s", self.topic, batch.sequence, batch.producer_id)

    def _finish(self, items: list[_Pending], results: list[AppendResult | LogstoreError]) -> None:
        """Answer committed (or failed) items, release their bytes, move the LEO and the WAL on."""
        metrics = self._broker.metrics
        last_frame = -1
        for item, result in zip(items, results, strict=True):
            self._broker.buffer.release(item.nbytes)
            if item.frame is not None:
                last_frame = max(last_frame, item.frame)
            if isinstance(result, AppendResult):
                if item.promised is not None and not np.array_equal(result.offsets.to_numpy(), item.promised):
                    log.error("topic %s: records committed at other offsets than promised to acks=1", self.topic)
                pid, seq = item.batch.producer_id, item.batch.sequence
                if pid is not None and seq is not None and pid != self._wal_pid:
                    with self._cond:
                        if self._last_seq.get(pid, -1) < seq:
                            self._last_seq[pid] = seq
                metrics.records_in.labels(self.topic).inc(len(item.batch.records))
                metrics.bytes_in.labels(self.topic).inc(item.nbytes)
                item.future.set_result(result)
            else:
                if item.promised is not None:
                    log.error("topic %s: a batch promised offsets to acks=1 failed: %s", self.topic, result)
                item.future.set_exception(result)
        with self._cond:
            self._uncertain -= sum(1 for i in items if not i.predicted)
            self._sync_partitions()
            self._leo = self._writer_hw() + self._promised_pending()
        for p in range(self.writer.num_partitions):
            metrics.high_watermark.labels(self.topic, str(p)).set(self.writer.high_watermark(p))
        if last_frame >= 0:
            self.wal.committed_through(last_frame)
        self._broker.notify_commit(self.topic)

    def _writer_hw(self) -> np.ndarray:
        hw = np.array([self.writer.high_watermark(p) for p in range(self.writer.num_partitions)], np.int64)
        return _grown(hw, self._num_partitions)

    def _promised_pending(self) -> np.ndarray:
        """Records per partition of the pending batches that were promised offsets (caller holds the lock)."""
        out = np.zeros(self._num_partitions, np.int64)
        for item in self._pending:
            if item.predicted:
                out = _grown(out, len(item.counts))
                out[: len(item.counts)] += item.counts
        return out

    def _sync_partitions(self) -> None:
        """Take a partition count the writer has seen (another process may have raised it); caller holds the lock."""
        if self.writer.num_partitions > self._num_partitions:
            self._num_partitions = self.writer.num_partitions
            self._topic_config = self.writer.config

    def _die(self, error: LogstoreError, items: list[_Pending]) -> None:
        self._dead = error
        with self._cond:
            rest, self._pending = self._pending, []
            self._pending_bytes = 0
        self._release()
        failure = NotLeaderOrFollowerError(f"topic '{self.topic}': {error.message}")
        self._finish(items + rest, [failure] * len(items + rest))

    def _refresh_partitions(self) -> None:
        count, config = self._broker.store.catalog.topic_config(self.topic)
        with self._cond:
            self._num_partitions = max(self._num_partitions, count)
            self._leo = _grown(self._leo, self._num_partitions)
            self._topic_config = config

    def reconfigure(self) -> None:
        """Pick up a changed partition count or topic config (after PATCH)."""
        self._refresh_partitions()

    # -- recovery ---------------------------------------------------------------

    def _replay(self) -> None:
        """Commit the WAL's frames left by a previous run, in frame order, before anything else (lock held).

        A frame that cannot be committed is skipped — logged and counted in
        ``logstore_wal_frames_skipped`` — rather than stopping the node from starting.
        """
        frames = self.wal.recovered()
        if not frames:
            return
        committed = self.writer.producer_sequence(self._wal_pid)
        batches = []
        for f in frames:
            pid, seq = f.header["producer_id"], f.header["sequence"]
            if pid == self._wal_pid and committed is not None and seq <= committed:
                continue  # already in the table
            batches.append(ProducerBatch(f.records, pid, seq))
        replayed = 0
        for start in range(0, len(batches), 1000):
            chunk = batches[start : start + 1000]
            try:
                results = self.writer.append_held(chunk)
            except LogstoreError:
                raise  # the table cannot be written now: keep every frame and let start-up fail
            except Exception:  # a frame the writer cannot take at all
                log.exception("topic %s: replaying %d frames failed; retrying one by one", self.topic, len(chunk))
                results = [UnknownServerError("replay failed")]
            if not all(isinstance(r, AppendResult) for r in results):
                # One frame at a time, so a bad frame takes neither its group nor the sequences
                # behind it down; frames of the chunk that did land answer as duplicates.
                results = [self._replay_one(b) for b in chunk]
            for r in results:
                if isinstance(r, AppendResult):
                    replayed += 0 if r.duplicate else len(r.offsets)
        log.info("topic %s: replayed %d records from the write-ahead log", self.topic, replayed)
        self.wal.discard_recovered()

    def _replay_one(self, batch: ProducerBatch) -> AppendResult | LogstoreError:
        """Commit one frame at replay; a frame that cannot be committed is skipped and counted."""
        try:
            result = self.writer.append_held([batch])[0]
        except LogstoreError:
            raise
        except Exception as e:
            result = UnknownServerError(f"cannot commit: {e!r}")
        if not isinstance(result, AppendResult):
            self._skipped_frame(batch, result)
            self._skip_sequence(batch)
        return result

    def _skipped_frame(self, batch: ProducerBatch, error: LogstoreError) -> None:
        log.error(
            "topic %s: skipped a write-ahead log frame of %d records (producer %s, sequence %s): %s",
            self.topic,
            len(batch.records),
            batch.producer_id,
            batch.sequence,
            error,
        )
        self._broker.metrics.wal_frames_skipped.labels(self.topic).inc()

    def _next_wal_seq(self) -> int:
        last = self.writer.producer_sequence(self._wal_pid)
        return 0 if last is None else last + 1

    def close(self) -> None:
        """Commit what is pending (drain), then stop the committer and the log."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        self.wal.close()
        self.writer.close()


def _grown(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` zero-padded to at least ``n`` entries (partitions added since it was sized)."""
    return a if len(a) >= n else np.concatenate([a, np.zeros(n - len(a), np.int64)])


class Broker:
    """The ingest node's state: topic pipelines, buffer pool, metrics, commit signals."""

    def __init__(self, config: LogstoreConfig, metrics: Metrics | None = None) -> None:
        """Open the node over ``config``'s root, taking its WAL directory.

        Raises:
            KafkaStorageError: another live process holds the WAL directory (the message names it).
        """
        self.config = config
        self.store = LogStore(config)
        self.metrics = metrics or Metrics()
        self.buffer = _BufferPool(config.buffer_memory, self.metrics)
        self.wal_dir = wal_dir_of(config)
        os.makedirs(self.wal_dir, exist_ok=True)
        # A second node on this WAL (same root, wal.dir, node id) would replay and delete segments
        # the first is still appending to.
        self._node_lock = DirectoryLock(self.wal_dir, "the write-ahead log directory")
        self.node_id = _node_id(self.wal_dir)
        self._pipelines: dict[str, TopicPipeline] = {}
        self._lock = threading.Lock()
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._readers: dict[str, tuple[threading.Lock, TopicReader]] = {}
        self.ready = False

    def start(self) -> None:
        """Replay every topic's write-ahead log left by a previous run, then accept requests."""
        for name in sorted(os.listdir(self.wal_dir)):
            path = os.path.join(self.wal_dir, name)
            has_frames = os.path.isdir(path) and any(n.endswith(".wal") for n in os.listdir(path))
            if has_frames and self.store.catalog.exists(name):
                self.pipeline(name)
        self.ready = True

    def pipeline(self, topic: str) -> TopicPipeline:
        """The topic's pipeline, opened on first use (claiming the topic's next epoch).

        Raises:
            UnknownTopicOrPartitionError: no such topic and auto-creation is off.
        """
        p = self._pipelines.get(topic)
        if p is not None:
            return p
        with self._lock:
            p = self._pipelines.get(topic)
            if p is None:
                if not self.store.catalog.exists(topic):
                    if not self.config.auto_create_topics_enable:
                        raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
                    self.store.create_topic(topic, self.config.num_partitions)
                p = TopicPipeline(self, topic)
                self._pipelines[topic] = p
            return p

    def fetch(self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int) -> FetchResult:
        """Read a partition slice with this node's warm reader of ``topic`` (thread-safe)."""
        with self._lock:
            entry = self._readers.get(topic)
            if entry is None:
                entry = self._readers[topic] = (threading.Lock(), self.store.reader(topic))
        lock, reader = entry
        with lock:
            try:
                return reader.fetch(partition, offset, max_records=max_records, max_bytes=max_bytes)
            except UnknownTopicOrPartitionError:
                with self._lock:
                    self._readers.pop(topic, None)  # deleted, or recreated under the same name
                raise

    def check_request_size(self, size: int) -> None:
        if size > self.config.max_request_size:
            raise RecordListTooLargeError(
                f"request of {size} bytes exceeds max.request.size={self.config.max_request_size}"
            )

    def forget(self, topic: str) -> None:
        """Close a topic's pipeline (before the topic is deleted)."""
        with self._lock:
            p = self._pipelines.pop(topic, None)
            self._readers.pop(topic, None)
        if p is not None:
            p.close()

    def reconfigure(self, topic: str) -> None:
        p = self._pipelines.get(topic)
        if p is not None:
            p.reconfigure()

    # -- long-poll signalling ---------------------------------------------------

    def notify_commit(self, topic: str) -> None:
        for loop, event in list(self._waiters.get(topic, ())):
            loop.call_soon_threadsafe(event.set)

    async def wait_for_commit(self, topic: str, timeout_s: float) -> None:
        """Return after the next commit to ``topic`` on this node, or after ``timeout_s``."""
        event = asyncio.Event()
        key = (asyncio.get_running_loop(), event)
        self._waiters.setdefault(topic, set()).add(key)
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            pass
        finally:
            self._waiters[topic].discard(key)

    def close(self) -> None:
        """Drain: commit everything pending on every topic, then stop."""
        self.ready = False
        with self._lock:
            pipelines, self._pipelines = list(self._pipelines.values()), {}
        for p in pipelines:
            p.close()
        self._node_lock.release()


def wal_dir_of(config: LogstoreConfig) -> str:
    """The node's write-ahead log directory: ``wal.dir``, or ``<logstore.root>/_wal``."""
    return os.path.abspath(config.wal_dir or os.path.join(config.root, "_wal"))


def _node_id(wal_dir: str) -> str:
    path = os.path.join(wal_dir, "node.id")
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        node = uuid.uuid4().hex[:12]
        with open(path, "w") as f:
            f.write(node)
            f.flush()
            os.fsync(f.fileno())
        return node
