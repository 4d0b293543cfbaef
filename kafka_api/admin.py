"""Kafka's admin APIs — CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, IncrementalAlterConfigs —
on the node's store.

Topics are created, altered and deleted as ``logstore topics`` and the HTTP API
do it (the node's :class:`~logstore.node.broker.Broker` is told, so its
pipelines and partition counts follow; in cluster mode the controller places the
new partitions); configs are the topic's effective ones. ACLs as the HTTP API's:
CREATE on the topic or the cluster, DELETE on the topic, ALTER on the topic
(partitions, configs), DESCRIBE on the topic or the cluster (configs).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafka_api.access import denial
from kafka_api.protocol import build, kafka_uuid, response_class, zero_uuid
from logstore.config import LogstoreConfig, TopicConfig
from logstore.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    LogstoreError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from logstore.log.catalog import validate_topic_name
from logstore.node.broker import Broker
from logstore.security import Operation, Resource

__all__ = ["AdminHandlers"]

_TOPIC, _BROKER = 2, 4
"""DescribeConfigs resource types."""
_DYNAMIC_TOPIC_CONFIG, _DEFAULT_CONFIG = 1, 5
"""DescribeConfigs config sources: set on the topic; the default."""
_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3
"""IncrementalAlterConfigs operations."""


def _raise_if(error: LogstoreError | None) -> None:
    if error is not None:
        raise error


def _config_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _config_type(value: object) -> int:
    """Kafka's ConfigType: BOOLEAN 1, STRING 2, LONG 5."""
    if isinstance(value, bool):
        return 1
    return 5 if isinstance(value, int) else 2


class AdminHandlers:
    """CreateTopics, DeleteTopics and DescribeConfigs of one node's Kafka listener."""

    def __init__(self, broker: Broker, config: LogstoreConfig) -> None:
        self.broker = broker
        self.config = config

    # -- CreateTopics, DeleteTopics ------------------------------------------------------------

    async def create_topics(self, version: int, req: Any) -> Any:
        topics = []
        for t in req.topics:
            entry: dict[str, Any] = {"name": t.name, "topic_id": zero_uuid(), "configs": []}
            try:
                validate_topic_name(t.name)
                _raise_if(denial(Operation.CREATE, Resource.topic(t.name), Resource.cluster()))
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
                _raise_if(denial(Operation.DELETE, Resource.topic(name)))
                if not self.broker.store.catalog.exists(name):
                    raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
                entry["topic_id"] = kafka_uuid(self.broker.store.catalog.topic_id(name))
                await asyncio.to_thread(self.broker.forget, name)
                await asyncio.to_thread(self.broker.store.delete_topic, name)  # its group offsets too, as Kafka
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
                _raise_if(denial(Operation.DESCRIBE, Resource.topic(resource.resource_name)))
                info = self.broker.store.describe_topic(resource.resource_name)
                values = info.config.to_dict()
                overridden = set(info.overrides)
            elif resource.resource_type == _BROKER:
                _raise_if(denial(Operation.DESCRIBE, Resource.cluster()))
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

    # -- CreatePartitions, IncrementalAlterConfigs ---------------------------------------------

    async def create_partitions(self, version: int, req: Any) -> Any:
        """Raise each topic's partition count to ``count`` (ALTER on the topic); ``assignments`` are ignored:
        every node reads every partition from the shared root, and the controller places their leaders."""
        results = []
        for t in req.topics:
            try:
                validate_topic_name(t.name)
                _raise_if(denial(Operation.ALTER, Resource.topic(t.name)))
                current = self.broker.partition_count(t.name, fresh=True)
                if t.count <= current:
                    raise InvalidPartitionsError(
                        f"topic '{t.name}' has {current} partitions; partitions can be added but never removed "
                        f"(asked for {t.count})"
                    )
                if not req.validate_only:
                    await asyncio.to_thread(self.broker.store.catalog.alter_topic, t.name, partitions=t.count)
                    await asyncio.to_thread(self.broker.reconfigure, t.name)
                results.append({"name": t.name, "error_code": 0, "error_message": None})
            except LogstoreError as e:
                results.append({"name": t.name, "error_code": e.code, "error_message": e.message})
        return build(response_class(37, version), {"throttle_time": 0, "results": results})

    async def incremental_alter_configs(self, version: int, req: Any) -> Any:
        """Set, delete, append to or subtract from a topic's config overrides (ALTER on the topic), as
        ``PATCH /v1/topics/{t}`` does; this node's own configs are read-only here."""
        responses = []
        for r in req.resources:
            entry = {"resource_type": r.resource_type, "resource_name": r.resource_name}
            try:
                if r.resource_type != _TOPIC:
                    raise InvalidRequestError(
                        "only topic configs are altered here; a node's configs are set in its config file or "
                        "LOGSTORE_* environment and read at start"
                    )
                validate_topic_name(r.resource_name)
                _raise_if(denial(Operation.ALTER, Resource.topic(r.resource_name)))
                info = await asyncio.to_thread(self.broker.store.describe_topic, r.resource_name)
                changes = _changes(info.config.to_dict(), r.configs)
                merged = {k: v for k, v in ({**info.overrides, **changes}).items() if v is not None}
                TopicConfig.from_overrides(merged, self.config.topic_defaults)  # refuse bad values before writing
                if not req.validate_only:
                    await asyncio.to_thread(self.broker.store.catalog.alter_topic, r.resource_name, config=changes)
                    await asyncio.to_thread(self.broker.reconfigure, r.resource_name)
                responses.append(entry | {"error_code": 0, "error_message": None})
            except LogstoreError as e:
                responses.append(entry | {"error_code": e.code, "error_message": e.message})
        return build(response_class(44, version), {"throttle_time": 0, "responses": responses})


def _changes(effective: dict[str, Any], configs: Any) -> dict[str, str | None]:
    """IncrementalAlterConfigs' operations as overrides to set (a string) or remove (None); APPEND and SUBTRACT
    work on the comma-separated list the key holds now (``cleanup.policy``).

    Raises:
        InvalidConfigError: an unknown operation, or an unknown key.
    """
    out: dict[str, str | None] = {}
    for c in configs:
        if c.name not in TopicConfig.known_keys():
            raise InvalidConfigError(
                f"unknown topic config key '{c.name}'; known keys: {', '.join(TopicConfig.known_keys())}"
            )
        if c.config_operation == _SET:
            out[c.name] = c.value
        elif c.config_operation == _DELETE:
            out[c.name] = None
        elif c.config_operation in (_APPEND, _SUBTRACT):
            now = out.get(c.name) or _config_text(effective.get(c.name, ""))
            items = [v for v in now.split(",") if v]
            given = [v for v in (c.value or "").split(",") if v]
            if c.config_operation == _APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            out[c.name] = ",".join(items)
        else:
            raise InvalidConfigError(f"config operation {c.config_operation} of '{c.name}' is not one of 0-3")
    return out
