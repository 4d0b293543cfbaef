"""The transaction coordinator's vocabulary: states, what a commit answers, how an id is checked and placed."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc

from logstore.cluster import group_coordinator
from logstore.errors import (
    InconsistentTopicIdError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    KafkaStorageError,
    LogstoreError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from logstore.log.partitioner import Partitioner
from logstore.log.schema import INPUT_SCHEMA
from logstore.node.broker import Broker
from logstore.storage import is_object_store
from logstore.transactions._staging import Staging
from logstore.transactions._state_log import StateRow
from logstore.wire.json_produce import ParsedRecords

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
)
STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT)
"""Kafka's transaction states, as ``kafka-transactions.sh describe`` shows them."""
COMMITTED_STATES = (PREPARE_COMMIT, COMPLETE_COMMIT)
IDLE = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
OPEN = (ONGOING, PREPARE_COMMIT, PREPARE_ABORT)
_MAX_QUOTED_ID = 200
"""Longest transactional id, in characters once percent-encoded: it names a directory of staged records."""
Appender = Callable[[str, ParsedRecords], tuple[pa.Array, pa.Array]]
"""Appends one topic's batch with acks=all and waits: (partition, offset) of each record; raises LogstoreError."""
TXN_PRODUCER = "__txn."
"""Prefix of the idempotent producer id a commit appends with (``__txn.<producer id>``): reserved, refused to
every produce (docs/transactions.md)."""
DEFAULT_TIMEOUT_MS = 60_000
"""``transaction_timeout_ms`` when ``init`` names none (Kafka's producer default)."""


@dataclass(frozen=True)
class CommittedRange:
    """Where a committed transaction's records landed in one partition: ``first_offset``..``last_offset``."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    """Inclusive; the offsets between are all the transaction's (consecutive)."""


