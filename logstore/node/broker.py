"""The ingest node: a pipeline per topic, fetch with a warm reader per topic, long-poll signals, lifecycle.

A produce request goes to its topic's :class:`~logstore.node.pipeline.TopicPipeline`, which is three
parts, one module each:

* :mod:`logstore.node.accumulator` — acceptance: the node's buffer pool
  (``buffer.memory``), the topic's pending batches in submit order, what each
  ``acks`` level waits for, and when an acks=1 batch is promised offsets;
* :mod:`logstore.node.committer` — the committer: it holds the table's writer
  lock, commits every pending batch together (many requests per Delta
  commit), answers them and hands the lock over to a writer that asks;
* :mod:`logstore.node.recovery` — the write-ahead log's replay when the topic is
  opened, before the committer commits anything else.

Threads do not grow with topics: every topic's committer runs in turns on the node's ``num.io.threads`` pool,
and write-ahead log writes, Delta checkpoints and fsyncs on the process's pools (:mod:`logstore.common.workers`).

Cluster mode (``zookeeper.connect`` set): the node is a :class:`~logstore.node.membership.ClusterMembership`
too. It opens a pipeline for every topic of the cluster — those it leads partitions of at once, the others
ahead of leadership, one at a time on a thread of their own — and hands each pipeline its partitions with
their ZooKeeper epochs; a pipeline accepts produce only for partitions it leads and has claimed. A topic open
before it is given partitions (its table read, its write-ahead log opened) is claimed in a fraction of a
second when its leader fails; opening it then took 2 to 4 s more in the nemesis. The routes ask
:meth:`Broker.route` which node leads each record's partition and forward the
others (:mod:`ingest_api.forwarding`). Fetch is served by any node straight
from the shared Delta table.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection
from typing import TypeVar

import numpy as np
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from logstore.cluster import ClusterMetadata, NodeInfo, PartitionState
from logstore.common.keyed_locks import KeyedLocks
from logstore.common.logs import describe
from logstore.common.signals import Signals
from logstore.common.workers import WorkerPool, shared_pool
from logstore.config import LogstoreConfig
from logstore.errors import (
    KafkaStorageError,
    LogstoreError,
    RecordListTooLargeError,
    UnknownTopicOrPartitionError,
)
from logstore.log.partitioner import Partitioner
from logstore.log.tables import refresh
from logstore.log.topic_id import id_in
from logstore.log.wal import DirectoryLock, node_id_in, topics_with_frames, wal_dir_of
from logstore.node.accumulator import Acks, BufferPool, Submitted
from logstore.node.leader_election import report_drained
from logstore.node.membership import ClusterMembership, advertised_url
from logstore.node.metrics import Metrics
from logstore.node.pipeline import TopicPipeline
from logstore.node.readers import WarmReaders
from logstore.node.recovery import replay_before_registering
from logstore.node.retention import RetentionThread
from logstore.node.retirement import Retirements, retire_on_thread
from logstore.node.routing import Share, shares_by_leader
from logstore.store import LogStore
from logstore.structs import FetchResult
from logstore.wire.json_produce import ParsedRecords

__all__ = ["Acks", "Broker", "Share", "Submitted", "TopicPipeline", "wal_dir_of"]

log = logging.getLogger("logstore.ingest")

PARTITION_COUNT_MAX_AGE_S = 1.0
"""Longest a topic's partition count read from its Delta table is used once the table has moved (seconds)."""
POLL_S = 0.1
"""Longest a long poll (:meth:`Broker.poll`) waits between two looks: how soon it sees other writers' commits."""

