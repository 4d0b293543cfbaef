"""A topic's effective settings: Kafka's topic-config keys, each falling back to the node's default.

Re-exported by :mod:`logstore.config`, where :class:`~logstore.config.LogstoreConfig` carries the node
defaults of the same keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from logstore._config_keys import apply_overrides
from logstore._config_keys import key as _key

__all__ = [
    "CLEANUP_POLICIES",
    "COMPRESSION_TYPES",
    "DAY_MS",
    "MIB",
    "TIMESTAMP_TYPES",
    "CleanupPolicy",
    "CompressionType",
    "TimestampType",
    "TopicConfig",
]

CleanupPolicy = Literal["delete", "compact", "compact,delete"]
TimestampType = Literal["CreateTime", "LogAppendTime"]
CompressionType = Literal["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
MIB = 1024 * 1024
DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, kw_only=True)
class TopicConfig:
    """A topic's effective settings (Kafka topic-config names in ``key`` metadata).

    Every field falls back to the service default of the same key in
    :class:`LogstoreConfig` when the topic table carries no ``logstore.<key>``
    property.
    """

    retention_ms: int = field(
        default=7 * DAY_MS,
        metadata=_key(
            "retention.ms", "Age in ms after which whole data files are deleted; -1 keeps forever.", minimum=-1
        ),
    )
    retention_bytes: int = field(
        default=-1,
        metadata=_key(
            "retention.bytes", "Bytes kept per partition before the oldest files are deleted; -1: no limit.", minimum=-1
        ),
    )
    cleanup_policy: CleanupPolicy = field(
        default="delete",
        metadata=_key("cleanup.policy", "delete | compact | compact,delete.", choices=CLEANUP_POLICIES),
    )
    segment_bytes: int = field(
        default=128 * MIB,
        metadata=_key("segment.bytes", "Target data-file size in bytes after segment compaction.", minimum=1024),
    )
    message_max_bytes: int = field(
        default=MIB,
        metadata=_key("message.max.bytes", "Largest record (key + value + headers) in bytes.", minimum=1),
    )
    message_timestamp_type: TimestampType = field(
        default="CreateTime",
        metadata=_key(
            "message.timestamp.type",
            "CreateTime keeps the producer's timestamp; LogAppendTime stamps records at commit.",
            choices=TIMESTAMP_TYPES,
        ),
    )
    delete_retention_ms: int = field(
        default=DAY_MS,
        metadata=_key("delete.retention.ms", "How long tombstones survive key compaction, in ms.", minimum=0),
    )
    min_compaction_lag_ms: int = field(
        default=0,
        metadata=_key("min.compaction.lag.ms", "Records younger than this (ms) are never key-compacted.", minimum=0),
    )
    compression_type: CompressionType = field(
        default="producer",
        metadata=_key(
            "compression.type",
            "Codec of the topic's new data files (Parquet): uncompressed | gzip | snappy | lz4 (LZ4_RAW) | zstd; "
            "producer keeps a Kafka client's batch codec, else the node's compression.type (producer there: snappy). "
            "Existing files keep theirs.",
            choices=COMPRESSION_TYPES,
        ),
    )

    @classmethod
    def known_keys(cls) -> tuple[str, ...]:
        """The dotted keys a topic may override."""
        return tuple(f.metadata["key"] for f in dataclasses.fields(cls))

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, Any], defaults: TopicConfig | None = None) -> TopicConfig:
        """Apply dotted-key ``overrides`` (strings or typed values) over ``defaults``.

        Raises:
            InvalidConfigError: a key is not a topic config key, or a value is invalid.
        """
        return apply_overrides(defaults or cls(), overrides, "topic config")

    def to_dict(self) -> dict[str, Any]:
        """Dotted key → value, as ``topics describe`` shows it."""
        return {f.metadata["key"]: getattr(self, f.name) for f in dataclasses.fields(self)}
