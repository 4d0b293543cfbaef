"""The ingest node: per-topic accumulators, one committer thread per topic, acks.

A produce request becomes a :class:`~logstore.structs.ProducerBatch` in its
topic's :class:`TopicPipeline`. The pipeline's committer thread takes every
batch pending when it wakes (after ``linger.ms`` or once ``batch.size`` bytes
wait) and commits them together with the core's
:class:`~logstore.writer.TopicWriter` — many requests per Delta commit.

Acknowledgement by ``acks``:

* ``0`` — once the batch is queued in memory; lost if the process dies first.
* ``1`` — once the batch is fsynced in the node's write-ahead log, with the
  offsets the leader assigned (the log end offset, LEO, counts pending
  records). The commit follows within ``linger.ms``; after a crash the log is
  replayed through the idempotent writer, so each record lands exactly once.
* ``all`` — once the Delta commit holding the batch is durable.

Memory is bounded by ``buffer.memory``: bytes accepted but not yet committed;
past it requests are refused with ``THROTTLING_QUOTA_EXCEEDED`` (HTTP 429).
"""

from __future__ import annotations

import asyncio
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
from ingest_api.wal import WriteAheadLog
from logstore.config import LogstoreConfig
from logstore.errors import (
    FencedLeaderEpochError,
    LogstoreError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    RecordListTooLargeError,
    ThrottlingQuotaExceededError,
    UnknownTopicOrPartitionError,
)
from logstore.lru import LruDict
from logstore.partitioner import Partitioner
from logstore.reader import TopicReader
from logstore.schema import INPUT_SCHEMA
from logstore.store import LogStore
from logstore.structs import AppendResult, FetchResult, ProducerBatch
from logstore.writer import TopicWriter, offsets_from

__all__ = ["Acks", "Broker", "TopicPipeline"]

log = logging.getLogger("logstore.ingest")