T = TypeVar("T")


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
        self.committers = WorkerPool(config.num_io_threads, "committer")
        """Where every topic's committer runs (``num.io.threads``)."""
        self.wal_dir = wal_dir_of(config)
        # A second node on this WAL (same root, wal.dir, node id) would replay and delete segments
        # the first is still appending to.
        self._node_lock = DirectoryLock(self.wal_dir, "the write-ahead log directory")
        self.node_id = node_id_in(self.wal_dir)
        self._pipelines: dict[str, TopicPipeline] = {}
        self._lock = threading.Lock()
        self._closing = False  # set under _lock when close() begins: no pipeline opens after it
        self._opens = KeyedLocks()  # a topic opens, or closes for a delete, one at a time; other topics meanwhile
        self._commits = Signals()  # key: a topic
        self.leadership = Signals()
        """Notified (key None) each time :attr:`view` changes, before the node applies the new view: a request
        forwarded to a leader waits no longer once that leader is gone."""
        self.view: ClusterMetadata | None = None
        """Cluster mode: the view of the cluster the watch last handed this node (None before the first)."""
        self._readers = WarmReaders(self.store)
        self.ready = False
        self.available = True
        """Cluster mode: the ZooKeeper session is connected (produce is accepted)."""
        self._counts: dict[str, tuple[int | None, float, int, DeltaTable]] = {}
        """topic → (mtime_ns of its ``_delta_log`` directory, monotonic time read, partition count, the handle it was
        read from); see :meth:`partition_count`."""
        self._partitioner = Partitioner()
        self._round_robin = itertools.count()
        self._retirements = Retirements()
        self.cluster: ClusterMembership | None = None
        if config.zookeeper_connect:
            self.cluster = ClusterMembership(
                config,
                on_change=self._leadership_changed,
                on_session=self._session_changed,
                promises_unanswered=lambda: unanswered_promises(self._lock, self._pipelines, self._retirements),
            )
            membership = self.cluster
            self._standby = shared_pool("standby", 1).task(
                lambda: open_ahead(self), "opening topics ahead of leadership"
            )
            self.metrics.zookeeper_session_timeout.set_function(lambda: membership.session_timeout_s)
            self.metrics.acks1_lease.set_function(lambda: membership.lease_s)
        led = self.cluster
        self.retention = RetentionThread(
            self.store.catalog, lambda t: led_partitions(led, t), self.metrics, config.log_retention_check_interval_ms
        )
        """Retention of the partitions this node leads, every ``log.retention.check.interval.ms``."""

    def start(self) -> None:
        """Replay every topic's write-ahead log left by a previous run, then accept requests.

        Cluster mode: connect to ZooKeeper, replay them (:func:`~logstore.node.recovery.replay_before_registering`),
        then register and make every topic known to the controller; the
        topics this node is given partitions of open as leadership arrives.

        Raises:
            DuplicateBrokerRegistrationError: cluster mode, a live node holds this ``node.id``.
        """
        if self.cluster is not None:
            topics = topics_with_frames(self.wal_dir)
            self.cluster.start(before_register=lambda: replay_before_registering(topics, self._open_at_start))
            for topic in self.store.list_topics():
                self._at_start(topic, self.reconfigure)  # makes it known to the controller
            self.retention.start()
            self.ready = True
            self._standby.run_soon()
            return
        for name in topics_with_frames(self.wal_dir):
            self._open_at_start(name)  # its frames are replayed before it takes a write
        self.retention.start()
        self.ready = True

    def _open_at_start(self, topic: str) -> bool:
        """Open a topic the previous run left frames of, replaying them (unless deleted since); False when it cannot
        be read now: embedded, its first request opens it instead (answering the storage error until the table can
        be read) and the other topics are served; in a cluster it is tried again before the node registers."""
        return self._at_start(topic, lambda t: self.pipeline(t) if self.store.catalog.exists(t) else None)

    def _at_start(self, topic: str, step: Callable[[str], object]) -> bool:
        """Run one topic's start-up ``step``; False (logged) when the topic cannot be read now, never the node's end."""
        try:
            step(topic)
        except (LogstoreError, DeltaError, OSError) as e:
            log.error("topic %s: cannot be opened at start-up (%r)", topic, e)
            return False
        return True

    def pipeline(self, topic: str, *, standby: bool = False) -> TopicPipeline:
        """The topic's pipeline, opened on first use (claiming the topic's next epoch) and registered with the
        controller. A topic opens without holding up the opening of others.

        ``standby``: opened ahead of leadership (:func:`open_ahead`): never creates a missing topic and does not
        register it (it is in ZooKeeper already; registering a topic being deleted would bring it back).

        Raises:
            UnknownTopicOrPartitionError: no such topic (and not created), or it was deleted meanwhile.
            KafkaStorageError: its table cannot be read, (cluster mode) ZooKeeper did not answer, or the node closes.
        """
        p = self._pipelines.get(topic)
        if p is not None and p.registered:
            return p
        with self._opens.hold(topic):
            self._retirements.wait(topic)
            p = self._pipelines.get(topic) or _open_pipeline(self, topic, create=not standby)
        if self.cluster is not None and not p.registered and not standby:  # a failed one is retried next time
            self.cluster.register_topic(topic, p.writer.num_partitions, p.writer.topic_id)
            p.registered = True
        elif self.cluster is None:
            p.registered = True
        return p

    def pipeline_if_open(self, topic: str) -> TopicPipeline | None:
        """The topic's pipeline if this node has it open (and registered it), else None; never blocks, so fit for the
        event loop. None sends the caller to :meth:`pipeline`, which retries a registration ZooKeeper failed."""
        p = self._pipelines.get(topic)
        return p if p is not None and p.registered else None

    def fetch(self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int) -> FetchResult:
        """Read a partition slice with this node's warm reader of ``topic`` (thread-safe; :class:`WarmReaders`)."""
        return self._readers.fetch(topic, partition, offset, max_records, max_bytes)

    def check_request_size(self, size: int) -> None:
        if size > self.config.max_request_size:
            raise RecordListTooLargeError(
                f"request of {size} bytes exceeds max.request.size={self.config.max_request_size}"
            )

    def forget(self, topic: str) -> None:
        """Close a topic's pipeline (before the topic is deleted; an open of it in progress finishes first)."""
        with self._opens.hold(topic):
            with self._lock:
                p = self._pipelines.pop(topic, None)
                self._readers.drop(topic)
                self._counts.pop(topic, None)
                done = self._retirements.begin(topic) if p is not None else None  # its promises count until closed
            if p is not None and done is not None:
                try:
                    p.close()
                finally:
                    done()
        if self.cluster is not None:
            self.cluster.unregister_topic(topic)

    def retire(self, pipeline: TopicPipeline) -> None:
        """Close the pipeline and reader of a topic deleted or created again since they opened.

        They belong to the old topic (its writer's versions, offsets and epochs);
        the next request, or in cluster mode the next look at the leaders, opens
        the new one. :meth:`pipeline` waits for the close (the write-ahead log
        directory is the topic name's).
        """
        topic = pipeline.topic
        with self._lock:
            if self._pipelines.get(topic) is not pipeline:
                return
            del self._pipelines[topic]
            pipeline.retired = True
            self._readers.drop(topic)
            self._counts.pop(topic, None)
            done = self._retirements.begin(topic)
        log.info("topic %s: deleted or created again since its pipeline opened; closing it", topic)
        try:
            pipeline.close()
        finally:
            done()

    def retire_in_background(self, pipeline: TopicPipeline) -> None:
        """:meth:`retire` on a thread of its own (from the pipeline's committer, which the close waits for)."""
        retire_on_thread(
            pipeline.topic, lambda: self.retire(pipeline), self.cluster.recheck if self.cluster is not None else None
        )

    def reconfigure(self, topic: str) -> None:
        """Pick up a created topic or a changed partition count (cluster mode: tell the controller)."""
        self._counts.pop(topic, None)
        p = self._pipelines.get(topic)
        if p is not None:
            p.reconfigure()
        if self.cluster is not None:
            self.cluster.register_topic(topic, self.partition_count(topic), self.store.catalog.topic_id(topic))

    # -- cluster mode -----------------------------------------------------------

    def cluster_metadata(self, self_url: str | None = None) -> ClusterMetadata:
        """The cluster as this node sees it (blocking: call off the event loop).

        Cluster mode: ZooKeeper's view as the coordinator's cache holds it.
        Embedded: a one-node cluster of this node (id ``node.id``, else 0, at
        ``self_url`` — the base URL the caller reached it at — else its
        advertised URL), the controller at epoch 0, leading every partition of
        every topic at leader epoch 0.
        """
        if self.cluster is not None:
            return self.cluster.metadata()
        me = max(self.config.node_id, 0)
        partitions: dict[tuple[str, int], PartitionState] = {}
        topic_ids: dict[str, str] = {}
        for topic in self.store.list_topics():
            try:
                count = self.partition_count(topic)
                topic_id = self.store.catalog.topic_id(topic)
            except UnknownTopicOrPartitionError:
                continue  # deleted meanwhile
            partitions.update(((topic, p), PartitionState(me, 0)) for p in range(count))
            if topic_id is not None:
                topic_ids[topic] = topic_id
        me_node = (NodeInfo(me, self_url or advertised_url(self.config)),)
        return ClusterMetadata(me, 0, me_node, partitions, topic_ids)

    def lease_valid(self) -> bool:
        """Whether an acks=1 promise may be answered now: always embedded; in a cluster, while the lease holds."""
        return self.cluster is None or self.cluster.lease_valid()

    def partition_count(self, topic: str, *, fresh: bool = False) -> int:
        """The topic's partition count, re-read at most every ``PARTITION_COUNT_MAX_AGE_S`` or when ``fresh``.

        Every commit (by any process) bumps the mtime of the topic's ``_delta_log`` (``Catalog.log_mark``; on an
        object store age alone counts): one ``stat`` per call, and the table is read again only when the log moved
        *and* the count read is older than ``PARTITION_COUNT_MAX_AGE_S``: the handle of the last read takes the
        commits since (opening the table afresh reads every commit since its last checkpoint, one GET each on an
        object store: with three nodes writing one topic that saturated the store), unless the topic's ID changed.
        A busy topic's log moves on every commit, in a cluster by every node writing it; re-reading it for each
        request cost those nodes most of their CPU. Like a Kafka producer's metadata, the count may therefore lag a
        change made by another process by that long; this node's own changes (:meth:`reconfigure`), a request naming
        a partition past the count, and in a cluster one the controller placed past it (:meth:`route`) read it at once.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        try:
            mtime = self.store.catalog.log_mark(topic)
        except UnknownTopicOrPartitionError:
            self._counts.pop(topic, None)
            raise
        now = time.monotonic()
        cached = None if fresh else self._counts.get(topic)
        unmoved = cached is not None and mtime is not None and cached[0] == mtime
        if cached is not None and (unmoved or now - cached[1] < PARTITION_COUNT_MAX_AGE_S):
            return cached[2]
        catalog = self.store.catalog
        held = self._counts.get(topic)
        table = held[3] if held is not None else None
        try:
            if table is not None and id_in(table.metadata().configuration) == catalog.topic_id(topic):
                refresh(table)
            else:
                table = None  # first read, or the topic was created again
        except DeltaError:
            table = None  # deleted meanwhile, say: a fresh handle says so
        if table is None:
            table = catalog.table(topic)
        count, _ = catalog.topic_config(topic, table)
        self._counts[topic] = (mtime, now, count, table)
        return count

    def route(self, topic: str, parsed: ParsedRecords) -> list[Share]:
        """Cluster mode: choose every record's partition and group the records by the node leading it.

        Keyed records go by Kafka's murmur2 partitioner and explicit partitions
        stay; a request of keyless records goes whole to one partition this
        node leads (round-robin over them, per request) so that it is rarely
        forwarded — unless it carries a ``producer_id``, whose partition comes
        from ``(producer_id, sequence)`` so that a retry at any node lands on the
        same partition.

        An idempotent request whose partitions have different leaders is split
        like any other: each share carries the request's ``(producer_id,
        sequence)``, and each leader checks it per partition, so a retry of the
        whole request writes only the shares that did not land.

        Raises:
            UnknownTopicOrPartitionError: no such topic or partition.
            NotLeaderOrFollowerError: a partition has no live leader yet (retriable).
        """
        assert self.cluster is not None
        meta = self.cluster.metadata()
        me = self.cluster.node_id
        n = len(parsed)
        explicit = parsed.partitions
        count = self.partition_count(topic)
        named = explicit.null_count != n
        if (named and pc.max(explicit).as_py() >= count) or meta.leader(topic, count) is not None:
            count = self.partition_count(topic, fresh=True)
        keyless = parsed.keys.null_count == n and not named
        mine = sorted(p for (t, p), s in meta.partitions.items() if t == topic and s.leader == me and p < count)
        if keyless and parsed.producer_id is None and mine:
            parts = np.full(n, mine[next(self._round_robin) % len(mine)], np.int32)
        else:
            parts = self._partitioner.assign(
                topic, parsed.keys, explicit, count, producer_id=parsed.producer_id, sequence=parsed.sequence
            ).to_numpy(zero_copy_only=False)
        return shares_by_leader(topic, parsed, parts, meta, me)

    def leader_of(self, topic: str, partition: int) -> NodeInfo | None:
        """Cluster mode: the node leading a partition, None when it is this node (or no leader is known)."""
        assert self.cluster is not None
        meta = self.cluster.metadata()
        state = meta.leader(topic, partition)
        if state is None or state.leader == self.cluster.node_id:
            return None
        return meta.node(state.leader)

    def _leadership_changed(self, meta: ClusterMetadata) -> None:
        """The cluster watch saw new leaders: open the topics this node leads, tell every pipeline its partitions.

        Runs on the cluster watch's thread, which also renews the acks=1 lease, so it never waits for a pipeline's
        close: a retired pipeline closes on a thread of its own, and its topic is applied once it has closed (the
        retirement asks for another look). One topic that cannot be opened now does not hold up the others.

        Raises:
            LogstoreError, DeltaError, OSError: a topic could not be opened (the others were applied); the watch
                looks again soon.
        """
        assert self.cluster is not None
        if meta != self.view:  # during a hand-over the watch hands the same view every 20 ms
            self.view = meta
            self.leadership.notify()
        for pipeline in list(self._pipelines.values()):
            if not pipeline.current():  # deleted, or deleted and created again, by any node
                self.retire_in_background(pipeline)
        me = self.cluster.node_id
        mine: dict[str, dict[int, int]] = {}
        for (topic, p), state in meta.partitions.items():
            if state.leader == me and state.handover_to is None:  # one being handed over is accepted no more
                mine.setdefault(topic, {})[p] = state.leader_epoch
        failed: Exception | None = None
        # Topics already open first: opening one (its log replayed, its writer read) takes a while, and the
        # partitions of the others must not wait for it to be claimed.
        for topic, epochs in sorted(mine.items(), key=lambda item: (item[0] not in self._pipelines, item[0])):
            if self._retirements.busy(topic):
                continue
            try:
                if topic in self._pipelines or self.store.catalog.exists(topic):
                    self.pipeline(topic).set_leadership(epochs)
            except (LogstoreError, DeltaError, OSError) as e:
                failed = failed or e
        for topic, pipeline in list(self._pipelines.items()):
            if topic not in mine:
                pipeline.set_leadership({})
        report_drained(self.cluster, meta, self._pipelines)
        self._standby.run_soon()
        if failed is not None:
            raise failed

    def _session_changed(self, connected: bool) -> None:
        self.available = connected
        for pipeline in list(self._pipelines.values()):
            pipeline.set_available(connected)

    # -- long-poll signalling ---------------------------------------------------

    def notify_commit(self, topic: str) -> None:
        self._commits.notify(topic)

    async def poll(
        self, topics: Collection[str], look: Callable[[], Awaitable[T]], done: Callable[[T], bool], wait_s: float
    ) -> T:
        """A long poll over ``topics`` (:meth:`Signals.poll`): this node's commits to them wake it at once; other
        writers' (other nodes', Spark jobs') are seen by a look every :data:`POLL_S`."""
        return await self._commits.poll(topics, look, done, wait_s, every_s=POLL_S)

    def close(self) -> None:
        """Drain: commit everything pending on every topic, then stop.

        Cluster mode: a controlled shutdown — new produce is refused, what is
        pending is committed, then leadership is handed over (the controller
        moves this node's partitions at once, without waiting for the session
        to expire) and the node leaves.
        """
        self.ready = False
        self.retention.stop()
        if self.cluster is not None:
            self._standby.close()
        with self._lock:
            self._closing = True
            pipelines, self._pipelines = list(self._pipelines.values()), {}
        for p in pipelines:
            p.drain()
        if self.cluster is not None:
            self.cluster.shutdown()  # before closing files: a checkpoint being written must not delay the hand-over
        for p in pipelines:
            p.close_files()
        self.committers.shutdown()
        self._node_lock.release()


