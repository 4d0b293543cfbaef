"""The Kafka APIs of the data path — ApiVersions, Metadata, FindCoordinator, Produce, InitProducerId, Fetch,
ListOffsets — each on the node's one :class:`~logstore.node.broker.Broker` (admin APIs: :mod:`kafka_api.admin`;
groups and offsets: :mod:`kafka_api.groups`).

Every handler takes the request as its ``kio`` structure and returns the
response as one (built with :func:`~kafka_api.protocol.build` so that one
handler serves every version it advertises). Blocking work — Delta reads,
opening a topic, commits of group offsets — runs in threads, off the event
loop. Produce is split in two (:meth:`Handlers.produce` returns what to
await) so that a connection's batches are submitted in the order they came.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafka_api.access import allowed, denial
from kafka_api.protocol import ALL_OPERATIONS, API_VERSIONS, build, kafka_uuid, response_class, zero_uuid
from kafka_api.records import DecodedBatch, decode_batches, encode_batches, engine_records
from logstore.cluster import ClusterMetadata, group_coordinator
from logstore.config import LogstoreConfig
from logstore.errors import (
    InvalidRequestError,
    LogstoreError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    TopicAlreadyExistsError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from logstore.log.catalog import validate_topic_name
from logstore.log.reader import offset_for_timestamp
from logstore.node.broker import Broker
from logstore.security import Operation, Resource, ResourceType
from logstore.wire.json_produce import ParsedRecords

__all__ = ["Handlers", "Listener", "producer_name"]

log = logging.getLogger("logstore.kafka")

_LEADER_NOT_AVAILABLE = 5
"""A partition no live node leads yet (retriable: the client asks for metadata again)."""
TransactionalProduce = Callable[[str, int, list[DecodedBatch]], Awaitable[dict[str, Any]]]
"""Stage one partition's transactional batches: (topic, partition, batches) → its Produce answer's fields."""
_FETCH_MAX_RECORDS = 100_000
"""Most records one partition of one fetch answer holds (the byte limits usually stop it first)."""
_FETCH_THREADS = 4
"""Partitions of one fetch read at once (Parquet decoding and the batch encoding release the interpreter lock)."""
_fetch_threads: ThreadPoolExecutor | None = None
_fetch_threads_lock = threading.Lock()


def _fetch_each(
    asks: list[tuple[str, Any]], total_max: int, fetch_one: Callable[[str, Any, int], dict[str, Any]]
) -> list[dict[str, Any]]:
    """``fetch_one(topic, partition, budget)`` of every (topic, partition) asked, in order.

    The partitions are read at once, one per thread of the fetch pool, when
    their ``partition_max_bytes`` together fit the request's ``max_bytes``
    (the usual case: a client's defaults are 1 MiB a partition, 50 MiB a
    fetch); otherwise one after another, each within what the ones before
    left of ``max_bytes``, as Kafka fills a fetch.
    """
    budgets = [max(p.partition_max_bytes, 1) for _, p in asks]  # 0 or less would read without a bound
    if len(asks) > 1 and sum(budgets) <= total_max:
        pool = _fetch_pool()
        # Each task runs in a copy of this thread's context: the connection's session (its ACLs).
        futures = [
            pool.submit(contextvars.copy_context().run, fetch_one, topic, p, budget)
            for (topic, p), budget in zip(asks, budgets, strict=True)
        ]
        return [f.result() for f in futures]
    entries: list[dict[str, Any]] = []
    size = 0
    for topic, p in asks:
        entries.append(fetch_one(topic, p, max(min(p.partition_max_bytes, total_max - size), 1)))
        size += len(entries[-1]["records"] or b"")
    return entries


def _fetch_pool() -> ThreadPoolExecutor:
    """The process's fetch threads, shared by every listener and connection (created on first use)."""
    global _fetch_threads
    with _fetch_threads_lock:
        if _fetch_threads is None:
            _fetch_threads = ThreadPoolExecutor(_FETCH_THREADS, thread_name_prefix="kafka-fetch")
        return _fetch_threads


def producer_name(producer_id: int, epoch: int) -> str:
    """The engine's producer id of a Kafka producer id and epoch (a new epoch starts its sequences afresh)."""
    return f"kafka-{producer_id}-{epoch}"