Acks = Literal["0", "1", "all"]


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
        self._leo = np.array([self.writer.high_watermark(p) for p in range(self._num_partitions)], np.int64)
        # bounded: a producer dropped from it is new to this node again, and the writer decides its batches
        self._last_seq: LruDict[str, int] = LruDict(self._config.producer_state_max_entries)
        self._uncertain = 0
        self._wal_pid = f"__wal.{broker.node_id}"
        self.wal = WriteAheadLog(os.path.join(broker.wal_dir, topic))
        self._replay()
        self._wal_seq = self._next_wal_seq()
        self._thread = threading.Thread(target=self._run, name=f"committer-{topic}", daemon=True)
        self._thread.start()

    # -- accepting --------------------------------------------------------------

    def submit(self, parsed: ParsedRecords, acks: Acks) -> Submitted:
        """Queue a produce request; see :class:`Submitted` for what to wait on.

        Raises:
            UnknownTopicOrPartitionError, MessageTooLargeError,
            OutOfOrderSequenceNumberError, ThrottlingQuotaExceededError,
            NotLeaderOrFollowerError: the request is refused whole.
        """
        if self._dead is not None:
            raise NotLeaderOrFollowerError(f"this node no longer commits topic '{self.topic}': {self._dead.message}")
        explicit = parsed.partitions
        if any(p is not None and p >= self._num_partitions for p in explicit):
            self._refresh_partitions()
        n = len(parsed)
        if parsed.keys.null_count == n and all(p is None for p in explicit):
            if parsed.producer_id is not None:
                sticky = self._partitioner.assign(
                    self.topic,
                    [None],
                    [None],
                    self._num_partitions,
                    producer_id=parsed.producer_id,
                    sequence=parsed.sequence,
                )[0]
            else:
                sticky = self._partitioner.assign(self.topic, [None], [None], self._num_partitions)[0]
            parts = pa.repeat(sticky, n)
        else:
            parts = self._partitioner.assign(
                self.topic,
                parsed.keys,
                explicit,
                self._num_partitions,
                producer_id=parsed.producer_id,
                sequence=parsed.sequence,
            )
        records = pa.Table.from_arrays(
            [parts, parsed.timestamps, parsed.keys, parsed.values, parsed.headers], schema=INPUT_SCHEMA
        )
        nbytes = self.writer.check_records(records)
        counts = np.bincount(parts.to_numpy(zero_copy_only=False), minlength=self._num_partitions).astype(np.int64)
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
            predicted = True
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
                # An unpredicted batch is pending or committing and may take offsets first:
                # nothing submitted after it can be promised offsets until it commits.
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
                item.promised = offsets_from(parts.to_numpy(zero_copy_only=False), self._leo)
                self._leo[: len(counts)] += counts
            logged = None
            if acks == "1":
                item.frame, logged = self.wal.append({"producer_id": pid, "sequence": seq}, records)
            self._pending.append(item)
            self._pending_bytes += nbytes
            self._cond.notify()
        return Submitted(item.future, logged, item.promised, parts)

    # -- committing -------------------------------------------------------------

    def _run(self) -> None:
        linger = self._config.linger_ms / 1000
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending and self._closing:
                    return
                deadline = time.monotonic() + linger
                while self._pending_bytes < self._config.batch_size and not self._closing:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                items, self._pending = self._pending, []
                self._pending_bytes = 0
            self._commit(items)

    def _commit(self, items: list[_Pending]) -> None:
        # Submit order is commit order, so the offsets promised to acks=1 hold: no batch is
        # promised offsets while one whose fate only the writer knows (a retry, a producer
        # new to this node) is ahead of it.
        ordered = items
        attempt = 0
        while True:
            started = time.perf_counter()
            try:
                results = self.writer.append([i.batch for i in ordered])
                break
            except FencedLeaderEpochError as e:
                self._die(e, ordered)
                return
            except LogstoreError as e:
                attempt += 1
                log.warning("commit to topic %s failed (attempt %d): %s", self.topic, attempt, e)
                if self._closing and attempt >= 5:
                    self._fail(ordered, e)
                    return
                time.sleep(min(1.0, 0.01 * 2**attempt))
        metrics = self._broker.metrics
        metrics.commit_latency.labels(self.topic).observe(time.perf_counter() - started)
        metrics.batch_records.observe(sum(len(i.batch.records) for i in ordered))
        last_frame = -1
        for item, result in zip(ordered, results, strict=True):
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
                item.future.set_exception(result)
        with self._cond:
            self._uncertain -= sum(1 for i in ordered if not i.predicted)
            hw = np.array([self.writer.high_watermark(p) for p in range(self.writer.num_partitions)], np.int64)
            for item in self._pending:
                if item.predicted:
                    hw[: len(item.counts)] += item.counts
            self._leo = hw
        for p in range(self.writer.num_partitions):
            metrics.high_watermark.labels(self.topic, str(p)).set(self.writer.high_watermark(p))
        if last_frame >= 0:
            self.wal.committed_through(last_frame)
        self._broker.notify_commit(self.topic)

    def _fail(self, items: list[_Pending], error: LogstoreError) -> None:
        with self._cond:
            self._uncertain -= sum(1 for i in items if not i.predicted)
        for item in items:
            self._broker.buffer.release(item.nbytes)
            item.future.set_exception(error)

    def _die(self, error: LogstoreError, items: list[_Pending]) -> None:
        self._dead = error
        with self._cond:
            rest, self._pending = self._pending, []
        self._fail(items + rest, NotLeaderOrFollowerError(f"topic '{self.topic}': {error.message}"))

    def _refresh_partitions(self) -> None:
        count, config = self._broker.store.catalog.topic_config(self.topic)
        with self._cond:
            if count > len(self._leo):
                self._leo = np.concatenate([self._leo, np.zeros(count - len(self._leo), np.int64)])
            self._num_partitions = max(self._num_partitions, count)
            self._topic_config = config

    def reconfigure(self) -> None:
        """Pick up a changed partition count or topic config (after PATCH)."""
        self._refresh_partitions()

    # -- recovery ---------------------------------------------------------------

    def _replay(self) -> None:
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
            for r in self.writer.append(batches[start : start + 1000]):
                if isinstance(r, AppendResult) and not r.duplicate:
                    replayed += len(r.offsets)
        log.info("topic %s: replayed %d records from the write-ahead log", self.topic, replayed)
        self.wal.discard_recovered()
        self._leo = np.array([self.writer.high_watermark(p) for p in range(self.writer.num_partitions)], np.int64)

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


class Broker:
    """The ingest node's state: topic pipelines, buffer pool, metrics, commit signals."""

    def __init__(self, config: LogstoreConfig, metrics: Metrics | None = None) -> None:
        self.config = config
        self.store = LogStore(config)
        self.metrics = metrics or Metrics()
        self.buffer = _BufferPool(config.buffer_memory, self.metrics)
        self.wal_dir = os.path.abspath(config.wal_dir or os.path.join(config.root, "_wal"))
        os.makedirs(self.wal_dir, exist_ok=True)
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