@dataclass(frozen=True)
class TransactionDescription:
    """A transactional id's state, as ``GET /v1/transactions/{tid}`` shows it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    """One of :data:`STATES`."""
    timeout_ms: int
    start_ms: int | None
    """When the open (or last) transaction began, ms since the epoch; None before the first."""
    topics: dict[str, list[int]]
    """The partitions the open (or last) transaction wrote, per topic."""
    update_ms: int
    """When the state last changed, ms since the epoch."""


def coordinates(broker: Broker, tid: str) -> bool:
    """Whether ``broker``'s node coordinates ``tid``: always on a single node; in cluster mode the live node
    :func:`~logstore.cluster.group_coordinator` places it on (rendezvous hashing, as a group's)."""
    cluster = broker.cluster
    if cluster is None:
        return True
    return group_coordinator(tid, [n.node_id for n in cluster.metadata().nodes]) in (None, cluster.node_id)


def check_servable(broker: Broker) -> None:
    """Raises UnsupportedVersionError where transactions are not served: on an object-store root, and in cluster
    mode with security on.

    The state log and the staged records are local files for now; a commit completed by a successor coordinator
    appends its shares at the partitions' leaders with no client request to act for, and a node has no identity
    of its own to forward with.
    """
    if is_object_store(broker.config.root):
        raise UnsupportedVersionError(
            f"transactions are not served on an object-store logstore.root ('{broker.config.root}') "
            "yet (docs/object-storage.md)"
        )
    if broker.cluster is not None and broker.config.security_enabled:
        raise UnsupportedVersionError(
            "transactions in cluster mode (zookeeper.connect) are not served with security.enabled=true: a commit "
            "completed after a failover appends at the partitions' leaders with no client to act for"
        )


def new_producer_id(used: set[int]) -> int:
    """A random producer id not in ``used``.

    Random, not the next number: the topics remember ``__txn.<producer id>``'s sequences in their own logs,
    so an id handed out again after ``_transactions`` was lost would find its first commits taken for
    retries of the old holder's and dropped. 53 bits: a JSON number every client reads exactly.
    """
    while (pid := secrets.randbits(53)) in used:
        pass
    return pid


def local_appender(broker: Broker) -> Appender:
    """The single node's :data:`Appender`: its pipeline of the topic, acks=all, waiting ``request.timeout.ms``."""
    wait_s = broker.config.request_timeout_ms / 1000

    def append(topic: str, parsed: ParsedRecords) -> tuple[pa.Array, pa.Array]:
        committed = broker.pipeline(topic).submit(parsed, "all").committed
        try:
            appended = committed.result(timeout=wait_s)
        except FutureTimeout:
            # The batch stays queued and may land later; completing again is idempotent, so retrying is safe.
            raise KafkaStorageError(
                f"the transaction's records for topic '{topic}' are not committed after "
                f"request.timeout.ms={wait_s * 1000:.0f}; the commit is decided and completes, retry"
            ) from None
        return appended.partitions, appended.offsets

    return append


def check_epoch(row: StateRow, epoch: int) -> None:
    """Raises ProducerFencedError unless ``epoch`` is ``row``'s current one."""
    current = row.producer_epoch
    if epoch != current:
        raise ProducerFencedError(
            f"producer_epoch {epoch} of transactional id '{row.transactional_id}' is not its current "
            f"epoch {current}: a newer producer initialised it, or its transaction timed out or was aborted; "
            "init again"
        )


def first_last(
    topic: str, partitions: pa.Array | list[int], offsets: pa.Array | list[int]
) -> list[tuple[str, int, int, int]]:
    """(topic, partition, first, last offset) per partition of one appended batch."""
    spans: dict[int, tuple[int, int]] = {}
    parts = partitions.to_pylist() if isinstance(partitions, pa.Array) else partitions
    offs = offsets.to_pylist() if isinstance(offsets, pa.Array) else offsets
    for p, o in zip(parts, offs, strict=True):
        first, last = spans.get(p, (o, o))
        spans[p] = (min(first, o), max(last, o))
    return [(topic, p, first, last) for p, (first, last) in sorted(spans.items())]


def ranges(row: StateRow) -> list[CommittedRange]:
    return [CommittedRange(t, p, f, last) for t, p, f, last in row.result]


def describe_row(row: StateRow) -> TransactionDescription:
    return TransactionDescription(
        row.transactional_id,
        row.producer_id,
        row.producer_epoch,
        row.state,
        row.timeout_ms,
        row.start_ms,
        dict(row.partitions),
        row.update_ms,
    )


def check_id(tid: str) -> None:
    """Raises InvalidRequestError for an id that cannot name its own staging directory: empty, too long, with
    control characters, or ``.`` / ``..`` (which would name the staging root or another id's directory)."""
    if not tid or len(quote(tid, safe="")) > _MAX_QUOTED_ID or any(ord(c) < 32 for c in tid) or tid in (".", ".."):
        raise InvalidRequestError(
            f"transactional id must be 1 to {_MAX_QUOTED_ID} characters (percent-encoded) without control "
            f"characters, and not '.' or '..', got {tid!r}"
        )


def check_timeout(timeout_ms: int | None, max_timeout_ms: int) -> int:
    """``timeout_ms`` of an ``init`` (:data:`DEFAULT_TIMEOUT_MS` when None); raises InvalidTransactionTimeoutError
    outside 1..``transaction.max.timeout.ms``."""
    timeout = DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms
    if not 1 <= timeout <= max_timeout_ms:
        raise InvalidTransactionTimeoutError(
            f"transaction_timeout_ms must be between 1 and transaction.max.timeout.ms={max_timeout_ms}, got {timeout}"
        )
    return timeout


def initialised(row: StateRow, epoch: int, timeout_ms: int, now_ms: int) -> StateRow:
    """``row`` after an ``init`` giving it ``epoch``: ``Empty``, nothing of a transaction left."""
    return replace(
        row,
        state=EMPTY,
        producer_epoch=epoch,
        timeout_ms=timeout_ms,
        partitions={},
        group_offsets=[],
        result=[],
        start_ms=None,
        update_ms=now_ms,
    )


def staged_records(topic: str, parsed: ParsedRecords, num_partitions: int, tid: str, n: int, now_ms: int) -> pa.Table:
    """A transactional produce's records as staged (:data:`~logstore.log.schema.INPUT_SCHEMA`): partitioned as a
    produce is (producer ``tid``, sequence ``n``: the request's number in the transaction); a record without a
    timestamp gets ``now_ms``, when it was produced (CreateTime), not when it commits."""
    parts = Partitioner().assign(topic, parsed.keys, parsed.partitions, num_partitions, producer_id=tid, sequence=n)
    now = pa.scalar(now_ms * 1000, pa.timestamp("us", tz="UTC"))
    timestamps = pc.fill_null(parsed.timestamps, now)
    return pa.Table.from_arrays([parts, timestamps, parsed.keys, parsed.values, parsed.headers], schema=INPUT_SCHEMA)


def check_offsets(broker: Broker, group: str, offsets: list[tuple[str, int, int]]) -> None:
    """Check group offsets sent to a transaction: the group named, each topic and partition existing now.

    Not the offset against the partition's [log start, high watermark], which a plain commit checks: as Kafka's
    TxnOffsetCommit, a transaction may commit a position its consumer has not fetched up to yet.

    Raises:
        InvalidRequestError: an empty group name, a negative partition or offset.
        UnknownTopicOrPartitionError: no such topic or partition.
    """
    if not group:
        raise InvalidRequestError("'group' must be a non-empty consumer group name")
    for topic, partition, offset in offsets:
        if offset < 0 or partition < 0:
            raise InvalidRequestError(f"offset {offset} of {topic}/{partition}: partitions and offsets are >= 0")
    for topic in sorted({t for t, _, _ in offsets}):
        count = broker.partition_count(topic, fresh=True)  # UnknownTopicOrPartitionError: no such topic
        for t, p, _ in offsets:
            if t == topic and p >= count:
                raise UnknownTopicOrPartitionError(f"partition {p} of topic '{topic}' does not exist")


def topic_identity(broker: Broker, topic: str) -> tuple[str | None, int] | None:
    """(ID, partition count) of ``topic`` now, read from storage; None: no such topic."""
    catalog = broker.store.catalog
    if not catalog.exists(topic):
        return None
    try:
        return catalog.topic_id(topic), broker.partition_count(topic, fresh=True)
    except UnknownTopicOrPartitionError:  # deleted meanwhile
        return None


def changed_topics(broker: Broker, staged: dict[str, tuple[str | None, int]]) -> LogstoreError | None:
    """Why a transaction that staged records for ``staged`` (topic → (its ID then, the partitions its records
    need)) cannot commit them: a topic deleted, or deleted and created again (another ID, or too few
    partitions), since; None: every one can take them (partitions added meanwhile do not matter)."""
    for topic, (topic_id, needed) in sorted(staged.items()):
        now = topic_identity(broker, topic)
        if now is None:
            return UnknownTopicOrPartitionError(
                f"topic '{topic}' was deleted after the transaction staged records for it: the transaction is aborted"
            )
        if now[0] != topic_id or now[1] < needed:
            return InconsistentTopicIdError(
                f"topic '{topic}' is not the one the transaction staged records for (ID {topic_id}, partitions "
                f"0..{needed - 1}; now ID {now[0]}, {now[1]} partitions): the transaction is aborted"
            )
    return None


def replaced(broker: Broker, topic: str, topic_id: str | None) -> LogstoreError | None:
    """Why a decided commit's share of ``topic`` (ID ``topic_id`` when staged) can never land: the topic deleted,
    or deleted and created again; None: it can."""
    catalog = broker.store.catalog
    if not catalog.exists(topic):
        return UnknownTopicOrPartitionError(f"topic '{topic}' was deleted")
    if topic_id is not None and (now := catalog.topic_id(topic)) != topic_id:
        return InconsistentTopicIdError(f"topic '{topic}' was deleted and created again (ID {now}, was {topic_id})")
    return None


def staged_counts(staged: dict[str, pa.Table]) -> dict[tuple[str, int], int]:
    """Records per (topic, partition) of a transaction's staged records (per topic)."""
    counts: dict[tuple[str, int], int] = {}
    for topic, table in staged.items():
        counted = pc.value_counts(table.column("partition").combine_chunks())
        for p, n in zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True):
            counts[(topic, p)] = n
    return counts


