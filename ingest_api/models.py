"""HTTP request and response models (the OpenAPI contract of docs/design.md §3).

Separate from the core's types: these describe JSON on the wire.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

INT64_MAX = 2**63 - 1
Offset = Annotated[int, Field(ge=0, le=INT64_MAX)]
"""An offset, a sequence or a count: 0..2^63-1, like Kafka's int64 fields."""
TimestampMs = Annotated[int, Field(ge=0, le=INT64_MAX // 1000, description="ms since the epoch")]
PartitionCount = Annotated[
    int, Field(ge=-INT64_MAX, le=INT64_MAX, description="1..10000; others are 400 INVALID_PARTITIONS")
]

Bytes = str | dict[str, str] | None
"""A UTF-8 string, or ``{"b64": "…"}`` for binary, or null."""


class Header(BaseModel):
    """One record header; Kafka allows a key more than once."""

    key: str
    value: Bytes


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: Bytes = None
    value: Bytes = None
    partition: Annotated[int, Field(ge=0, le=10_000)] | None = None
    headers: dict[str, Bytes] | list[Header] | None = Field(
        default=None, description='key → value, or a list of {"key", "value"} to repeat a key'
    )
    timestamp: TimestampMs | None = None


class ProduceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    records: list[Record] = Field(min_length=1)
    producer_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        pattern=r"^[^\x00-\x1f\x7f-\x9f]*$",
        description="stable id of an idempotent producer: 1-256 characters, no control characters",
    )
    sequence: Offset | None = Field(default=None, description="per producer and topic: last + 1")


class RecordOffset(BaseModel):
    partition: int
    offset: int


class ProduceResponse(BaseModel):
    offsets: list[RecordOffset]


class CreateTopic(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    partitions: PartitionCount = 1
    config: dict[str, Any] = Field(default_factory=dict)


class AlterTopic(BaseModel):
    model_config = ConfigDict(extra="forbid")
    partitions: PartitionCount | None = None
    config: dict[str, Any] = Field(default_factory=dict, description="a null value removes the override")


class PartitionOut(BaseModel):
    partition: int
    log_start_offset: int
    high_watermark: int
    size_bytes: int
    num_files: int = 0
    """Data files holding the partition (segments, in Kafka's words)."""
    num_records: int = 0
    """Records stored, from the data files' statistics (fewer than the offset span after key compaction)."""


class TopicOut(BaseModel):
    name: str
    topic_id: str | None = Field(
        default=None,
        description="the topic's ID (Kafka's, 22 characters of URL-safe base64): a topic deleted and created "
        "again has a new one; null for a topic created before IDs existed",
    )
    partitions: list[PartitionOut]
    config: dict[str, Any]
    root: str | None = None
    """The store's root (``logstore.root``) as the answering node sees it: Spark's ``logstore.root`` option."""


class TopicList(BaseModel):
    topics: list[str]


class FetchedRecord(BaseModel):
    partition: int
    offset: int
    timestamp: int = Field(description="ms since the epoch")
    timestamp_type: int = Field(
        description="0 = CreateTime (the producer's), 1 = LogAppendTime (the topic's message.timestamp.type)"
    )
    key: Bytes
    value: Bytes
    headers: dict[str, Bytes] | list[Header] = Field(
        description="an object of key → value when every key is unique (the usual case); when a key repeats "
        '(Kafka allows it), a list of {"key", "value"} in the order produced, so none is lost'
    )


class FetchResponse(BaseModel):
    records: list[FetchedRecord]
    high_watermark: int
    last_stable_offset: int
    """Equal to ``high_watermark``: a transaction's records reach the table only when it commits."""
    log_start_offset: int


class GroupPartition(BaseModel):
    partition: int
    committed_offset: int
    high_watermark: int
    lag: int


class GroupTopic(BaseModel):
    topic: str
    partitions: list[GroupPartition]


class GroupOut(BaseModel):
    group: str
    topics: list[GroupTopic]
    members: list[MemberOut] = Field(default_factory=list, description="live members (docs/design.md §9)")


class GroupList(BaseModel):
    groups: list[str]


class CommitOffsets(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str
    partitions: dict[str, Offset] = Field(description="partition number (as a string) → next offset to read")
    metadata: str | None = None


class ResetOffsets(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str
    to: (
        Literal["earliest", "latest"]
        | dict[Literal["timestamp"], TimestampMs]
        | dict[Literal["offset"], Offset]
        | dict[Literal["shift_by"], Annotated[int, Field(ge=-INT64_MAX, le=INT64_MAX)]]
    )
    force: bool = Field(
        False, description="wait for a reader's lease of the topic to be gone instead of refusing at once"
    )
    dry_run: bool = Field(
        False,
        description="compute the new offsets under the same checks and commit nothing; the answer shows the "
        "topic's partitions as they would be",
    )


# -- consumer groups with members (docs/design.md §9) ------------------------------------


class TopicPartitionOut(BaseModel):
    topic: str
    partition: int


class JoinGroup(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    topics: list[str] = Field(min_length=1, description="topics the member subscribes to")
    assignor: Literal["range", "roundrobin", "cooperative-sticky"] = "range"
    session_timeout_ms: int = Field(
        default=45_000, ge=100, le=1_800_000, description="no heartbeat for this long: the member is removed"
    )
    auto_offset_reset: Literal["earliest", "latest"] = Field(
        default="latest",
        alias="auto.offset.reset",
        description="where a partition without a committed offset starts",
    )
    max_poll_interval_ms: int = Field(
        default=300_000,
        ge=1,
        le=2**31 - 1,
        alias="max.poll.interval.ms",
        description="no fetch for this long: the member is removed (it heartbeats but no longer consumes)",
    )


class MemberOut(BaseModel):
    member_id: str
    generation: int = Field(description="the member's generation: its commits must carry it")
    assignment: list[TopicPartitionOut]


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    generation: int | None = Field(
        default=None,
        description="the generation whose assignment the member has applied (revoked partitions released); "
        "omitted: the generation the previous response gave",
    )


class MemberOffset(BaseModel):
    topic: str
    partition: Annotated[int, Field(ge=0, le=2**31 - 1)]
    offset: Offset


class MemberCommit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    generation: int
    offsets: list[MemberOffset] = Field(description="next offset to read, per partition the member owns")


class MemberSeek(BaseModel):
    model_config = ConfigDict(extra="forbid")
    positions: list[MemberOffset] = Field(description="the next offset to fetch, per partition the member owns")


class MemberRecord(FetchedRecord):
    topic: str


class MemberRecords(BaseModel):
    records: list[MemberRecord]


class InitTransaction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    transaction_timeout_ms: int | None = Field(
        default=None,
        description="abort the transaction when it stays open longer (ms); default 60000, "
        "at most transaction.max.timeout.ms",
    )


class ProducerIdOut(BaseModel):
    producer_id: int
    producer_epoch: int


class EndTransaction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    producer_epoch: int | None = Field(
        description="the epoch init gave; abort only: null = an administrator's abort (bumps the epoch, "
        "fencing the producer)"
    )


class TransactionOffset(BaseModel):
    topic: str
    partition: Annotated[int, Field(ge=0, le=2**31 - 1)]
    offset: Offset


class TransactionOffsets(BaseModel):
    model_config = ConfigDict(extra="forbid")
    producer_epoch: int
    group: str
    offsets: list[TransactionOffset] = Field(description="next offset to read, committed with the transaction")


class CommittedRangeOut(BaseModel):
    topic: str
    partition: int
    first_offset: int
    last_offset: int


class CommitTransactionOut(BaseModel):
    offsets: list[CommittedRangeOut]


class TransactionTopic(BaseModel):
    topic: str
    partitions: list[int]


class TransactionOut(BaseModel):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: Literal["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"]
    transaction_timeout_ms: int
    transaction_start_ms: int | None
    topics: list[TransactionTopic]
    last_update_ms: int


class TransactionList(BaseModel):
    transactions: list[TransactionOut]
