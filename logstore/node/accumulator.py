"""Acceptance of produce requests: the buffer pool, the pending batches of a topic, and acks=1 promises.

A produce request becomes a :class:`~logstore.structs.ProducerBatch` queued in
its topic's :class:`Accumulator`, in submit order; the topic's committer
(:mod:`logstore.node.committer`) takes every pending batch at once and commits
them together. The accumulator wakes the committer (:meth:`Accumulator.attach`)
when a group is due: ``linger.ms`` after its first batch was queued, or at once
when ``batch.size`` bytes wait.

Acknowledgement by ``acks``:

* ``0`` — once the batch is queued in memory; lost if the process dies first.
* ``1`` — once the batch is fsynced in the node's write-ahead log (WAL). The
  answer carries offsets *promised* at acceptance when the node can make them
  final (below); otherwise the request waits for its commit and answers with
  the committed offsets. Either way every offset in an answer is final.
* ``all`` — once the Delta commit holding the batch is durable.

When an acks=1 promise is final. A batch is promised offsets only while all
of these hold, checked under the accumulator's lock at acceptance:

1. *The committer holds the table's writer lock and has caught up with the
   table since taking it* — the committer says so with :meth:`Accumulator.start_promising`
   and takes it back before it lets go (:mod:`logstore.node.committer` states why
   that makes this node the only one moving the offsets).
2. *Every batch ahead of it in the pipeline is committed or is itself a
   promised acks=1 batch* — and so in the WAL ahead of it, because frames are
   numbered and written in submit order and a frame is fsynced only with all
   frames before it. A batch of acks=0/all, a retry, a producer new to this
   node on one of its partitions (sequences are checked per partition), or
   anything whose outcome only the writer knows makes the batches behind it
   wait for their commit instead.
3. *No frame ahead of it failed to be logged* while it is uncommitted: the WAL
   fails later frames until such a frame is committed.

Memory is bounded by ``buffer.memory``: bytes accepted but not yet committed
(the Arrow buffers the records hold, so per-record overhead counts too),
across all topics of the node; past it requests are refused with
``THROTTLING_QUOTA_EXCEEDED`` (HTTP 429).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logstore.common.lru import LruDict
from logstore.common.workers import SerialTask
from logstore.config import LogstoreConfig
from logstore.errors import (
    LogstoreError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    ThrottlingQuotaExceededError,
)
from logstore.log import promises
from logstore.log.catalog import Catalog
from logstore.log.partitioner import Partitioner
from logstore.log.schema import INPUT_SCHEMA
from logstore.log.validator import offsets_from
from logstore.log.wal import WriteAheadLog
from logstore.log.writer import TopicWriter
from logstore.node.metrics import Metrics
from logstore.structs import AppendResult, ProducerBatch
from logstore.wire.json_produce import ParsedRecords

__all__ = ["IDLE_TICK_S", "Accumulator", "Acks", "BufferPool", "Pending", "Submitted"]

Acks = Literal["0", "1", "all"]

IDLE_TICK_S = 0.05
"""How often a committer that holds the writer lock (idle, or lingering) looks for a waiting writer at first;
an idle one looks less often the longer it stays idle (see :mod:`logstore.node.committer`)."""


class BufferPool:
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
class Pending:
    """A batch accepted and not yet answered by its commit."""

    batch: ProducerBatch
    nbytes: int
    future: Future[AppendResult]
    predicted: bool
    """Offsets were promised from the LEO at submit time (commit order = submit order)."""
    promised: np.ndarray | None = None
    frame: int | None = None
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    times: StageTimes = field(default_factory=lambda: StageTimes())


@dataclass
class StageTimes:
    """``time.perf_counter()`` seconds at a produce request's steps, for ``logstore_produce_stage_seconds``."""

    queued: float = 0.0
    """Accepted into the accumulator (request thread)."""
    logged: float = 0.0
    """acks=1: the write-ahead log holds the batch, fsynced (WAL thread); 0 until then."""
    answered: float = 0.0
    """The commit that holds the batch is done (committer thread); 0 until then."""

    def stamp_logged(self, _: Future[None]) -> None:
        """The WAL future's done callback; added before the route's waiter, so it runs first."""
        self.logged = time.perf_counter()


