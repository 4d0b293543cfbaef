"""The transaction coordinator: Kafka's transactional producer, where nothing uncommitted reaches a topic table.

Kafka writes a transaction's records into the partitions as they are produced
and hides them from ``read_committed`` consumers with markers and the last
stable offset. A Delta table has no markers every reader understands, so here
a transaction's records stay out of every topic table until it commits:

* ``init`` bumps the id's epoch (a producer holding an older one is fenced with
  ``PRODUCER_FENCED``; its open transaction is aborted) and gives the id a
  stable producer id the first time.
* A produce inside the transaction checks and partitions its records as a
  produce would, and stages them durably outside the tables
  (:mod:`logstore.transactions._staging`); the first one begins the transaction.
  Group offsets sent to the transaction are held with it.
* ``commit`` writes the decision (``PrepareCommit``) to ``_transactions``
  (:mod:`logstore.transactions._state_log`) before anything else, then appends
  each topic's staged records through the node's committer as **one batch**
  — one Delta commit, so the transaction's records in a partition take
  consecutive offsets — then commits the group offsets, then
  ``CompleteCommit``. The batch is idempotent: its producer id is the
  transaction's (``__txn.<producer id>``) and its sequence the transaction's
  number, so completing a decided commit again (after a crash, or a retry)
  appends nothing that already landed and returns the original offsets.
* ``abort``, a timeout (``transaction_timeout_ms``) and a restart delete the
  staged records; the last two also bump the epoch, so the producer learns of
  it (``PRODUCER_FENCED``) rather than carrying on without its earlier records.
  A restart rolls every ``PrepareCommit`` forward.

Hence the last stable offset of every partition is its high watermark, for
every reader of the table.

One coordinator serves a root, on the single (embedded) node: in cluster mode
every call fails with ``UNSUPPORTED_VERSION``. Calls for one transactional id
are serialised; different ids proceed in parallel. Calls block (staging writes,
Delta commits): the HTTP layer runs them off its event loop.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import (
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaStorageError,
    LogstoreError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from logstore.log.partitioner import Partitioner
from logstore.log.schema import INPUT_SCHEMA
from logstore.node.broker import Broker
from logstore.storage import is_object_store
from logstore.transactions._staging import Staging
from logstore.transactions._state_log import StateLog, StateRow
from logstore.wire.json_produce import ParsedRecords

__all__ = [
    "COMMITTED_STATES",
    "STATES",
    "CommittedRange",
    "TransactionCoordinator",
    "TransactionDescription",
    "begin_transaction",
]

log = logging.getLogger("logstore.transactions")

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
_IDLE = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
_OPEN = (ONGOING, PREPARE_COMMIT, PREPARE_ABORT)
_MAX_QUOTED_ID = 200
"""Longest transactional id, in characters once percent-encoded: it names a directory of staged records."""
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


@dataclass
class _Txn:
    row: StateRow
    staged: int = 0
    """Files staged by the open transaction (their numbers are 0..staged-1)."""
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class TransactionCoordinator:
    """The coordinator of every transactional id of the node's root (see the module docstring).

    Args:
        broker: the node whose topic pipelines commit the transactions' records.
        clock_ms: wall clock, ms since the epoch (start times and timeouts).
    """

    def __init__(self, broker: Broker, *, clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self._broker = broker
        self._clock_ms = clock_ms
        self._max_timeout_ms = broker.config.transaction_max_timeout_ms
        self._commit_wait_s = broker.config.request_timeout_ms / 1000
        self._log = StateLog(broker.config.root, fsync=broker.config.commit_fsync)
        self._staging = Staging(self._log.path, fsync=broker.config.commit_fsync)
        self._txns: dict[str, _Txn] = {}
        self._guard = threading.Lock()
        self._metrics = broker.metrics
        self._metrics.transactions_open.set_function(lambda: len(self.open_transactions()))

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Read ``_transactions`` back: roll every decided commit forward, abort every open transaction.

        A roll forward that fails now (storage) is retried by :meth:`expire`.
        Does nothing in cluster mode.

        Raises:
            KafkaStorageError: ``_transactions`` could not be read.
        """
        if self._broker.cluster is not None:
            return
        rows = self._log.load()
        for tid, row in rows.items():
            txn = _Txn(row)
            self._txns[tid] = txn
            with txn.lock:
                if row.state == PREPARE_COMMIT:
                    self._roll_forward(txn)
                elif row.state in (ONGOING, PREPARE_ABORT):
                    # Its group offsets were held in memory only: aborted, and its producer fenced.
                    try:
                        self._abort(txn, row.producer_epoch + 1)
                    except LogstoreError as e:  # it stays open, and its timeout aborts it
                        log.error("transaction %r: cannot be aborted at start-up (%s)", tid, e)
        for tid in self._staging.staged_ids():
            txn_or_none = self._txns.get(tid)
            keep = txn_or_none.row.transaction_seq if txn_or_none and txn_or_none.row.state == PREPARE_COMMIT else None
            for seq in self._staging.staged_seqs(tid):
                if seq != keep:
                    self._staging.delete(tid, seq)

    def close(self) -> None:
        """Release the state log's files (the node closes after this; open transactions stay as they are)."""
        self._log.close()

    def expire(self) -> None:
        """Abort every transaction open past its timeout (bumping its epoch); retry decided commits left over.

        Called periodically (``transaction.abort.timed.out.transaction.cleanup.interval.ms``).
        """
        if self._broker.cluster is not None:
            return
        now = self._clock_ms()
        with self._guard:
            txns = list(self._txns.values())
        for txn in txns:
            row = txn.row
            late = row.state == ONGOING and row.start_ms is not None and now - row.start_ms > row.timeout_ms
            if not (late or row.state == PREPARE_COMMIT):
                continue
            with txn.lock:
                row = txn.row
                if row.state == PREPARE_COMMIT:
                    self._roll_forward(txn)
                elif row.state == ONGOING and row.start_ms is not None and now - row.start_ms > row.timeout_ms:
                    log.info(
                        "transaction %r: open past its timeout (%d ms): aborted", row.transactional_id, row.timeout_ms
                    )
                    self._abort(txn, row.producer_epoch + 1)

    # -- the producer's calls -----------------------------------------------------------

    def init(self, tid: str, timeout_ms: int | None = None) -> tuple[int, int]:
        """Start (or restart) producer ``tid``: its producer id and new epoch.

        Fences every holder of an older epoch; aborts its open transaction, and
        first completes one whose commit was decided.

        Raises:
            InvalidTransactionTimeoutError: ``timeout_ms`` below 1 or above ``transaction.max.timeout.ms``.
            InvalidRequestError: a bad transactional id.
            KafkaStorageError: ``_transactions`` or a topic could not be written; retry.
        """
        self._single_node()
        _check_id(tid)
        timeout = DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms
        if not 1 <= timeout <= self._max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction_timeout_ms must be between 1 and transaction.max.timeout.ms={self._max_timeout_ms}, "
                f"got {timeout}"
            )
        txn = self._get_or_create(tid, timeout)
        with txn.lock:
            row = txn.row
            if row.state == PREPARE_COMMIT:
                self._complete(txn)
                row = txn.row
            epoch = row.producer_epoch + 1 if row.update_ms >= 0 else 0
            self._write(
                txn,
                replace(
                    row,
                    state=EMPTY,
                    producer_epoch=epoch,
                    timeout_ms=timeout,
                    partitions={},
                    group_offsets=[],
                    result=[],
                    start_ms=None,
                    update_ms=self._clock_ms(),
                ),
            )
            if row.state == ONGOING:  # the fenced producer's transaction: aborted
                self._staging.delete(tid, row.transaction_seq)
                txn.offsets = {}
                txn.staged = 0
            return txn.row.producer_id, txn.row.producer_epoch

    def produce(self, tid: str, epoch: int, topic: str, parsed: ParsedRecords) -> pa.Array:
        """Stage a produce request's records in ``tid``'s transaction (beginning it); durable when it returns.

        Returns the partition of each record (int32), in request order; their offsets come with the commit.

        Raises:
            TransactionalIdNotFoundError, ProducerFencedError, InvalidTxnStateError: see :meth:`_held`.
            UnknownTopicOrPartitionError, MessageTooLargeError, InvalidTimestampError: the records, as a produce.
            KafkaStorageError: the records could not be staged (nothing of them counts).
        """
        self._single_node()
        if parsed.producer_id is not None or parsed.sequence is not None:
            raise InvalidRequestError(
                "a transactional produce carries no producer_id or sequence: the transaction is idempotent itself"
            )
        txn = self._held(tid, epoch)
        pipeline = self._broker.pipeline(topic)
        with txn.lock:
            self._check_epoch(txn, epoch)
            parts = Partitioner().assign(
                topic,
                parsed.keys,
                parsed.partitions,
                pipeline.writer.num_partitions,
                producer_id=tid,
                sequence=txn.staged,
            )
            # A record without a timestamp gets the time it was produced (CreateTime), not its commit's.
            now = pa.scalar(self._clock_ms() * 1000, pa.timestamp("us", tz="UTC"))
            timestamps = pc.fill_null(parsed.timestamps, now)
            records = pa.Table.from_arrays(
                [parts, timestamps, parsed.keys, parsed.values, parsed.headers], schema=INPUT_SCHEMA
            )
            pipeline.writer.check_records(records)
            self._begin(txn)
            self._staging.write(tid, txn.row.transaction_seq, topic, txn.staged, records)
            txn.staged += 1
            touched = set(txn.row.partitions.get(topic, [])) | set(pc.unique(parts).to_pylist())
            txn.row = replace(txn.row, partitions={**txn.row.partitions, topic: sorted(touched)})
            return parts

    def send_offsets(self, tid: str, epoch: int, group: str, offsets: list[tuple[str, int, int]]) -> None:
        """Commit ``offsets`` ((topic, partition, next offset to read)) for ``group`` with ``tid``'s transaction.

        Raises:
            TransactionalIdNotFoundError, ProducerFencedError, InvalidTxnStateError: see :meth:`_held`.
            InvalidRequestError: a negative offset or an empty group name.
        """
        self._single_node()
        if not group:
            raise InvalidRequestError("'group' must be a non-empty consumer group name")
        for topic, partition, offset in offsets:
            if offset < 0 or partition < 0:
                raise InvalidRequestError(f"offset {offset} of {topic}/{partition}: partitions and offsets are >= 0")
        txn = self._held(tid, epoch)
        with txn.lock:
            self._check_epoch(txn, epoch)
            self._begin(txn)
            for topic, partition, offset in offsets:
                txn.offsets[(group, topic, partition)] = offset

    def commit(self, tid: str, epoch: int) -> list[CommittedRange]:
        """Commit ``tid``'s open transaction; where its records landed once they are visible to every reader.

        A retry after an answered (or crashed) commit of the same epoch returns the same ranges.

        Raises:
            TransactionalIdNotFoundError, ProducerFencedError: see :meth:`_held`.
            InvalidTxnStateError: no transaction is open.
            KafkaStorageError, ThrottlingQuotaExceededError: decided but not complete yet; it completes on a retry,
                at the next sweep or after a restart.
        """
        self._single_node()
        txn = self._held(tid, epoch)
        started = time.perf_counter()
        with txn.lock:
            self._check_epoch(txn, epoch)
            state = txn.row.state
            if state == COMPLETE_COMMIT:
                return _ranges(txn.row)
            if state == ONGOING:
                self._write(
                    txn,
                    replace(
                        txn.row,
                        state=PREPARE_COMMIT,
                        group_offsets=[(g, t, p, o) for (g, t, p), o in sorted(txn.offsets.items())],
                        update_ms=self._clock_ms(),
                    ),
                )
            elif state != PREPARE_COMMIT:
                raise InvalidTxnStateError(
                    f"transactional id '{tid}' has no open transaction to commit (state {state}); produce first"
                )
            self._complete(txn)
            self._metrics.transaction_commit_latency.observe(time.perf_counter() - started)
            return _ranges(txn.row)

    def abort(self, tid: str, epoch: int | None) -> None:
        """Abort ``tid``'s open transaction: nothing of it is ever visible; its staged records are removed.

        ``epoch`` None (an administrator's abort of an open transaction) also bumps the epoch, fencing the
        producer. Aborting when no transaction is open changes nothing.

        Raises:
            TransactionalIdNotFoundError, ProducerFencedError: see :meth:`_held`.
            InvalidTxnStateError: its commit was decided (it is completing).
        """
        self._single_node()
        txn = self._held(tid, epoch)
        with txn.lock:
            if epoch is not None:
                self._check_epoch(txn, epoch)
            if txn.row.state == PREPARE_COMMIT:
                raise InvalidTxnStateError(f"transactional id '{tid}' is committing: its commit was decided")
            if txn.row.state == ONGOING:
                self._abort(txn, txn.row.producer_epoch + 1 if epoch is None else epoch)

    # -- reading --------------------------------------------------------------------

    def describe(self, tid: str) -> TransactionDescription:
        """The state of ``tid``.

        Raises:
            TransactionalIdNotFoundError: never initialised.
        """
        self._single_node()
        return _describe(self._held(tid, None).row)

    def open_transactions(self) -> list[TransactionDescription]:
        """The transactions open now (``Ongoing``, ``PrepareCommit``, ``PrepareAbort``), by id; none in cluster mode."""
        with self._guard:
            rows = [t.row for t in self._txns.values() if t.row.state in _OPEN]
        return sorted((_describe(r) for r in rows), key=lambda d: d.transactional_id)

    def list(self) -> list[TransactionDescription]:
        """Every transactional id's state, by id."""
        self._single_node()
        with self._guard:
            rows = [t.row for t in self._txns.values() if t.row.update_ms >= 0]  # not those whose init failed
        return sorted((_describe(r) for r in rows), key=lambda d: d.transactional_id)

    # -- internals --------------------------------------------------------------------

    def _single_node(self) -> None:
        if self._broker.cluster is not None:
            raise UnsupportedVersionError(
                "transactions are served by a single (embedded) node only; this node runs in cluster mode "
                "(zookeeper.connect is set)"
            )
        if is_object_store(self._broker.config.root):  # its state log and staging are local files for now
            raise UnsupportedVersionError(
                f"transactions are not served on an object-store logstore.root ('{self._broker.config.root}') "
                "yet (docs/object-storage.md)"
            )

    def _get_or_create(self, tid: str, timeout_ms: int) -> _Txn:
        with self._guard:
            txn = self._txns.get(tid)
            if txn is None:
                row = StateRow(tid, self._new_producer_id(), -1, EMPTY, -1, timeout_ms, {}, [], [], None, -1)
                txn = self._txns[tid] = _Txn(row)
            return txn

    def _new_producer_id(self) -> int:
        """A random producer id no id of this root holds (caller holds the guard).

        Random, not the next number: the topics remember ``__txn.<producer id>``'s sequences in their own logs,
        so an id handed out again after ``_transactions`` was lost would find its first commits taken for
        retries of the old holder's and dropped. 53 bits: a JSON number every client reads exactly.
        """
        used = {t.row.producer_id for t in self._txns.values()}
        while (pid := secrets.randbits(53)) in used:
            pass
        return pid

    def _held(self, tid: str, epoch: int | None) -> _Txn:
        """``tid``'s entry.

        Raises:
            TransactionalIdNotFoundError: ``tid`` was never initialised.
        """
        with self._guard:
            txn = self._txns.get(tid)
        if txn is None or txn.row.update_ms < 0:
            raise TransactionalIdNotFoundError(f"transactional id '{tid}' was never initialised (init it first)")
        return txn

    @staticmethod
    def _check_epoch(txn: _Txn, epoch: int) -> None:
        current = txn.row.producer_epoch
        if epoch != current:
            raise ProducerFencedError(
                f"producer_epoch {epoch} of transactional id '{txn.row.transactional_id}' is not its current "
                f"epoch {current}: a newer producer initialised it, or its transaction timed out or was aborted; "
                "init again"
            )

    def _begin(self, txn: _Txn) -> None:
        """Begin a transaction unless one is open (caller holds the lock and checked the epoch)."""
        row = txn.row
        if row.state == ONGOING:
            return
        if row.state not in _IDLE:
            raise InvalidTxnStateError(f"transactional id '{row.transactional_id}' is completing a transaction")
        now = self._clock_ms()
        begun = replace(
            row, state=ONGOING, transaction_seq=row.transaction_seq + 1, partitions={}, group_offsets=[], result=[]
        )
        self._write(txn, replace(begun, start_ms=now, update_ms=now))
        txn.staged = 0
        txn.offsets = {}

    def _write(self, txn: _Txn, row: StateRow) -> None:
        """Append ``row`` to ``_transactions``, then make it the id's state (caller holds the lock)."""
        self._log.append(row)
        txn.row = row

    def _abort(self, txn: _Txn, epoch: int) -> None:
        row = txn.row
        self._write(txn, replace(row, state=COMPLETE_ABORT, producer_epoch=epoch, update_ms=self._clock_ms()))
        self._staging.delete(row.transactional_id, row.transaction_seq)
        txn.offsets = {}
        txn.staged = 0
        self._metrics.transactions_ended.labels("aborted").inc()

    def _roll_forward(self, txn: _Txn) -> None:
        """:meth:`_complete`, logging a failure (the next sweep tries again)."""
        try:
            self._complete(txn)
        except LogstoreError as e:
            log.warning(
                "transaction %r: its decided commit is not complete yet (%s); retrying later",
                txn.row.transactional_id,
                e,
            )

    def _complete(self, txn: _Txn) -> None:
        """Append a decided transaction's records and offsets, then write ``CompleteCommit`` (idempotent)."""
        row = txn.row
        tid = row.transactional_id
        result: list[tuple[str, int, int, int]] = []
        for topic, records in self._staging.read(tid, row.transaction_seq).items():
            try:
                pipeline = self._broker.pipeline(topic)
            except UnknownTopicOrPartitionError:
                log.error("transaction %r: topic %r was deleted before its records were committed", tid, topic)
                continue
            parsed = ParsedRecords.from_table(records.combine_chunks(), f"__txn.{row.producer_id}", row.transaction_seq)
            committed = pipeline.submit(parsed, "all").committed
            try:
                appended = committed.result(timeout=self._commit_wait_s)
            except FutureTimeout:
                # The batch stays queued and may land later; completing again is idempotent, so retrying is safe.
                raise KafkaStorageError(
                    f"transaction '{tid}': its records for topic '{topic}' are not committed after "
                    f"request.timeout.ms={self._commit_wait_s * 1000:.0f}; the commit is decided and completes, retry"
                ) from None
            result += _first_last(topic, appended.partitions, appended.offsets)
        by_group: dict[tuple[str, str], dict[int, int]] = {}
        for group, topic, partition, offset in row.group_offsets:
            by_group.setdefault((group, topic), {})[partition] = offset
        for (group, topic), offsets in by_group.items():
            self._broker.store.offsets.commit(group, topic, offsets)
        self._write(txn, replace(row, state=COMPLETE_COMMIT, result=result, update_ms=self._clock_ms()))
        self._metrics.transactions_ended.labels("committed").inc()
        self._staging.delete(tid, row.transaction_seq)
        txn.offsets = {}
        txn.staged = 0


