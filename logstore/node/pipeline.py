"""One topic on this node: its accumulator, write-ahead log and committer (:class:`TopicPipeline`).

Opened by :meth:`logstore.node.broker.Broker.pipeline`, closed by the broker when the node stops or the topic is
deleted or created again (:mod:`logstore.node.retirement`). In cluster mode its committer claims the partitions the
node leads, after replaying departed nodes' write-ahead logs under the topic's failover lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

import numpy as np
import pyarrow as pa

from logstore.common.workers import WorkerPool
from logstore.config import LogstoreConfig
from logstore.errors import InconsistentTopicIdError, NotLeaderOrFollowerError
from logstore.log.wal import WriteAheadLog
from logstore.log.writer import TopicWriter
from logstore.node.accumulator import Accumulator, Acks, BufferPool, Submitted
from logstore.node.committer import Committer
from logstore.node.membership import ClusterMembership
from logstore.node.metrics import Metrics
from logstore.node.recovery import replay, replay_departed
from logstore.node.retirement import is_current
from logstore.storage import join, parent
from logstore.store import LogStore
from logstore.wire.json_produce import ParsedRecords

__all__ = ["Node", "TopicPipeline"]


class Node(Protocol):
    """What a pipeline uses of its node (:class:`logstore.node.broker.Broker`)."""

    store: LogStore
    cluster: ClusterMembership | None
    config: LogstoreConfig
    buffer: BufferPool
    metrics: Metrics
    committers: WorkerPool
    wal_dir: str
    node_id: str
    available: bool

    def notify_commit(self, topic: str) -> None: ...
    def retire_in_background(self, pipeline: TopicPipeline) -> None: ...


class TopicPipeline:
    """Accumulator, write-ahead log and committer of one topic on this node."""

    def __init__(self, broker: Node, topic: str) -> None:
        """Open the topic on this node: take its writer lock, replay its WAL, start its committer.

        Raises:
            LogstoreError: the table cannot be written now (the WAL's frames are kept).
        """
        self.topic = topic
        self._table_root = broker.store.catalog.topic_path(topic)
        cluster = broker.cluster is not None
        self.writer = TopicWriter(
            broker.store.catalog,
            topic,
            leader_epochs={} if cluster else None,
            node_id=broker.cluster.node_id if broker.cluster is not None else -1,
        )
        self.wal = WriteAheadLog(join(broker.wal_dir, topic))
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
        self.drained = self._accumulator.drained
        self.promises_unanswered = self._accumulator.promises_unanswered
        """``promises_unanswered()``: acks=1 batches promised offsets and not answered yet (committed or failed)."""
        """Cluster mode: ``drained(p)``, partition ``p`` is accepted no more and all accepted for it is answered."""
        self._on_stale = broker.retire_in_background
        self.retired = False  # set by Broker.retire before it closes this pipeline: its topic changed
        self.registered = False  # known to the controller (cluster mode), set by Broker.pipeline
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
            pool=broker.committers,
            cluster=cluster,
            failover=lambda: self._failover(broker),
            on_stale=lambda: broker.retire_in_background(self),
        )
        if cluster:
            self._accumulator.set_led(frozenset())  # until the committer claims what the cluster watch hands it
            self._accumulator.set_available(broker.available)
        try:
            self._committer.acquire()  # inside: a catch-up that fails (the table renamed away) closes what it opened
            if broker.cluster is None:
                replay(self.writer, self.wal, broker.metrics)
            elif self.wal.recovered():  # the previous run's frames, before the node registers (Broker.start)
                with broker.cluster.failover_lock(topic):
                    replay(self.writer, self.wal, broker.metrics, foreign=True)
        except BaseException:
            self._committer.release()
            self.close_files()  # a node that retries the open must not pile up open logs and writers
            raise
        self._accumulator.open()
        self._committer.start()

    @contextlib.contextmanager
    def _failover(self, broker: Node) -> Iterator[None]:
        """Cluster mode: hold the topic's failover lock (in ZooKeeper) and replay departed nodes' write-ahead logs."""
        assert broker.cluster is not None
        with broker.cluster.failover_lock(self.topic):
            self._replay_departed(broker)
            yield

    def _replay_departed(self, broker: Node) -> None:
        assert broker.cluster is not None
        live = {str(n.node_id) for n in broker.cluster.metadata().nodes}
        wal_root = parent(broker.wal_dir)  # <root>/_wal, holding every node's <node.id>
        replay_departed(self.writer, wal_root, broker.wal_dir, broker.metrics, live=live)

    def current(self) -> bool:
        """Whether the topic at the path is still the one this pipeline opened (one read of its ID file)."""
        return is_current(self.writer, self._table_root)

    def set_leadership(self, epochs: dict[int, int]) -> None:
        """Cluster mode: lead exactly these partitions of the topic, at these ZooKeeper epochs."""
        self._committer.want(epochs)

    def set_available(self, available: bool) -> None:
        """Cluster mode: whether the ZooKeeper session is up (produce and acks=1 promises only then)."""
        self._accumulator.set_available(available)

    @property
    def led(self) -> frozenset[int] | None:
        """Partitions this node accepts produce for (cluster mode); None = all (embedded)."""
        return self._accumulator.led

    def submit(self, parsed: ParsedRecords, acks: Acks) -> Submitted:
        """Queue a produce request (:meth:`Accumulator.submit`); acks=1 checks the topic's ID first (answered
        before its commit, whose check would come too late for a topic created again by another process).

        Raises:
            InconsistentTopicIdError: the topic changed since this pipeline opened it (retriable), or it is closing.
        """
        if acks == "1" and not self.current():
            self._on_stale(self)
            raise self._stale()
        try:
            return self._accumulator.submit(parsed, acks)
        except NotLeaderOrFollowerError:
            if self.retired:  # closing because the topic changed, not because the node stops
                raise self._stale() from None
            raise

    def _stale(self) -> InconsistentTopicIdError:
        return InconsistentTopicIdError(f"topic '{self.topic}' was deleted and created again since it opened; retry")

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
        self.drain()
        self.close_files()

    def drain(self) -> None:
        """Refuse new requests, commit what is pending and stop the committer."""
        self._accumulator.close()
        self._committer.join()

    def close_files(self) -> None:
        """Close the write-ahead log and the writer (after :meth:`drain`; may wait for a checkpoint)."""
        self.wal.close()
        self.writer.close()