def commit_group_offsets(broker: Broker, group_offsets: list[tuple[str, str, int, int]]) -> None:
    """Commit a decided transaction's ``(group, topic, partition, offset)``s, one commit per group and topic."""
    by_group: dict[tuple[str, str], dict[int, int]] = {}
    for group, topic, partition, offset in group_offsets:
        by_group.setdefault((group, topic), {})[partition] = offset
    for (group, topic), offsets in by_group.items():
        broker.store.offsets.commit(group, topic, offsets)


def staging_gap(staging: Staging, row: StateRow, staged: dict[str, pa.Table] | None = None) -> str | None:
    """How a decided commit's staged records differ from its manifest (:attr:`StateRow.staged`); None: all there,
    or a row without a manifest. Checked before the commit appends anything, so a commit whose staged files were
    lost is never answered as complete. ``staged``: what :meth:`Staging.read` gave, if the caller read it."""
    if not row.staged:
        return None
    files = staging.files(row.transactional_id, row.transaction_seq)
    counts = staged_counts(staging.read(row.transactional_id, row.transaction_seq) if staged is None else staged)
    for topic, partition, n_files, n_records in row.staged:
        if files.get(topic, 0) != n_files or counts.get((topic, partition), 0) != n_records:
            return (
                f"its staged records of {topic}/{partition} are missing ({files.get(topic, 0)} of {n_files} "
                f"files of the topic, {counts.get((topic, partition), 0)} of {n_records} records)"
            )
    return None
