"""Small immutable value types shared by the core and its front ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa

from logstore.config import CompressionType, TopicConfig
from logstore.errors import LogstoreError

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "AppendResult",
    "FetchResult",
    "GroupOffset",
    "GroupTopicPartition",
    "OffsetCommit",
    "PartitionInfo",
    "ProducerBatch",
    "TopicInfo",
    "TopicPartition",
]


OFFSET_BEGINNING = -2
"""A :class:`TopicPartition` offset meaning the partition's log start offset (confluent-kafka's constant)."""
OFFSET_END = -1
"""A :class:`TopicPartition` offset meaning the high watermark: only records produced from now on."""
OFFSET_STORED = -1000
"""A :class:`TopicPartition` offset meaning the group's committed offset (else ``auto.offset.reset``)."""
OFFSET_INVALID = -1001
"""No offset: not set, not consumed yet, or nothing committed."""


@dataclass(frozen=True, order=True, slots=True)
class TopicPartition:
    """One partition of one topic, with an offset where one goes with it (confluent-kafka's ``TopicPartition``).

    Equality, ordering and hashing use ``(topic, partition)`` only, as in
    confluent-kafka: a partition with an offset finds its entry in a dict keyed
    by partitions. ``offset`` is an offset of the partition or one of the
    ``OFFSET_*`` constants; what it means depends on the call (the next offset
    to read for :meth:`~logstore.client.Consumer.position`, a timestamp in ms
    going into :meth:`~logstore.client.Consumer.offsets_for_times`).
    """

    topic: str
    partition: int = -1
    offset: int = field(default=OFFSET_INVALID, compare=False)
    metadata: str | None = field(default=None, compare=False)
    """Commit metadata (as committed with the offset), when there is any."""
    leader_epoch: int | None = field(default=None, compare=False)
    error: LogstoreError | None = field(default=None, compare=False)
    """Set on a partition a call could not answer for (the others are answered)."""


class GroupTopicPartition(NamedTuple):
    """One partition of one topic, as one consumer group's committed offsets are keyed."""

    group: str
    topic: str
    partition: int


class OffsetCommit(NamedTuple):
    """A group's latest commit on one partition."""

    offset: int
    """The next offset to read."""
    commit_time_ms: int
    """When it was committed, ms since the epoch (0 when the remote store does not say)."""
    metadata: str | None


@dataclass(frozen=True)
class PartitionInfo:
    """What ``topics describe`` shows of a partition, at one table version."""

    partition: int
    log_start_offset: int
    """Smallest offset still stored; moves up through retention only."""
    high_watermark: int
    """The offset the next committed record will get; consumers read below it."""
    size_bytes: int
    """Bytes of the partition's data files."""
    num_files: int = 0
    """Data files holding the partition (segments, in Kafka's words)."""
    num_records: int = 0
    """Records stored: the ``numRecords`` statistics of the live data files. Below
    ``high_watermark - log_start_offset`` when key compaction left gaps in the offsets."""


@dataclass(frozen=True)
class TopicInfo:
    """A topic's partitions and effective configuration at one table version."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    config: TopicConfig
    overrides: dict[str, str] = field(default_factory=dict)
    """The config keys set on the topic itself (the rest come from the defaults)."""
    table_version: int = 0
    topic_id: str | None = None
    """The topic's ID (:mod:`logstore.log.topic_id`); None for a topic created before IDs existed."""


@dataclass(frozen=True)
class ProducerBatch:
    """Records from one produce request, partitions already chosen.

    ``records`` follows :data:`logstore.log.schema.INPUT_SCHEMA`. With a
    ``producer_id`` the batch is idempotent: ``sequence`` must be the
    producer's last committed sequence plus one (any value for a new producer);
    a retry of a committed sequence writes nothing and returns its original
    offsets, provided the records land on the same partitions again.
    """

    records: pa.Table
    producer_id: str | None = None
    sequence: int | None = None
    validated: bool = False
    """The records passed :meth:`TopicWriter.check_records` already (sizes, timestamps)."""
    compression: CompressionType | None = None
    """The codec the records came in from a Kafka client (its record batch's); None for HTTP bodies.

    Kept in the data files when the topic's ``compression.type`` is ``producer`` and every batch
    of a commit came in the same codec (:func:`logstore.log.compression.parquet_codec`). Not kept
    in the acks=1 write-ahead log: a replayed batch takes the node's codec."""


@dataclass(frozen=True)
class AppendResult:
    """Where a :class:`ProducerBatch` landed."""

    offsets: pa.Array
    """int64, one per record, in the batch's record order."""
    partitions: pa.Array
    """int32, one per record (the batch's own partition column)."""
    table_version: int
    """The Delta version that committed the records (for a duplicate: the current one)."""
    duplicate: bool = False
    """True when this was a retry of an already committed sequence: nothing was written."""


@dataclass(frozen=True)
class FetchResult:
    """A slice of one partition read at one table version."""

    records: pa.Table
    """Columns of :data:`logstore.log.schema.TOPIC_SCHEMA`, offsets ascending."""
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True)
class GroupOffset:
    """A consumer group's committed position in one partition, with its lag."""

    group: str
    topic: str
    partition: int
    committed_offset: int
    """The next offset the group will read (Kafka semantics)."""
    high_watermark: int
    commit_time_ms: int = 0
    metadata: str | None = None

    @property
    def lag(self) -> int:
        """Records between the committed offset and the high watermark."""
        return max(0, self.high_watermark - self.committed_offset)