@dataclass(frozen=True)
class Submitted:
    """What the route waits for, by acks level."""

    committed: Future[AppendResult]
    logged: Future[None] | None
    """acks=1: done once the write-ahead log holds the batch."""
    promised: np.ndarray | None
    """acks=1 fast path: offsets assigned at acceptance."""
    partitions: pa.Array
    times: StageTimes
    topic: str = ""
    commit_error: Callable[[], LogstoreError | None] = lambda: None
    """Why the topic's last commit attempt failed (its committer retries it), or None."""

    async def acknowledged(self, lease_valid: Callable[[], bool], timeout_ms: int) -> tuple[list[int], list[int]]:
        """The (partitions, offsets) of the batch's records once its producer may be answered (acks 1 or all):
        promised offsets (acks=1) once its write-ahead log frame is fsynced if ``lease_valid()`` then (the
        node's acks=1 lease; always true embedded), else once committed. Every door answers produce so.

        Raises:
            RequestTimedOutError, LogstoreError: as :meth:`wait_committed`.
        """
        if self.promised is not None and self.logged is not None:
            await asyncio.wrap_future(self.logged)
            if lease_valid():
                return self.partitions.to_pylist(), self.promised.tolist()
        result = await self.wait_committed(timeout_ms)
        return result.partitions.to_pylist(), result.offsets.to_pylist()

    async def wait_committed(self, timeout_ms: int) -> AppendResult:
        """The batch's commit, awaited on the event loop for at most ``timeout_ms`` (``request.timeout.ms``).

        The committer retries a commit that meets a storage error until it
        lands, so without a bound the request would wait for ever. On timeout
        the batch stays queued: it may still be committed later (Kafka's
        contract for a request that timed out), and nothing is cancelled.

        Raises:
            RequestTimedOutError: not committed within ``timeout_ms``; names the last commit failure.
            LogstoreError: the commit failed (the batch is not in the table).
        """
        waiter = asyncio.wrap_future(self.committed)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout_ms / 1000)
        except TimeoutError:
            waiter.add_done_callback(lambda f: f.cancelled() or f.exception())  # its outcome is nobody's now
            cause = self.commit_error()
            why = f"; the last commit attempt failed: {cause.name}: {cause.message}" if cause else ""
            raise RequestTimedOutError(
                f"topic '{self.topic}': the records are not committed within request.timeout.ms={timeout_ms}"
                f"{why}; they stay queued and may still be committed"
            ) from None