def _open_pipeline(broker: Broker, topic: str, *, create: bool) -> TopicPipeline:
    """Open the topic's pipeline and list it (the caller holds the topic's lock in ``broker._opens``); a missing
    topic is created only with ``create`` and ``auto.create.topics.enable``."""
    if broker._closing:
        raise KafkaStorageError(f"topic '{topic}' was not open and this node is shutting down")
    if not broker.store.catalog.exists(topic):
        if not (create and broker.config.auto_create_topics_enable):
            raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
        broker.store.create_topic(topic, broker.config.num_partitions)
    try:
        p = TopicPipeline(broker, topic)
    except FileNotFoundError:  # its table went while it was opened (a delete, perhaps a re-create)
        raise UnknownTopicOrPartitionError(f"topic '{topic}' was deleted while it was opened") from None
    with broker._lock:
        closing = broker._closing  # close() took its list of pipelines while this one opened
        if not closing:
            broker._pipelines[topic] = p
            p.set_available(broker.available)  # a session event while it opened found it not listed yet
    if closing:
        p.close()
        raise KafkaStorageError(f"topic '{topic}' was opened as this node shut down; closed again")
    return p


def led_partitions(cluster: ClusterMembership | None, topic: str) -> frozenset[int] | None:
    """The partitions of ``topic`` whose retention is this node's: those it leads (cluster), all (embedded: None)."""
    if cluster is None:
        return None
    me, meta = cluster.node_id, cluster.metadata()
    return frozenset(p for (t, p), state in meta.partitions.items() if t == topic and state.leader == me)


