"""The Kafka APIs this listener serves, each on the node's one :class:`~logstore.node.broker.Broker`.

Every handler takes the request as its ``kio`` structure and returns the
response as one (built with :func:`~kafka_api.protocol.build` so that one
handler serves every version it advertises). Blocking work — Delta reads,
opening a topic, commits of group offsets — runs in threads, off the event
loop. Produce is split in two (:meth:`Handlers.produce` returns what to
await) so that a connection's batches are submitted in the order they came.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pyarrow as pa

from kafka_api.protocol import API_VERSIONS, build, response_class, zero_uuid
from kafka_api.records import decode_batches, encode_batch
from logstore.config import LogstoreConfig
from logstore.errors import (
    InvalidRequestError,
    LogstoreError,
    TopicAlreadyExistsError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from logstore.log.catalog import validate_topic_name
from logstore.log.reader import offset_for_timestamp
from logstore.node.broker import Broker
from logstore.structs import AppendResult
from logstore.wire.json_produce import ParsedRecords

__all__ = ["Handlers", "Listener", "kafka_uuid", "producer_name"]

log = logging.getLogger("logstore.kafka")

_FETCH_MAX_RECORDS = 100_000
"""Most records one partition of one fetch answer holds (the byte limits usually stop it first)."""
_TOPIC, _BROKER = 2, 4
"""DescribeConfigs resource types."""
_DYNAMIC_TOPIC_CONFIG, _DEFAULT_CONFIG = 1, 5
"""DescribeConfigs config sources: set on the topic; the default."""
_ALL_OPERATIONS = -(2**31)
"""``topic_authorized_operations`` when the client did not ask for them (Kafka's INT32_MIN)."""


def producer_name(producer_id: int, epoch: int) -> str:
    """The engine's producer id of a Kafka producer id and epoch (a new epoch starts its sequences afresh)."""
    return f"kafka-{producer_id}-{epoch}"


def kafka_uuid(topic_id: str | None) -> uuid.UUID:
    """A topic ID (22 characters of URL-safe base64, as Kafka prints a ``Uuid``) as the UUID Kafka sends; zero
    for a topic from before IDs."""
    if topic_id is None:
        return zero_uuid()
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=="))


def _config_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _config_type(value: object) -> int:
    """Kafka's ConfigType: BOOLEAN 1, STRING 2, LONG 5."""
    if isinstance(value, bool):
        return 1
    return 5 if isinstance(value, int) else 2


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

    # -- ApiVersions, Metadata, FindCoordinator ---------------------------------------------

    async def api_versions(self, version: int, req: Any) -> Any:
        keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(API_VERSIONS.items())]
        return build(response_class(18, version), {"error_code": 0, "api_keys": keys, "throttle_time": 0})

    def _broker_entry(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "host": self.advertised.host, "port": self.advertised.port, "rack": None}

    async def metadata(self, version: int, req: Any) -> Any:
        requested = None if req.topics is None else [t.name for t in req.topics]
        auto = getattr(req, "allow_auto_topic_creation", True)
        topics = await asyncio.to_thread(self._topics_metadata, requested, auto)
        return build(
            response_class(3, version),
            {
                "throttle_time": 0,
                "brokers": [self._broker_entry()],
                "cluster_id": "logstore",
                "controller_id": self.node_id,
                "topics": topics,
            },
        )

    def _topics_metadata(self, requested: list[str] | None, auto_create: bool) -> list[dict[str, Any]]:
        store = self.broker.store
        names = store.list_topics() if requested is None else requested
        out = []
        for name in names:
            entry: dict[str, Any] = {
                "name": name,
                "topic_id": zero_uuid(),
                "is_internal": False,
                "partitions": [],
                "topic_authorized_operations": _ALL_OPERATIONS,
            }
            try:
                validate_topic_name(name)
                if not store.catalog.exists(name):
                    if not (auto_create and self.config.auto_create_topics_enable):
                        raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
                    with contextlib.suppress(TopicAlreadyExistsError):  # created meanwhile by another request
                        store.create_topic(name, self.config.num_partitions)
                    self.broker.reconfigure(name)
                count = self.broker.partition_count(name)
                entry["topic_id"] = kafka_uuid(store.catalog.topic_id(name))
            except LogstoreError as e:
                out.append(entry | {"error_code": e.code})
                continue
            me = [self.node_id]
            entry["error_code"] = 0
            entry["partitions"] = [
                {
                    "error_code": 0,
                    "partition_index": p,
                    "leader_id": self.node_id,
                    "leader_epoch": 0,
                    "replica_nodes": me,
                    "isr_nodes": me,
                    "offline_replicas": [],
                }
                for p in range(count)
            ]
            out.append(entry)
        return out

    async def find_coordinator(self, version: int, req: Any) -> Any:
        me = {"node_id": self.node_id, "host": self.advertised.host, "port": self.advertised.port}
        ok = {"error_code": 0, "error_message": None}
        if version >= 4:
            coordinators = [{"key": k} | me | ok for k in req.coordinator_keys]
            return build(response_class(10, version), {"throttle_time": 0, "coordinators": coordinators})
        return build(response_class(10, version), {"throttle_time": 0} | me | ok)

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
            if self.broker.cluster is not None:
                raise InvalidRequestError("the Kafka listener serves embedded nodes only (cluster mode: use HTTP)")
            parsed = self._parse(data or b"", partition)
            pipeline = self.broker.pipeline_if_open(topic)
            if pipeline is None:  # opening one replays its WAL (and may create the topic): in a thread
                pipeline = await asyncio.to_thread(self.broker.pipeline, topic)
            if partition >= self.broker.partition_count(topic):
                raise UnknownTopicOrPartitionError(f"topic '{topic}' has no partition {partition}")
            sub = pipeline.submit(parsed, acks)  # type: ignore[arg-type]
        except LogstoreError as e:
            return _ready(self._failed(e))
        except Exception as e:
            log.exception("produce to %s-%d failed", topic, partition)
            return _ready(self._failed(e))

        async def wait() -> dict[str, Any]:
            try:
                if acks == "1" and sub.promised is not None and sub.logged is not None:
                    await asyncio.wrap_future(sub.logged)
                    return self._placed(int(sub.promised[0]), topic, partition)
                result: AppendResult = await asyncio.wrap_future(sub.committed)
                return self._placed(int(result.offsets[0].as_py()), topic, partition)
            except LogstoreError as e:
                return self._failed(e)

        return wait()

    def _parse(self, data: bytes, partition: int) -> ParsedRecords:
        """One partition's batches as one engine request, its idempotence from the first batch."""
        batches = decode_batches(data)
        if not batches:
            raise InvalidRequestError("a produce request names a partition without records")
        first = batches[0]
        if any(b.transactional or b.control for b in batches):
            raise InvalidRequestError("transactional batches are not served by this listener yet")
        producer = None
        sequence = None
        if first.producer_id >= 0 and first.base_sequence >= 0:
            if len(batches) > 1:
                raise InvalidRequestError("an idempotent produce carries one batch per partition")
            producer = producer_name(first.producer_id, first.producer_epoch)
            sequence = first.base_sequence
        n = sum(len(b) for b in batches)
        return ParsedRecords(
            keys=pa.concat_arrays([b.keys for b in batches]),
            values=pa.concat_arrays([b.values for b in batches]),
            headers=pa.concat_arrays([b.headers for b in batches]),
            timestamps=pa.concat_arrays([b.timestamps for b in batches]),
            partitions=[partition] * n,
            producer_id=producer,
            sequence=sequence,
        )

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
        pid = max(time.time_ns() // 1000 << 4, self._last_pid + 1)
        self._last_pid = pid
        return build(
            response_class(22, version),
            {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0},
        )

    # -- Fetch, ListOffsets ----------------------------------------------------------------

    async def fetch(self, version: int, req: Any) -> Any:
        """Read every asked partition; with nothing (or under ``min_bytes``) wait up to ``max_wait`` for commits."""
        max_wait_s = req.max_wait.total_seconds()
        deadline = time.monotonic() + max_wait_s
        total_max = min(getattr(req, "max_bytes", self.config.fetch_max_bytes), self.config.fetch_max_bytes)
        while True:
            answers, size = await asyncio.to_thread(self._fetch_all, req, total_max)
            left = deadline - time.monotonic()
            if size >= req.min_bytes or left <= 0:
                break
            topics = {t.topic for t in req.topics}
            if len(topics) == 1:  # this node's commits to it wake the poll at once
                await self.broker.wait_for_commit(next(iter(topics)), min(left, 0.1))
            else:
                await asyncio.sleep(min(left, 0.05))
        responses = [{"topic": name, "partitions": parts} for name, parts in answers]
        return build(
            response_class(1, version), {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": responses}
        )

    def _fetch_all(self, req: Any, total_max: int) -> tuple[list[tuple[str, list[dict[str, Any]]]], int]:
        size = 0
        answers = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                entry: dict[str, Any] = {
                    "partition_index": p.partition,
                    "aborted_transactions": [],
                    "preferred_read_replica": -1,
                }
                try:
                    budget = max(min(p.partition_max_bytes, total_max - size), 1)
                    result = self.broker.fetch(t.topic, p.partition, p.fetch_offset, _FETCH_MAX_RECORDS, budget)
                except LogstoreError as e:
                    parts.append(entry | {"error_code": e.code, "high_watermark": -1, "records": None})
                    continue
                records = encode_batch(result.records) if result.records.num_rows else b""
                size += len(records)
                parts.append(
                    entry
                    | {
                        "error_code": 0,
                        "high_watermark": result.high_watermark,
                        "last_stable_offset": result.high_watermark,
                        "log_start_offset": result.log_start_offset,
                        "records": records,
                    }
                )
            answers.append((t.topic, parts))
        return answers, size

    async def list_offsets(self, version: int, req: Any) -> Any:
        topics = await asyncio.to_thread(self._list_offsets, req)
        return build(response_class(2, version), {"throttle_time": 0, "topics": topics})

    def _list_offsets(self, req: Any) -> list[dict[str, Any]]:
        out = []
        for t in req.topics:
            parts = []
            try:
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

    # -- CreateTopics, DeleteTopics ------------------------------------------------------------

    async def create_topics(self, version: int, req: Any) -> Any:
        topics = []
        for t in req.topics:
            entry: dict[str, Any] = {"name": t.name, "topic_id": zero_uuid(), "configs": []}
            try:
                validate_topic_name(t.name)
                count = self.config.num_partitions if t.num_partitions < 0 else t.num_partitions
                configs = {c.name: c.value for c in t.configs}
                if getattr(req, "validate_only", False):
                    if self.broker.store.catalog.exists(t.name):
                        raise TopicAlreadyExistsError(f"topic '{t.name}' already exists")
                else:
                    info = await asyncio.to_thread(self.broker.store.create_topic, t.name, count, configs)
                    await asyncio.to_thread(self.broker.reconfigure, t.name)
                    entry["topic_id"] = kafka_uuid(info.topic_id)
                topics.append(
                    entry | {"error_code": 0, "error_message": None, "num_partitions": count, "replication_factor": 1}
                )
            except LogstoreError as e:
                topics.append(
                    entry
                    | {"error_code": e.code, "error_message": e.message, "num_partitions": -1, "replication_factor": -1}
                )
        return build(response_class(19, version), {"throttle_time": 0, "topics": topics})

    async def delete_topics(self, version: int, req: Any) -> Any:
        names = [t.name for t in req.topics] if version >= 6 else list(req.topic_names)
        responses = []
        for name in names:
            entry = {"name": name, "topic_id": zero_uuid()}
            try:
                if name is None:
                    raise UnknownTopicOrPartitionError("topics are deleted by name here: topic ids are not kept yet")
                validate_topic_name(name)
                if not self.broker.store.catalog.exists(name):
                    raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
                entry["topic_id"] = kafka_uuid(self.broker.store.catalog.topic_id(name))
                await asyncio.to_thread(self.broker.forget, name)
                await asyncio.to_thread(self.broker.store.catalog.delete_topic, name)
                responses.append(entry | {"error_code": 0, "error_message": None})
            except LogstoreError as e:
                responses.append(entry | {"error_code": e.code, "error_message": e.message})
        return build(response_class(20, version), {"throttle_time": 0, "responses": responses})

    # -- DescribeConfigs -----------------------------------------------------------------------

    async def describe_configs(self, version: int, req: Any) -> Any:
        """A topic's effective configs (its overrides as dynamic topic configs, the rest as defaults), or the node's."""
        results = [await asyncio.to_thread(self._describe_configs, r) for r in req.resources]
        return build(response_class(32, version), {"throttle_time": 0, "results": results})

    def _describe_configs(self, resource: Any) -> dict[str, Any]:
        entry = {"resource_type": resource.resource_type, "resource_name": resource.resource_name, "configs": []}
        try:
            if resource.resource_type == _TOPIC:
                info = self.broker.store.describe_topic(resource.resource_name)
                values = info.config.to_dict()
                overridden = set(info.overrides)
            elif resource.resource_type == _BROKER:
                values = self.config.to_dict()
                overridden = set()
            else:
                raise InvalidRequestError(f"DescribeConfigs of resource type {resource.resource_type} is not served")
        except LogstoreError as e:
            return entry | {"error_code": e.code, "error_message": e.message}
        wanted = resource.configuration_keys
        configs = [
            {
                "name": key,
                "value": _config_text(value),
                "read_only": resource.resource_type == _BROKER,
                "config_source": _DYNAMIC_TOPIC_CONFIG if key in overridden else _DEFAULT_CONFIG,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": _config_type(value),
                "documentation": None,
            }
            for key, value in sorted(values.items())
            if wanted is None or key in wanted
        ]
        return entry | {"error_code": 0, "error_message": None, "configs": configs}

    # -- OffsetCommit, OffsetFetch ------------------------------------------------------------

    async def offset_commit(self, version: int, req: Any) -> Any:
        """Commit without membership (generation -1): straight into ``_offsets``, as the HTTP API's commits."""
        generation = getattr(req, "generation_id_or_member_epoch", -1)
        topics = []
        for t in req.topics:
            offsets = {p.partition_index: p.committed_offset for p in t.partitions}
            metadata = next((p.committed_metadata for p in t.partitions if p.committed_metadata), None)
            code = 0
            try:
                if generation >= 0 or req.member_id:
                    raise InvalidRequestError(
                        "group membership (JoinGroup) is not served yet; commit with generation -1"
                    )
                await asyncio.to_thread(
                    self.broker.store.commit_offsets, req.group_id, t.name, offsets, metadata=metadata
                )
            except LogstoreError as e:
                code = 22 if isinstance(e, InvalidRequestError) else e.code  # ILLEGAL_GENERATION
            topics.append({"name": t.name, "partitions": [{"partition_index": p, "error_code": code} for p in offsets]})
        return build(response_class(8, version), {"throttle_time": 0, "topics": topics})

    async def offset_fetch(self, version: int, req: Any) -> Any:
        if version >= 8:
            groups = []
            for g in req.groups:
                topics = await asyncio.to_thread(self._committed, g.group_id, g.topics)
                groups.append({"group_id": g.group_id, "topics": topics, "error_code": 0})
            return build(response_class(9, version), {"throttle_time": 0, "groups": groups})
        topics = await asyncio.to_thread(self._committed, req.group_id, req.topics)
        return build(response_class(9, version), {"throttle_time": 0, "topics": topics, "error_code": 0})

    def _committed(self, group: str, asked: Any) -> list[dict[str, Any]]:
        committed = self.broker.store.offsets.committed(group)
        by_topic: dict[str, dict[int, Any]] = {}
        for key, c in committed.items():
            by_topic.setdefault(key.topic, {})[key.partition] = c
        wanted = (
            {t: sorted(ps) for t, ps in by_topic.items()}
            if asked is None
            else {t.name: list(t.partition_indexes) for t in asked}
        )
        out = []
        for name, parts in wanted.items():
            have = by_topic.get(name, {})
            out.append(
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": have[p].offset if p in have else -1,
                            "committed_leader_epoch": -1,
                            "metadata": (have[p].metadata or "") if p in have else "",
                            "error_code": 0,
                        }
                        for p in parts
                    ],
                }
            )
        return out


async def _ready_value(value: dict[str, Any]) -> dict[str, Any]:
    return value


def _ready(value: dict[str, Any]) -> Awaitable[dict[str, Any]]:
    return _ready_value(value)