def _code(error: BaseException) -> int:
    return error.code if isinstance(error, LogstoreError) else UnknownServerError.code


class Listener:
    """Where this listener is reached: the host and port Metadata and FindCoordinator name."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port


class Handlers:
    """The APIs of one node's Kafka listener."""

    def __init__(self, broker: Broker, config: LogstoreConfig, advertised: Listener) -> None:
        self.broker = broker
        self.config = config
        self.advertised = advertised
        self.node_id = max(config.node_id, 0)
        self._producer_ids = itertools.count()
        self._last_pid = 0
        self.transactional: TransactionalProduce | None = None  # kafka_api.transactions; None: batches refused

    # -- ApiVersions, Metadata, FindCoordinator ---------------------------------------------

    async def api_versions(self, version: int, req: Any) -> Any:
        keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(API_VERSIONS.items())]
        return build(response_class(18, version), {"error_code": 0, "api_keys": keys, "throttle_time": 0})

    def _brokers(self) -> tuple[dict[int, tuple[str, int]], ClusterMetadata | None]:
        """Node id → (host, port) of its Kafka listener, and the cluster's view (None: embedded, this node alone).

        In cluster mode the live nodes that registered a listener (``advertised.listeners`` in
        ``/brokers/ids/<id>``); a node serving none is left out, and a partition it leads has no leader here.
        """
        me = (self.advertised.host, self.advertised.port)
        if self.broker.cluster is None:
            return {self.node_id: me}, None
        meta = self.broker.cluster.metadata()
        out = {}
        for n in meta.nodes:
            if n.kafka is not None:
                host, _, port = n.kafka.rpartition(":")
                out[n.node_id] = (host, int(port))
        out[self.node_id] = me
        return out, meta

    async def metadata(self, version: int, req: Any) -> Any:
        requested = None if req.topics is None else [t.name for t in req.topics]
        auto = getattr(req, "allow_auto_topic_creation", True)
        brokers, meta = await asyncio.to_thread(self._brokers)
        topics = await asyncio.to_thread(self._topics_metadata, requested, auto, meta)
        controller = self.node_id if meta is None else (meta.controller if meta.controller is not None else -1)
        return build(
            response_class(3, version),
            {
                "throttle_time": 0,
                "brokers": [
                    {"node_id": n, "host": h, "port": port, "rack": None} for n, (h, port) in sorted(brokers.items())
                ],
                "cluster_id": "logstore",
                "controller_id": controller,
                "topics": topics,
            },
        )

    def _partition_leader(self, meta: ClusterMetadata | None, topic: str, partition: int) -> tuple[int, int]:
        """(leader node id, leader epoch); (-1, -1) when no live node leads it yet."""
        if meta is None:
            return self.node_id, 0
        state = meta.leader(topic, partition)
        if state is None or state.leader < 0:
            return -1, -1
        return state.leader, state.leader_epoch

    def _topics_metadata(
        self, requested: list[str] | None, auto_create: bool, meta: ClusterMetadata | None
    ) -> list[dict[str, Any]]:
        """Each topic's partitions and leaders: all the principal may DESCRIBE, or those asked for (denied ones
        answered ``TOPIC_AUTHORIZATION_FAILED``), as Kafka's Metadata."""
        store = self.broker.store
        if requested is None:
            names = [n for n in store.list_topics() if allowed(Operation.DESCRIBE, Resource.topic(n))]
        else:
            names = requested
        out = []
        for name in names:
            entry: dict[str, Any] = {
                "name": name,
                "topic_id": zero_uuid(),
                "is_internal": False,
                "partitions": [],
                "topic_authorized_operations": ALL_OPERATIONS,
            }
            try:
                validate_topic_name(name)
                if (error := denial(Operation.DESCRIBE, Resource.topic(name))) is not None:
                    raise error
                if not store.catalog.exists(name):
                    if not (auto_create and self.config.auto_create_topics_enable and self._may_create(name)):
                        raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
                    with contextlib.suppress(TopicAlreadyExistsError):  # created meanwhile by another request
                        store.create_topic(name, self.config.num_partitions)
                    self.broker.reconfigure(name)
                count = self.broker.partition_count(name)
                entry["topic_id"] = kafka_uuid(store.catalog.topic_id(name))
            except LogstoreError as e:
                out.append(entry | {"error_code": e.code})
                continue
            entry["error_code"] = 0
            partitions = []
            for p in range(count):
                leader, epoch = self._partition_leader(meta, name, p)
                replicas = [leader] if leader >= 0 else []
                partitions.append(
                    {
                        "error_code": 0 if leader >= 0 else _LEADER_NOT_AVAILABLE,
                        "partition_index": p,
                        "leader_id": leader,
                        "leader_epoch": epoch,
                        "replica_nodes": replicas,
                        "isr_nodes": replicas,
                        "offline_replicas": [],
                    }
                )
            entry["partitions"] = partitions
            out.append(entry)
        return out

    @staticmethod
    def _may_create(topic: str) -> bool:
        """Auto-creation needs CREATE on the topic or the cluster, as in Kafka (and over HTTP)."""
        return allowed(Operation.CREATE, Resource.topic(topic)) or allowed(Operation.CREATE, Resource.cluster())

    async def coordinates(self, group: str) -> bool:
        """Whether this node coordinates ``group`` (always when embedded, or when no node with a listener is live)."""
        if self.broker.cluster is None:
            return True
        brokers, _ = await asyncio.to_thread(self._brokers)
        chosen = group_coordinator(group, brokers)
        return chosen is None or chosen == self.node_id

    async def find_coordinator(self, version: int, req: Any) -> Any:
        """The node coordinating each group (cluster mode: :func:`~logstore.cluster.group_coordinator` over the live
        nodes that serve a listener); DESCRIBE on the group, else ``GROUP_AUTHORIZATION_FAILED``."""
        brokers, meta = await asyncio.to_thread(self._brokers)
        keys = list(req.coordinator_keys) if version >= 4 else [req.key]
        key_type = getattr(req, "key_type", 0)
        answers = []
        for key in keys:
            entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1}
            if key_type == 1:  # TRANSACTION: this node's coordinator, which fails in cluster mode with a clear error
                error = denial(Operation.DESCRIBE, Resource(ResourceType.TRANSACTIONAL_ID, key))
                if self.transactional is None:
                    error = InvalidRequestError("this listener serves no transaction coordinator")
            elif key_type != 0:
                error = InvalidRequestError(f"FindCoordinator key_type {key_type} is not served (0: group, 1: txn)")
            else:
                error = denial(Operation.DESCRIBE, Resource.group(key))
            chosen = self.node_id if meta is None else group_coordinator(key, brokers)
            if error is None and chosen is None:
                error = NotCoordinatorError("no live node serves a Kafka listener")
            if error is not None:
                answers.append(entry | {"error_code": error.code, "error_message": error.message})
                continue
            assert chosen is not None
            host, port = brokers[chosen]
            found = {"node_id": chosen, "host": host, "port": port, "error_code": 0, "error_message": None}
            answers.append(entry | found)
        if version >= 4:
            return build(response_class(10, version), {"throttle_time": 0, "coordinators": answers})
        return build(response_class(10, version), {"throttle_time": 0} | answers[0])

    # -- Produce ---------------------------------------------------------------------------

    async def produce(self, version: int, req: Any) -> Callable[[], Awaitable[Any]]:
        """Decode and submit every partition's records now (in the connection's order); return the answer's wait."""
        acks = {0: "0", 1: "1", -1: "all"}.get(req.acks)
        waits: list[tuple[str, int, Awaitable[dict[str, Any]]]] = []
        for topic in req.topic_data:
            for part in topic.partition_data:
                waits.append((topic.name, part.index, await self._submit(topic.name, part.index, part.records, acks)))

        async def answer() -> Any:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for name, index, wait in waits:
                by_topic.setdefault(name, []).append({"index": index} | await wait)
            responses = [{"name": n, "partition_responses": parts} for n, parts in by_topic.items()]
            return build(response_class(0, version), {"responses": responses, "throttle_time": 0})

        return answer

    async def _submit(self, topic: str, partition: int, data: bytes | None, acks: str | None) -> Awaitable[dict]:
        """Queue one partition's batches; returns what its answer awaits. Errors become that partition's answer."""
        try:
            if acks is None:
                raise InvalidRequestError("acks must be 0, 1 or -1 (all)")
            validate_topic_name(topic)
            if (error := denial(Operation.WRITE, Resource.topic(topic))) is not None:
                raise error
            if self.broker.cluster is not None:
                self._check_leader(topic, partition)
            batches = decode_batches(data or b"")
            if not batches:
                raise InvalidRequestError("a produce request names a partition without records")
            pipeline = self.broker.pipeline_if_open(topic)
            if pipeline is None:  # opening one replays its WAL (and may create the topic): in a thread
                if not self._may_create(topic) and not await asyncio.to_thread(self.broker.store.catalog.exists, topic):
                    raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
                pipeline = await asyncio.to_thread(self.broker.pipeline, topic)
            if partition >= self.broker.partition_count(topic):
                raise UnknownTopicOrPartitionError(f"topic '{topic}' has no partition {partition}")
            if batches[0].transactional and self.transactional is not None:
                if acks != "all":
                    raise InvalidRequestError("a transactional produce needs acks=-1 (all)")
                return _ready(await self.transactional(topic, partition, batches))
            sub = pipeline.submit(self._parse(batches, partition), acks)  # type: ignore[arg-type]
        except LogstoreError as e:
            return _ready(self._failed(e))
        except Exception as e:
            log.exception("produce to %s-%d failed", topic, partition)
            return _ready(self._failed(e))

        async def wait() -> dict[str, Any]:
            try:
                _, offsets = await sub.acknowledged(self.broker.lease_valid, self.config.request_timeout_ms)
                return self._placed(offsets[0], topic, partition)
            except LogstoreError as e:
                return self._failed(e)

        return wait()

    def _check_leader(self, topic: str, partition: int) -> None:
        """Cluster mode: pass when this node leads the partition (and is not handing it over).

        Raises:
            NotLeaderOrFollowerError: another node leads it, or none yet: the client refreshes its metadata.
        """
        assert self.broker.cluster is not None
        state = self.broker.cluster.metadata().leader(topic, partition)
        if state is None or state.leader != self.node_id or state.handover_to is not None:
            leader = "none yet" if state is None or state.leader < 0 else f"node {state.leader}"
            raise NotLeaderOrFollowerError(f"this node does not lead {topic}-{partition} (its leader: {leader})")

    def _parse(self, batches: list[DecodedBatch], partition: int) -> ParsedRecords:
        """One partition's (non-empty) batches as one engine request, its idempotence from the first batch."""
        first = batches[0]
        if any(b.transactional or b.control for b in batches):
            raise InvalidRequestError("transactional batches go with a transactional producer's first batch only")
        producer = None
        sequence = None
        if first.producer_id >= 0 and first.base_sequence >= 0:
            if len(batches) > 1:
                raise InvalidRequestError("an idempotent produce carries one batch per partition")
            producer = producer_name(first.producer_id, first.producer_epoch)
            sequence = first.base_sequence
        return engine_records(batches, partition, producer, sequence)

    def _placed(self, base_offset: int, topic: str, partition: int) -> dict[str, Any]:
        return {
            "error_code": 0,
            "base_offset": base_offset,
            "log_append_time": None,
            "log_start_offset": -1,
            "record_errors": [],
        }

    @staticmethod
    def _failed(error: BaseException) -> dict[str, Any]:
        message = error.message if isinstance(error, LogstoreError) else repr(error)
        return {
            "error_code": _code(error),
            "base_offset": -1,
            "log_start_offset": -1,
            "error_message": message,
            "record_errors": [],
        }

    # -- InitProducerId ----------------------------------------------------------------------

    async def init_producer_id(self, version: int, req: Any) -> Any:
        """A fresh producer id: microseconds since the epoch, shifted, never repeated by this process."""
        if req.transactional_id is not None:
            return build(
                response_class(22, version),
                {"throttle_time": 0, "error_code": InvalidRequestError.code, "producer_id": -1, "producer_epoch": -1},
            )
        # microseconds since the epoch above ten bits of node id: unique across the nodes of a cluster too
        pid = max(time.time_ns() // 1000, self._last_pid + 1)
        self._last_pid = pid
        pid = pid << 10 | self.node_id % 1024
        return build(
            response_class(22, version),
            {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0},
        )

    # -- Fetch, ListOffsets ----------------------------------------------------------------

    async def fetch(self, version: int, req: Any) -> Any:
        """Read every asked partition; with nothing (or under ``min_bytes``) wait up to ``max_wait`` for commits."""
        total_max = min(getattr(req, "max_bytes", self.config.fetch_max_bytes), self.config.fetch_max_bytes)
        answers, _ = await self.broker.poll(
            {t.topic for t in req.topics},
            lambda: asyncio.to_thread(self._fetch_all, req, total_max),
            lambda found: found[1] >= req.min_bytes,
            req.max_wait.total_seconds(),
        )
        responses = [{"topic": name, "partitions": parts} for name, parts in answers]
        return build(
            response_class(1, version), {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": responses}
        )

    def _fetch_all(self, req: Any, total_max: int) -> tuple[list[tuple[str, list[dict[str, Any]]]], int]:
        """Every asked partition's answer (:func:`_fetch_each`), by topic in the request's order, and the bytes
        of records in them."""
        entries = _fetch_each([(t.topic, p) for t in req.topics for p in t.partitions], total_max, self._fetch_one)
        answers, done = [], iter(entries)
        for t in req.topics:
            answers.append((t.topic, [next(done) for _ in t.partitions]))
        return answers, sum(len(e["records"] or b"") for e in entries)

    def _fetch_one(self, topic: str, p: Any, budget: int) -> dict[str, Any]:
        """One partition's answer of a fetch, at most ``budget`` bytes of keys and values (the first record whole)."""
        entry: dict[str, Any] = {
            "partition_index": p.partition,
            "aborted_transactions": [],
            "preferred_read_replica": -1,
        }
        try:
            if (error := denial(Operation.READ, Resource.topic(topic))) is not None:
                raise error
            if self.broker.cluster is not None:
                self._check_leader(topic, p.partition)
            result = self.broker.fetch(topic, p.partition, p.fetch_offset, _FETCH_MAX_RECORDS, budget)
        except LogstoreError as e:
            return entry | {"error_code": e.code, "high_watermark": -1, "records": None}
        return entry | {
            "error_code": 0,
            "high_watermark": result.high_watermark,
            "last_stable_offset": result.high_watermark,
            "log_start_offset": result.log_start_offset,
            "records": encode_batches(result.records) if result.records.num_rows else b"",
        }

    async def list_offsets(self, version: int, req: Any) -> Any:
        topics = await asyncio.to_thread(self._list_offsets, req)
        return build(response_class(2, version), {"throttle_time": 0, "topics": topics})

    def _list_offsets(self, req: Any) -> list[dict[str, Any]]:
        out = []
        for t in req.topics:
            parts = []
            try:
                if (error := denial(Operation.DESCRIBE, Resource.topic(t.name))) is not None:
                    raise error
                info = self.broker.store.describe_topic(t.name)
            except LogstoreError as e:
                out.append(
                    {
                        "name": t.name,
                        "partitions": [
                            {"partition_index": p.partition_index, "error_code": e.code} for p in t.partitions
                        ],
                    }
                )
                continue
            for p in t.partitions:
                entry = {"partition_index": p.partition_index, "timestamp": -1, "leader_epoch": 0}
                if p.partition_index >= len(info.partitions):
                    parts.append(entry | {"error_code": UnknownTopicOrPartitionError.code, "offset": -1})
                    continue
                state = info.partitions[p.partition_index]
                ts = p.timestamp if isinstance(p.timestamp, int) else int(p.timestamp.timestamp() * 1000)
                if ts == -2:
                    offset = state.log_start_offset
                elif ts < 0:  # -1 latest, -3 max timestamp (answered as latest)
                    offset = state.high_watermark
                else:
                    reader = self.broker.store.reader(t.name)
                    reader.refresh()
                    offset = offset_for_timestamp(reader.partition_view(p.partition_index), ts)
                    if offset >= state.high_watermark:
                        offset = -1
                    else:
                        entry["timestamp"] = ts
                parts.append(entry | {"error_code": 0, "offset": offset})
            out.append({"name": t.name, "partitions": parts})
        return out


async def _ready_value(value: dict[str, Any]) -> dict[str, Any]:
    return value


def _ready(value: dict[str, Any]) -> Awaitable[dict[str, Any]]:
    return _ready_value(value)