def open_ahead(broker: Broker) -> None:
    """Cluster mode: open the topics of the cluster ``broker`` has no pipeline of, one after another (on the
    ``standby`` pool's thread; never raises), so that leadership given to it later only has to be claimed.

    A topic that cannot be opened now is tried again at the next change the cluster watch sees.
    """
    assert broker.cluster is not None
    for topic in sorted({t for t, _ in broker.cluster.metadata().partitions} - set(broker._pipelines)):
        if not broker.ready or broker._closing:
            return
        if broker._retirements.busy(topic):
            continue
        try:
            broker.pipeline(topic, standby=True)
        except Exception as e:  # deleted meanwhile, or its table cannot be read now: the next change retries
            log.info("topic %s: not opened ahead of leadership (%s)", topic, describe(e))


def unanswered_promises(
    lock: threading.Lock, pipelines: dict[str, TopicPipeline], retirements: Retirements
) -> dict[str, int | None]:
    """Cluster mode: topic → acks=1 batches this node promised offsets and has not answered yet (None: its retired
    pipeline is still closing, answering what it holds); ``{}`` once every promise is settled. After a lost ZooKeeper
    session the node registers again only then (:mod:`logstore.node.membership`). ``lock`` guards ``pipelines``
    and the retirements begun (the broker's lock)."""
    with lock:
        out: dict[str, int | None] = dict.fromkeys(retirements.closing())
        open_now = list(pipelines.items())
    for topic, pipeline in open_now:
        n = pipeline.promises_unanswered()
        if n:
            out[topic] = n
    return out
