"""The transaction coordinator's vocabulary: states, what a commit answers, how an id is checked and placed."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from urllib.parse import quote

import pyarrow as pa

from logstore.cluster import group_coordinator
from logstore.errors import InvalidRequestError, KafkaStorageError, ProducerFencedError, UnsupportedVersionError
from logstore.node.broker import Broker
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
_MAX_QUOTED_ID = 200
"""Longest transactional id, in characters once percent-encoded: it names a directory of staged records."""
Appender = Callable[[str, ParsedRecords], tuple[pa.Array, pa.Array]]
"""Appends one topic's batch with acks=all and waits: (partition, offset) of each record; raises LogstoreError."""
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


def check_cluster_servable(broker: Broker) -> None:
    """Raises UnsupportedVersionError in cluster mode with security on.

    A commit completed by a successor coordinator appends its shares at the partitions' leaders with no client
    request to act for, and a node has no identity of its own to forward with.
    """
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
    if not tid or len(quote(tid, safe="")) > _MAX_QUOTED_ID or any(ord(c) < 32 for c in tid):
        raise InvalidRequestError(
            f"transactional id must be 1 to {_MAX_QUOTED_ID} characters (percent-encoded) without control "
            f"characters, got {tid!r}"
        )
