"""Kafka's admin APIs — CreateTopics, DeleteTopics, DescribeConfigs — on the node's store.

Topics are created and deleted as ``logstore topics`` and the HTTP API do it
(the node's :class:`~logstore.node.broker.Broker` is told, so its pipelines and
partition counts follow); configs are the topic's effective ones.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafka_api.protocol import build, kafka_uuid, response_class, zero_uuid
from logstore.config import LogstoreConfig
from logstore.errors import (
    InvalidRequestError,
    LogstoreError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from logstore.log.catalog import validate_topic_name
from logstore.node.broker import Broker

__all__ = ["AdminHandlers"]

_TOPIC, _BROKER = 2, 4
"""DescribeConfigs resource types."""
_DYNAMIC_TOPIC_CONFIG, _DEFAULT_CONFIG = 1, 5
"""DescribeConfigs config sources: set on the topic; the default."""


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