class Accumulator:
    """The pending batches of one topic on this node, and the log end offsets promised from them.

    Request threads call :meth:`submit`; the topic's committer calls the
    rest. One lock guards the state both sides share.
    """

    def __init__(
        self,
        topic: str,
        writer: TopicWriter,
        wal: WriteAheadLog,
        config: LogstoreConfig,
        catalog: Catalog,
        buffer: BufferPool,
        metrics: Metrics,
        node_id: str,
    ) -> None:
        self.topic = topic
        self._writer = writer
        self._wal = wal
        self._config = config
        self._catalog = catalog
        self._buffer = buffer
        self._metrics = metrics
        self.wal_pid = promises.wal_producer_id(node_id)
        """The producer id under which this node logs (and replays) acks=1 batches that came without one."""
        self._partitioner = Partitioner()
        self._cond = threading.Condition()
        self._pending: list[Pending] = []
        self._pending_bytes = 0
        self._due = 0.0
        """``time.monotonic()`` at which the pending group is due (``linger.ms`` after its first batch)."""
        self._committer: SerialTask | None = None
        self.closing = False
        self.dead: LogstoreError | None = None
        """Set once this node may no longer commit the topic (fenced); every later request is refused."""
        self.commit_error: LogstoreError | None = None
        """Why the committer's last commit attempt failed (it retries), None once one succeeds; for timeouts."""
        self._num_partitions = writer.num_partitions
        self._leo = np.zeros(self._num_partitions, np.int64)
        # (producer, partition) → the highest sequence accepted or committed there since this node claimed
        # the partition. Bounded: an entry dropped is new to this node again, and the writer decides its batches.
        self._last_seq: LruDict[tuple[str, int], int] = LruDict(config.producer_state_max_entries)
        self._uncertain = 0
        self._promising = False
        """Acks=1 batches may be promised offsets: the writer lock is held and the writer caught up."""
        self._wal_seq = 0
        self.led: frozenset[int] | None = None
        """Cluster mode: the partitions this node leads *and has claimed* (it accepts produce for these only);
        None = embedded mode, every partition."""
        self.available = True
        """Cluster mode: false while the ZooKeeper session is suspended or lost (no produce accepted)."""
        self._in_flight = np.zeros(self._num_partitions, np.int64)
        """Records per partition accepted and not yet answered by their commit (pending or committing)."""
        self._promised_open = 0
        """Batches promised offsets (acks=1) and not answered yet, pending or committing."""

    def attach(self, committer: SerialTask) -> None:
        """Wake ``committer`` when a group is due, and on :meth:`wake`, :meth:`close` and :meth:`kill`."""
        self._committer = committer

    def open(self) -> None:
        """Start from the table as committed (after the WAL's replay): log end offsets and the WAL's next sequence."""
        with self._cond:
            self._leo = self._writer_hw()
        last = self._writer.producer_sequence(self.wal_pid)
        self._wal_seq = 0 if last is None else last + 1

    # -- accepting (request threads) ---------------------------------------------

    def submit(self, parsed: ParsedRecords, acks: Acks) -> Submitted:
        """Queue a produce request; see :class:`Submitted` for what to wait on.

        Raises:
            UnknownTopicOrPartitionError, MessageTooLargeError, InvalidTimestampError,
            ThrottlingQuotaExceededError, NotLeaderOrFollowerError: the request is refused whole
            (an idempotent sequence is checked by the writer, per partition).
        """
        if self.dead is not None:
            raise NotLeaderOrFollowerError(f"this node no longer commits topic '{self.topic}': {self.dead.message}")
        if not self.available:
            raise NotLeaderOrFollowerError(
                f"this node lost touch with ZooKeeper; retry topic '{self.topic}' shortly or at another node"
            )
        n = len(parsed)
        explicit = parsed.partitions
        named = explicit.null_count != n  # any record names its partition
        if named and pc.max(explicit).as_py() >= self._num_partitions:
            self.refresh_partitions()
        num_partitions = self._num_partitions
        if parsed.keys.null_count == n and not named:
            sticky = self._partitioner.sticky(num_partitions, producer_id=parsed.producer_id, sequence=parsed.sequence)
            parts = pa.repeat(pa.scalar(sticky, pa.int32()), n)
        else:
            parts = self._partitioner.assign(
                self.topic,
                parsed.keys,
                explicit,
                num_partitions,
                producer_id=parsed.producer_id,
                sequence=parsed.sequence,
            )
        counts = np.bincount(parts.to_numpy(zero_copy_only=False), minlength=num_partitions).astype(np.int64)
        led = self.led
        if led is not None:
            missing = set(np.flatnonzero(counts).tolist()) - led
            if missing:
                raise NotLeaderOrFollowerError(
                    f"this node does not lead partitions {sorted(missing)} of topic '{self.topic}' (yet); retry"
                )
        records = pa.Table.from_arrays(
            [parts, parsed.timestamps, parsed.keys, parsed.values, parsed.headers], schema=INPUT_SCHEMA
        )
        self._writer.check_records(records)
        # What the records hold in memory (keys, values, headers, their offsets, partitions, timestamps),
        # not only their key and value bytes: for small records that is several times more.
        nbytes = records.get_total_buffer_size()
        self._buffer.reserve(nbytes)
        try:
            return self.enqueue(records, parsed, acks, nbytes, counts, parts)
        except BaseException:
            self._buffer.release(nbytes)
            raise

    def enqueue(
        self, records: pa.Table, parsed: ParsedRecords, acks: Acks, nbytes: int, counts: np.ndarray, parts: pa.Array
    ) -> Submitted:
        """Queue checked records whose ``nbytes`` the caller reserved; decide here whether they are promised offsets."""
        pid, seq = parsed.producer_id, parsed.sequence
        with self._cond:
            if self.closing:
                raise NotLeaderOrFollowerError(f"this node is shutting down; retry topic '{self.topic}' elsewhere")
            self._check_led(counts)
            # Only an acks=1 batch is in the WAL, so only it can be replayed at a promised offset.
            predicted = acks == "1" and self._promising and self.available
            if pid is not None:
                assert seq is not None
                touched = np.flatnonzero(counts).tolist()
                lasts = [self._last_seq.get((pid, p)) for p in touched]
                if any(last is None or seq <= last for last in lasts):
                    # New to this node on a partition, a retry, or out of order: the writer decides, after the commit.
                    predicted = False
                else:
                    for p in touched:
                        self._last_seq[(pid, p)] = seq
            if self._uncertain:
                # A batch ahead whose offsets were not promised is pending or committing: it may
                # take offsets first, and is not in the WAL to be replayed ahead of this one.
                predicted = False
            if not predicted:
                self._uncertain += 1
            if acks == "1" and pid is None:
                pid, seq = self.wal_pid, self._wal_seq
                self._wal_seq += 1
            batch = ProducerBatch(records, pid, seq, validated=True, compression=parsed.compression)
            item = Pending(batch, nbytes, Future(), predicted, counts=counts)
            item.times.queued = time.perf_counter()
            if predicted:
                self._leo = grown(self._leo, len(counts))
                item.promised = offsets_from(parts.to_numpy(zero_copy_only=False), self._leo)
                self._leo[: len(counts)] += counts
            logged = None
            if acks == "1":
                item.frame, logged = self._wal.append(promises.frame_header(pid, seq, self._writer.topic_id), records)
                logged.add_done_callback(item.times.stamp_logged)
                how = "promised" if predicted else "committed"
                self._metrics.acks1_batches.labels(self.topic, how).inc()
            self._pending.append(item)
            self._pending_bytes += nbytes
            self._promised_open += int(predicted)
            self._in_flight = grown(self._in_flight, len(counts))
            self._in_flight[: len(counts)] += counts
            if len(self._pending) == 1:
                self._due = time.monotonic() + self._config.linger_ms / 1000
                # Not promising: the committer may have let go of the writer lock; it takes it (and
                # learns of a fence) at once rather than after linger.ms.
                self._wake_at(self._due if self._promising else 0.0)
            elif self._pending_bytes >= self._config.batch_size:
                self._wake_at(0.0)
        return Submitted(item.future, logged, item.promised, parts, item.times, self.topic, lambda: self.commit_error)

    # -- handing batches to the committer ----------------------------------------

    def take(self, cut_short: Callable[[], bool]) -> list[Pending] | None:
        """Every pending batch if the group is due, else []; None once closed with nothing pending.

        Due: ``batch.size`` bytes wait, ``linger.ms`` has passed since its first
        batch was queued, the topic is closing, or ``cut_short()`` says a writer
        waits for its turn (commit now, then hand over).
        """
        with self._cond:
            if not self._pending:
                return None if self.closing else []
            due = (
                self._pending_bytes >= self._config.batch_size
                or self.closing
                or time.monotonic() >= self._due
                or cut_short()
            )
            return self._take_all() if due else []

    def due_at(self) -> float | None:
        """``time.monotonic()`` at which the pending group is due; None when nothing is pending."""
        with self._cond:
            if not self._pending:
                return None
            return 0.0 if self._pending_bytes >= self._config.batch_size or self.closing else self._due

    def stop_promising(self) -> list[Pending]:
        """Promise no more offsets; return every pending batch (it holds every batch promised offsets)."""
        with self._cond:
            self._promising = False
            return self._take_all()

    def start_promising(self) -> None:
        """Promise acks=1 offsets from the table's high watermarks: the committer holds the lock, caught up."""
        with self._cond:
            assert not any(i.predicted for i in self._pending), "promises are only made under the lock"
            self._sync_partitions()
            self._leo = self._writer_hw()
            self._promising = True

    def pause_promising(self) -> None:
        """Promise no more offsets (the committer lets go of the writer lock); pending batches stay."""
        with self._cond:
            self._promising = False

    def committed_sequence(self, producer_id: str, sequence: int, partitions: list[int]) -> None:
        """Note a producer's sequence committed on ``partitions``, so its next batch there may be promised offsets."""
        with self._cond:
            for p in partitions:
                if self._last_seq.get((producer_id, p), -1) < sequence:
                    self._last_seq[(producer_id, p)] = sequence

    def answered(self, items: list[Pending]) -> None:
        """``items`` are answered: batches behind them may be promised again; LEOs from the table plus promises."""
        with self._cond:
            self._uncertain -= sum(1 for i in items if not i.predicted)
            self._promised_open -= sum(1 for i in items if i.predicted)
            self.resync()
            self._settle_in_flight(items)

    def promises_unanswered(self) -> int:
        """Batches promised offsets (acks=1) and not answered yet: pending, or taken by the committer.

        Every batch ends in :meth:`answered` — committed, failed (a fence, the table gone), or drained at close.
        Cluster mode: after a lost ZooKeeper session the node registers again only once this is 0 on every topic
        (:mod:`logstore.node.membership`).
        """
        with self._cond:
            return self._promised_open

    def resync(self) -> None:
        """Log end offsets from the table (the writer caught up) plus what is promised and pending."""
        with self._cond:
            self._sync_partitions()
            self._leo = self._writer_hw() + self._promised_pending()

    def set_led(self, partitions: frozenset[int]) -> None:
        """Cluster mode: accept produce for exactly these partitions (led and claimed).

        The log end offsets are taken from the writer in the same step: a
        partition just claimed must not be promised offsets from before the
        claim (its previous leader's commits moved them). So is the write-ahead
        log's next sequence, past any of this node's frames committed since
        :meth:`open` (by another node's replay of its log). Called on the committer's thread.
        """
        # New frames take sequences after the table's, never those of frames already committed, or the
        # idempotent writer drops them as retries.
        committed = self._writer.producer_sequence(self.wal_pid)
        with self._cond:
            self._sync_partitions()
            self._leo = self._writer_hw() + self._promised_pending()
            if committed is not None:
                self._wal_seq = max(self._wal_seq, committed + 1)
            # A partition just claimed holds its previous leader's sequences, which this node never saw.
            self._forget_sequences(partitions - (self.led or frozenset()))
            self.led = partitions

    def drop_led(self, partitions: tuple[int, ...] | list[int] | set[int]) -> None:
        """Cluster mode: stop accepting produce for ``partitions`` (another node leads them now, or will).

        What is pending is due at once, not after ``linger.ms``: a partition handed over waits for it.
        """
        if not partitions:
            return
        with self._cond:
            self.led = frozenset(self.led or ()) - set(partitions)
            self._forget_sequences(set(partitions))
            pending = bool(self._pending)
            if pending:
                self._due = min(self._due, time.monotonic())
        if pending:
            self._wake_at(0.0)

    # -- hand-over of a partition (preferred-leader election) ------------------------

    def drained(self, partition: int) -> bool:
        """Cluster mode: ``partition`` is not accepted (any more) and every batch accepted for it is answered.

        Answered means committed, or failed and so refused to its producer (who
        retries at the new leader): nothing this node acknowledged for the
        partition is left to commit, so the partition may move to another live node.
        """
        with self._cond:
            led = self.led
            accepted = led is None or partition in led
            return not accepted and (partition >= len(self._in_flight) or self._in_flight[partition] == 0)

    def _check_led(self, counts: np.ndarray) -> None:
        """Refuse, under the lock, records for a partition dropped since :meth:`submit` looked (caller holds it).

        The hand-over of a partition counts what is in flight for it once it
        is dropped: nothing may join after that.
        """
        led = self.led
        if led is None:
            return
        missing = [p for p in np.flatnonzero(counts).tolist() if p not in led]
        if missing:
            raise NotLeaderOrFollowerError(
                f"this node does not lead partitions {missing} of topic '{self.topic}' (any more); retry"
            )

    def _settle_in_flight(self, items: list[Pending]) -> None:
        """Take answered items off the in-flight counts (caller holds the lock)."""
        for item in items:
            counts = item.counts
            self._in_flight = grown(self._in_flight, len(counts))
            self._in_flight[: len(counts)] -= counts

    def _forget_sequences(self, partitions: frozenset[int] | set[int]) -> None:
        """Drop what this node knows of producers' sequences on ``partitions`` (caller holds the lock)."""
        if partitions:
            for key in [k for k in self._last_seq if k[1] in partitions]:
                del self._last_seq[key]

    def set_available(self, available: bool) -> None:
        """Cluster mode: accept produce (and promise acks=1) only while the ZooKeeper session is connected."""
        with self._cond:
            self.available = available

    def wake(self) -> None:
        """Wake the committer (leadership changed)."""
        self._wake_at(0.0)

    def kill(self, error: LogstoreError) -> list[Pending]:
        """Refuse every later request with ``error``; return the pending batches for the caller to fail."""
        self.dead = error
        with self._cond:
            return self._take_all()

    def close(self) -> None:
        """Refuse new requests; the committer drains what is pending and stops."""
        with self._cond:
            self.closing = True
        self._wake_at(0.0)

    def _wake_at(self, deadline: float) -> None:
        """Run the committer by ``deadline`` (``time.monotonic()``; at once when it is past)."""
        committer = self._committer
        if committer is None:
            return
        if deadline <= time.monotonic():
            committer.run_soon()
        else:
            committer.run_at(deadline)

    def refresh_partitions(self) -> None:
        """Take the catalog's partition count (raised by PATCH or another process)."""
        count, _ = self._catalog.topic_config(self.topic)
        with self._cond:
            self._num_partitions = max(self._num_partitions, count)
            self._leo = grown(self._leo, self._num_partitions)

    def _take_all(self) -> list[Pending]:
        """Every pending batch, in submit order (caller holds the lock)."""
        items, self._pending = self._pending, []
        self._pending_bytes = 0
        return items

    def _writer_hw(self) -> np.ndarray:
        hw = np.array([self._writer.high_watermark(p) for p in range(self._writer.num_partitions)], np.int64)
        return grown(hw, self._num_partitions)

    def _promised_pending(self) -> np.ndarray:
        """Records per partition of the pending batches that were promised offsets (caller holds the lock)."""
        out = np.zeros(self._num_partitions, np.int64)
        for item in self._pending:
            if item.predicted:
                out = grown(out, len(item.counts))
                out[: len(item.counts)] += item.counts
        return out

    def _sync_partitions(self) -> None:
        """Take a partition count the writer has seen (another process may have raised it); caller holds the lock."""
        if self._writer.num_partitions > self._num_partitions:
            self._num_partitions = self._writer.num_partitions


def grown(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` zero-padded to at least ``n`` entries (partitions added since it was sized)."""
    return a if len(a) >= n else np.concatenate([a, np.zeros(n - len(a), np.int64)])