def begin_transaction(coordinator: TransactionCoordinator, tid: str, epoch: int) -> None:
    """Begin ``tid``'s transaction unless one is open: Kafka's AddPartitionsToTxn and AddOffsetsToTxn, which open
    it before its first record or offset (over HTTP the first produce does).

    Raises:
        TransactionalIdNotFoundError, ProducerFencedError: as :meth:`TransactionCoordinator.send_offsets`.
        InvalidTxnStateError: its previous transaction is completing (``PrepareCommit``).
        KafkaStorageError: ``_transactions`` could not be written.
    """
    coordinator._single_node()
    txn = coordinator._held(tid, epoch)
    with txn.lock:
        coordinator._check_epoch(txn, epoch)
        coordinator._begin(txn)


def _first_last(topic: str, partitions: pa.Array, offsets: pa.Array) -> list[tuple[str, int, int, int]]:
    """(topic, partition, first, last offset) per partition of one appended batch."""
    spans: dict[int, tuple[int, int]] = {}
    for p, o in zip(partitions.to_pylist(), offsets.to_pylist(), strict=True):
        first, last = spans.get(p, (o, o))
        spans[p] = (min(first, o), max(last, o))
    return [(topic, p, first, last) for p, (first, last) in sorted(spans.items())]


def _ranges(row: StateRow) -> list[CommittedRange]:
    return [CommittedRange(t, p, f, last) for t, p, f, last in row.result]


def _describe(row: StateRow) -> TransactionDescription:
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


def _check_id(tid: str) -> None:
    if not tid or len(quote(tid, safe="")) > _MAX_QUOTED_ID or any(ord(c) < 32 for c in tid):
        raise InvalidRequestError(
            f"transactional id must be 1 to {_MAX_QUOTED_ID} characters (percent-encoded) without control "
            f"characters, got {tid!r}"
        )
