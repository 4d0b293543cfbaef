"""The ingest node: a pipeline per topic, fetch with a warm reader per topic, long-poll signals, lifecycle.

A produce request goes to its topic's :class:`TopicPipeline`, which is three
parts, one module each:

* :mod:`ingest_api.accumulator` — acceptance: the node's buffer pool
  (``buffer.memory``), the topic's pending batches in submit order, what each
  ``acks`` level waits for, and when an acks=1 batch is promised offsets;
* :mod:`ingest_api.committer` — the committer thread: it holds the table's
  writer lock, commits every pending batch together (many requests per Delta
  commit), answers them and hands the lock over to a writer that asks;
* :mod:`ingest_api.recovery` — the write-ahead log's replay when the topic is
  opened, before the committer commits anything else.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid

import numpy as np
import pyarrow as pa

from ingest_api.accumulator import Accumulator, Acks, BufferPool, Submitted
from ingest_api.committer import Committer
from ingest_api.metrics import Metrics
from ingest_api.parse import ParsedRecords
from ingest_api.recovery import replay
from logstore.cluster.coordinator import ClusterMetadata, NodeInfo
from logstore.cluster.placement import PartitionState
from logstore.config import LogstoreConfig
from logstore.errors import RecordListTooLargeError, UnknownTopicOrPartitionError
from logstore.reader import TopicReader
from logstore.store import LogStore
from logstore.structs import FetchResult
from logstore.wal import DirectoryLock, WriteAheadLog
from logstore.writer import TopicWriter

__all__ = ["EMBEDDED_NODE_ID", "Acks", "Broker", "Submitted", "TopicPipeline", "wal_dir_of"]

EMBEDDED_NODE_ID = 0
"""The node id an embedded node (no ``zookeeper.connect``) gives itself in cluster metadata.

Its own id (``Broker.node_id``, a random hex string kept in its WAL directory)
names its write-ahead log and producer state; metadata speaks of node ids as
ints, like Kafka's broker ids, and a one-node cluster's only node is 0.
"""


class TopicPipeline:
    """Accumulator, write-ahead log and committer thread of one topic on this node."""

    def __init__(self, broker: Broker, topic: str) -> None:
        """Open the topic on this node: take its writer lock, replay its WAL, start its committer.

        Raises:
            LogstoreError: the table cannot be written now (the WAL's frames are kept).
        """
        self.topic = topic
        self.writer = TopicWriter(broker.store.catalog, topic)
        self.wal = WriteAheadLog(os.path.join(broker.wal_dir, topic))
        self._accumulator = Accumulator(
            topic,
            self.writer,
            self.wal,
            broker.config,
            broker.store.catalog,
            broker.buffer,
            broker.metrics,
            broker.node_id,
        )
        self._committer = Committer(
            self._accumulator,
            self.writer,
            self.wal,
            table_root=broker.store.catalog.topic_path(topic),
            node_id=broker.node_id,
            wal_dir=broker.wal_dir,
            buffer=broker.buffer,
            metrics=broker.metrics,
            on_commit=lambda: broker.notify_commit(topic),
        )
        self._committer.acquire()
        try:
            replay(self.writer, self.wal, self._accumulator.wal_pid, broker.metrics)
        except BaseException:
            self._committer.release()
            raise
        self._accumulator.open()
        self._committer.start()

    def submit(self, parsed: ParsedRecords, acks: Acks) -> Submitted:
        """Queue a produce request; see :meth:`Accumulator.submit`."""
        return self._accumulator.submit(parsed, acks)

    def _enqueue(
        self, records: pa.Table, parsed: ParsedRecords, acks: Acks, nbytes: int, counts: np.ndarray, parts: pa.Array
    ) -> Submitted:
        """Queue records past :meth:`submit`'s checks, their bytes already reserved (for tests of the committer)."""
        return self._accumulator.enqueue(records, parsed, acks, nbytes, counts, parts)

    def reconfigure(self) -> None:
        """Pick up a changed partition count (after PATCH)."""
        self._accumulator.refresh_partitions()

    def close(self) -> None:
        """Commit what is pending (drain), then stop the committer and the log."""
        self._accumulator.close()
        self._committer.join()
        self.wal.close()
        self.writer.close()


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
        self.buffer = BufferPool(config.buffer_memory, self.metrics)
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
        self._partition_counts: dict[str, tuple[int, int]] = {}
        """topic → (mtime_ns of its ``_delta_log`` directory, partition count), for :meth:`cluster_metadata`."""
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

    def pipeline_if_open(self, topic: str) -> TopicPipeline | None:
        """The topic's pipeline if this node has it open, else None; never blocks, so fit for the event loop."""
        return self._pipelines.get(topic)

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

    def cluster_metadata(self, self_url: str) -> ClusterMetadata:
        """The cluster as this node sees it: in embedded mode, a one-node cluster of itself.

        The node (id :data:`EMBEDDED_NODE_ID`, at ``self_url``, the base URL the
        caller reached it at) is the controller, with epoch 0, and leads every
        partition of every topic at leader epoch 0. Reads each topic's
        partition count from its table properties, re-read only when its Delta log has
        changed (blocking: call off the event loop).
        """
        partitions: dict[tuple[str, int], PartitionState] = {}
        for topic in self.store.list_topics():
            count = self._partition_count(topic)
            for p in range(count):
                partitions[(topic, p)] = PartitionState(EMBEDDED_NODE_ID, 0)
        return ClusterMetadata(
            controller=EMBEDDED_NODE_ID,
            controller_epoch=0,
            nodes=(NodeInfo(EMBEDDED_NODE_ID, self_url),),
            partitions=partitions,
        )

    def _partition_count(self, topic: str) -> int:
        """The topic's partition count; 0 when it was deleted meanwhile."""
        log_dir = os.path.join(self.store.catalog.topic_path(topic), "_delta_log")
        try:
            # every commit (a partition count change too) adds a file to the log, which bumps its mtime:
            # opening a Delta table per topic on every metadata request would cost ms per topic
            mtime = os.stat(log_dir).st_mtime_ns
            cached = self._partition_counts.get(topic)
            if cached is not None and cached[0] == mtime:
                return cached[1]
            count, _ = self.store.catalog.topic_config(topic)
        except (FileNotFoundError, UnknownTopicOrPartitionError):
            self._partition_counts.pop(topic, None)
            return 0
        self._partition_counts[topic] = (mtime, count)
        return count

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
            self._partition_counts.pop(topic, None)
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
