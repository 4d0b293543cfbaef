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

In cluster mode each transactional id has one coordinator node, the live node
:func:`logstore.cluster.group_coordinator` places it on (as a group); the HTTP
layer forwards every call of the id there. A node that gets an id it does not
hold yet takes it over (:meth:`StateLog.take_over`: the id's next coordinator
epoch fences every later write of a deposed coordinator), reads its newest row,
rolls a ``PrepareCommit`` forward and aborts an open transaction, as a restart
does; its periodic sweep does so for every id placed on it, so a commit decided
before its coordinator died completes without a call. Staged records are on the
shared root; a commit appends each topic's batch through the node's ``append``,
which in cluster mode sends every partition's share to its leader, idempotently.

Calls for one transactional id are serialised; different ids proceed in
parallel. Calls block (staging writes, Delta commits): the HTTP layer runs them
off its event loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import (
    InconsistentTopicIdError,
    InvalidRequestError,
    InvalidTxnStateError,
    KafkaStorageError,
    LogstoreError,
    NotCoordinatorError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)
from logstore.node.broker import Broker
from logstore.transactions._model import (
    COMMITTED_STATES,
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    IDLE,
    ONGOING,
    OPEN,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    STATES,
    TXN_PRODUCER,
    Appender,
    CommittedRange,
    TransactionDescription,
    changed_topics,
    check_epoch,
    check_id,
    check_offsets,
    check_servable,
    check_timeout,
    commit_group_offsets,
    coordinates,
    describe_row,
    first_last,
    initialised,
    local_appender,
    new_producer_id,
    ranges,
    replaced,
    staged_counts,
    staged_records,
    staging_gap,
)
from logstore.transactions._staging import Staging
from logstore.transactions._state_log import StateLog, StateRow
from logstore.wire.json_produce import ParsedRecords

__all__ = [
    "COMMITTED_STATES",
    "STATES",
    "TXN_PRODUCER",
    "Appender",
    "CommittedRange",
    "TransactionCoordinator",
    "TransactionDescription",
    "begin_transaction",
]

log = logging.getLogger("logstore.transactions")


@dataclass
class _Txn:
    row: StateRow
    staged: int = 0
    """Files staged by the open transaction (their numbers are 0..staged-1)."""
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    fence: int | None = None
    """Cluster mode: the coordinator epoch this node took the id over with."""
    topics: dict[str, tuple[str | None, int]] = field(default_factory=dict)
    """Each topic the open transaction staged records for: (its ID when it first did, the partitions the
    staged records need: the highest one + 1), what its commit checks the topic against."""
    files: dict[str, int] = field(default_factory=dict)
    """Files staged per topic by the open transaction."""
    records: dict[tuple[str, int], int] = field(default_factory=dict)
    """Records staged per (topic, partition) by the open transaction."""

    def reset(self) -> None:
        """Forget what the open transaction staged and sent (it ended, or another began)."""
        self.staged, self.offsets, self.topics, self.files, self.records = 0, {}, {}, {}, {}

    def note(self, topic: str, topic_id: str | None, records: pa.Table) -> None:
        """Count a file of ``records`` just staged for ``topic`` (ID ``topic_id``)."""
        self.staged += 1
        self.files[topic] = self.files.get(topic, 0) + 1
        for (_, p), n in staged_counts({topic: records}).items():
            self.records[(topic, p)] = self.records.get((topic, p), 0) + n
            self.topics[topic] = (topic_id, max(p + 1, self.topics.get(topic, (None, 0))[1]))

    def manifest(self) -> list[tuple[str, int, int, int]]:
        """:attr:`StateRow.staged` of the open transaction's commit."""
        return [(t, p, self.files[t], n) for (t, p), n in sorted(self.records.items())]

    @property
    def decided(self) -> int | None:
        """The number of the transaction whose commit is decided, if one is."""
        return self.row.transaction_seq if self.row.state == PREPARE_COMMIT else None


class TransactionCoordinator:
    """The coordinator of every transactional id of the node's root (see the module docstring).

    Args:
        broker: the node whose topic pipelines commit the transactions' records.
        clock_ms: wall clock, ms since the epoch (start times and timeouts).
        append: how a commit appends a topic's batch (cluster mode: through each partition's leader);
            None: this node's pipelines.
    """

    def __init__(
        self,
        broker: Broker,
        *,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        append: Appender | None = None,
    ) -> None:
        self._broker = broker
        self._append = append or local_appender(broker)
        self._clock_ms = clock_ms
        self._max_timeout_ms = broker.config.transaction_max_timeout_ms
        self._log = StateLog(broker.config.root, fsync=broker.config.commit_fsync)
        self._staging = Staging(self._log.path, fsync=broker.config.commit_fsync)
        self._txns: dict[str, _Txn] = {}
        self._guard = threading.Lock()
        self._adopting = threading.Lock()
        self._metrics = broker.metrics
        self._metrics.transactions_open.set_function(lambda: len(self.open_transactions()))

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Read ``_transactions`` back: roll every decided commit forward (retried by :meth:`expire` when it
        fails), abort every open transaction. Raises KafkaStorageError: the table could not be read. Cluster
        mode: nothing here; an id is taken over when placed on this node (:meth:`expire`, a call)."""
        if self._broker.cluster is not None:
            return
        for row in self._log.load().values():
            self._recover(row, None)
        for tid in self._staging.staged_ids():
            held = self._txns.get(tid)
            self._staging.keep_only(tid, held.decided if held else None)

    def _recover(self, row: StateRow, fence: int | None) -> _Txn:
        """Hold ``row``'s id: roll a decided commit forward, abort an open transaction (its producer fenced)."""
        txn = _Txn(row, fence=fence)
        with self._guard:
            self._txns[row.transactional_id] = txn
        with txn.lock:
            if row.state == PREPARE_COMMIT:
                self._roll_forward(txn)
            elif row.state in (ONGOING, PREPARE_ABORT):
                # Its group offsets were held in memory only: aborted, and its producer fenced.
                try:
                    self._abort(txn, row.producer_epoch + 1)
                except LogstoreError as e:  # it stays open, and its timeout aborts it
                    log.error("transaction %r: cannot be aborted on recovery (%s)", row.transactional_id, e)
            if fence is not None:  # what earlier transactions of the id left staged
                self._staging.keep_only(row.transactional_id, txn.decided)
        return txn

    def _adopt(self, tid: str, timeout_ms: int | None = None) -> _Txn | None:
        """Cluster mode: take ``tid`` over (fencing its former coordinator) and recover it, once; an id without
        a row: None, or with ``timeout_ms`` (an init) an entry not initialised yet. Raises UnsupportedVersionError
        with security on."""
        check_servable(self._broker)
        with self._adopting:  # one take-over of an id at a time: a second would fence the first
            if (held := self._txns.get(tid)) is not None:  # taken over meanwhile
                return held
            fence, row = self._log.take_over(tid, known_only=timeout_ms is None)
            if row is not None:
                log.info("transactional id %r: taken over (coordinator epoch %d), state %s", tid, fence, row.state)
                return self._recover(row, fence)
            if timeout_ms is None:
                return None
            with self._guard:
                txn = self._txns[tid] = _Txn(self._fresh(tid, timeout_ms), fence=fence)
            return txn

    def drop(self, tid: str) -> None:
        """Forget ``tid`` (cluster mode: another node coordinates it; its writes here would be fenced)."""
        with self._guard:
            self._txns.pop(tid, None)

    def _sweep_cluster(self) -> None:
        """Take over every id placed here whose transaction is not idle; drop those placed elsewhere."""
        for tid in list(self._txns):
            if not coordinates(self._broker, tid):
                self.drop(tid)
        for tid, row in self._log.load().items():
            if row.state not in IDLE and tid not in self._txns and coordinates(self._broker, tid):
                try:
                    self._adopt(tid)
                except LogstoreError as e:
                    log.warning("transactional id %r: not taken over yet (%s)", tid, e)

    def close(self) -> None:
        """Release the state log's files (the node closes after this; open transactions stay as they are)."""
        self._log.close()

    def expire(self) -> None:
        """Abort every transaction open past its timeout (bumping its epoch); retry decided commits left over.

        Called periodically (``transaction.abort.timed.out.transaction.cleanup.interval.ms``).
        """
        if self._broker.cluster is not None:
            self._sweep_cluster()
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
        check_id(tid)
        timeout = check_timeout(timeout_ms, self._max_timeout_ms)
        txn = self._get_or_create(tid, timeout)
        with txn.lock:
            row = txn.row
            if row.state == PREPARE_COMMIT:
                self._complete(txn)
                row = txn.row
            epoch = row.producer_epoch + 1 if row.update_ms >= 0 else 0
            self._write(txn, initialised(row, epoch, timeout, self._clock_ms()))
            if row.state == ONGOING:  # the fenced producer's transaction: aborted
                self._staging.delete(tid, row.transaction_seq)
                txn.reset()
            return txn.row.producer_id, txn.row.producer_epoch

    def produce(self, tid: str, epoch: int, topic: str, parsed: ParsedRecords) -> pa.Array:
        """Stage a produce request's records in ``tid``'s transaction (beginning it); durable when it returns.

        Returns the partition of each record (int32), in request order; their offsets come with the commit.

        Raises:
            TransactionalIdNotFoundError, ProducerFencedError, InvalidTxnStateError: see :meth:`_held`.
            UnknownTopicOrPartitionError, MessageTooLargeError, InvalidTimestampError: the records, as a produce.
            KafkaStorageError: the records could not be staged (nothing of them counts).
        """
        if parsed.producer_id is not None or parsed.sequence is not None:
            raise InvalidRequestError(
                "a transactional produce carries no producer_id or sequence: the transaction is idempotent itself"
            )
        txn = self._held(tid, epoch)
        pipeline = self._broker.pipeline(topic)
        with txn.lock:
            check_epoch(txn.row, epoch)
            records = staged_records(topic, parsed, pipeline.writer.num_partitions, tid, txn.staged, self._clock_ms())
            parts = records.column("partition").combine_chunks()
            pipeline.writer.check_records(records)
            self._begin(txn)
            topic_id = txn.topics[topic][0] if topic in txn.topics else self._broker.store.catalog.topic_id(topic)
            self._staging.write(tid, txn.row.transaction_seq, topic, txn.staged, records)
            txn.note(topic, topic_id, records)
            touched = set(txn.row.partitions.get(topic, [])) | set(pc.unique(parts).to_pylist())
            txn.row = replace(txn.row, partitions={**txn.row.partitions, topic: sorted(touched)})
            return parts

    def send_offsets(self, tid: str, epoch: int, group: str, offsets: list[tuple[str, int, int]]) -> None:
        """Commit ``offsets`` ((topic, partition, next offset to read)) for ``group`` with ``tid``'s transaction.

        Raises:
            TransactionalIdNotFoundError, ProducerFencedError, InvalidTxnStateError: see :meth:`_held`.
            InvalidRequestError, UnknownTopicOrPartitionError: see :func:`check_offsets`.
        """
        txn = self._held(tid, epoch)
        with txn.lock:
            check_epoch(txn.row, epoch)
            check_offsets(self._broker, group, offsets)
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
        txn = self._held(tid, epoch)
        started = time.perf_counter()
        with txn.lock:
            check_epoch(txn.row, epoch)
            state = txn.row.state
            if state == COMPLETE_COMMIT:
                return ranges(txn.row)
            if state == ONGOING:
                if (changed := changed_topics(self._broker, txn.topics)) is not None:  # all or nothing: aborted
                    self._abort(txn, epoch)
                    raise changed
                self._write(
                    txn,
                    replace(
                        txn.row,
                        state=PREPARE_COMMIT,
                        group_offsets=[(g, t, p, o) for (g, t, p), o in sorted(txn.offsets.items())],
                        staged=txn.manifest(),
                        topic_ids={t: i for t, (i, _) in txn.topics.items() if i is not None},
                        update_ms=self._clock_ms(),
                    ),
                )
            elif state != PREPARE_COMMIT:
                raise InvalidTxnStateError(
                    f"transactional id '{tid}' has no open transaction to commit (state {state}); produce first"
                )
            self._complete(txn)
            self._metrics.transaction_commit_latency.observe(time.perf_counter() - started)
            return ranges(txn.row)

    def abort(self, tid: str, epoch: int | None) -> None:
        """Abort ``tid``'s open transaction: nothing of it is ever visible; its staged records are removed.

        ``epoch`` None (an administrator's abort of an open transaction) also bumps the epoch, fencing the
        producer. Aborting when no transaction is open changes nothing.

        Raises:
            TransactionalIdNotFoundError, ProducerFencedError: see :meth:`_held`.
            InvalidTxnStateError: its commit was decided (it is completing).
        """
        txn = self._held(tid, epoch)
        with txn.lock:
            if epoch is not None:
                check_epoch(txn.row, epoch)
            if txn.row.state == PREPARE_COMMIT and (epoch is not None or staging_gap(self._staging, txn.row) is None):
                raise InvalidTxnStateError(f"transactional id '{tid}' is committing: its commit was decided")
            if txn.row.state == PREPARE_COMMIT:  # its staged records are lost: nothing of it was appended
                log.error("transaction %r: decided commit that cannot complete aborted by an administrator", tid)
                self._abort(txn, txn.row.producer_epoch + 1)
            if txn.row.state == ONGOING:
                self._abort(txn, txn.row.producer_epoch + 1 if epoch is None else epoch)

    # -- reading --------------------------------------------------------------------

    def describe(self, tid: str) -> TransactionDescription:
        """The state of ``tid``.

        Raises:
            TransactionalIdNotFoundError: never initialised.
        """
        return describe_row(self._held(tid, None).row)

    def open_transactions(self) -> list[TransactionDescription]:
        """The transactions open now (``Ongoing``, ``PrepareCommit``, ``PrepareAbort``) of the ids this node holds,
        by id: every id on a single node; in cluster mode those it coordinates (took over, until a sweep sees
        another node placed as their coordinator), not the cluster's."""
        with self._guard:
            rows = [t.row for t in self._txns.values() if t.row.state in OPEN]
        return sorted((describe_row(r) for r in rows), key=lambda d: d.transactional_id)

    def list(self) -> list[TransactionDescription]:
        """Every transactional id's state, by id (cluster mode: every node's, from ``_transactions``)."""
        check_servable(self._broker)
        found = self._log.load() if self._broker.cluster is not None else {}
        with self._guard:
            found.update((tid, t.row) for tid, t in self._txns.items())
        rows = [r for r in found.values() if r.update_ms >= 0]  # not those whose init failed
        return sorted((describe_row(r) for r in rows), key=lambda d: d.transactional_id)

    # -- internals --------------------------------------------------------------------

    def _get_or_create(self, tid: str, timeout_ms: int) -> _Txn:
        check_servable(self._broker)
        if self._broker.cluster is not None and (adopted := self._adopt(tid, timeout_ms)) is not None:
            return adopted
        with self._guard:
            txn = self._txns.get(tid)
            if txn is None:
                row = self._fresh(tid, timeout_ms)
                txn = self._txns[tid] = _Txn(row)
            return txn

    def _fresh(self, tid: str, timeout_ms: int) -> StateRow:
        """A row of ``tid`` before its first init (caller holds the guard)."""
        pid = new_producer_id({t.row.producer_id for t in self._txns.values()})
        return StateRow(tid, pid, -1, EMPTY, -1, timeout_ms, {}, [], [], None, -1)

    def _held(self, tid: str, epoch: int | None) -> _Txn:
        """``tid``'s entry.

        Raises:
            TransactionalIdNotFoundError: ``tid`` was never initialised.
            UnsupportedVersionError: see :func:`check_servable`.
        """
        check_servable(self._broker)
        with self._guard:
            txn = self._txns.get(tid)
        if txn is None and self._broker.cluster is not None:
            txn = self._adopt(tid)
        if txn is None or txn.row.update_ms < 0:
            raise TransactionalIdNotFoundError(f"transactional id '{tid}' was never initialised (init it first)")
        return txn

    def _begin(self, txn: _Txn) -> None:
        """Begin a transaction unless one is open (caller holds the lock and checked the epoch)."""
        row = txn.row
        if row.state == ONGOING:
            return
        if row.state not in IDLE:
            raise InvalidTxnStateError(f"transactional id '{row.transactional_id}' is completing a transaction")
        now = self._clock_ms()
        begun = replace(
            row, state=ONGOING, transaction_seq=row.transaction_seq + 1, partitions={}, group_offsets=[], result=[]
        )
        self._write(txn, replace(begun, start_ms=now, update_ms=now))
        txn.reset()

    def _write(self, txn: _Txn, row: StateRow) -> None:
        """Append ``row`` to ``_transactions``, then make it the id's state (caller holds the lock).

        Raises:
            NotCoordinatorError: another node took the id over (cluster mode); this node forgets it.
        """
        try:
            self._log.append(row, fence=txn.fence)
        except NotCoordinatorError:
            self.drop(row.transactional_id)
            raise
        txn.row = row

    def _abort(self, txn: _Txn, epoch: int) -> None:
        row = txn.row
        self._write(txn, replace(row, state=COMPLETE_ABORT, producer_epoch=epoch, update_ms=self._clock_ms()))
        self._staging.delete(row.transactional_id, row.transaction_seq)
        txn.reset()
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
        staged = self._staging.read(tid, row.transaction_seq)
        if (gap := staging_gap(self._staging, row, staged)) is not None:
            raise KafkaStorageError(
                f"transaction '{tid}': {gap}; its commit is decided but cannot complete and nothing of it was "
                "appended: an administrator's abort (producer_epoch null) ends it"
            )
        result: list[tuple[str, int, int, int]] = []
        for topic, records in staged.items():
            parsed = ParsedRecords.from_table(
                records.combine_chunks(), TXN_PRODUCER + str(row.producer_id), row.transaction_seq
            )
            try:
                if (gone := replaced(self._broker, topic, row.topic_ids.get(topic))) is not None:
                    raise gone
                partitions, offsets = self._append(topic, parsed)
            except (UnknownTopicOrPartitionError, InconsistentTopicIdError) as e:  # its records went with the topic
                log.error("transaction %r: its share of topic %r is dropped, decided before (%s)", tid, topic, e)
                continue
            result += first_last(topic, partitions, offsets)
        commit_group_offsets(self._broker, row.group_offsets)
        self._write(txn, replace(row, state=COMPLETE_COMMIT, result=result, update_ms=self._clock_ms()))
        self._metrics.transactions_ended.labels("committed").inc()
        self._staging.delete(tid, row.transaction_seq)
        txn.reset()


def begin_transaction(coordinator: TransactionCoordinator, tid: str, epoch: int) -> None:
    """Begin ``tid``'s transaction unless one is open: Kafka's AddPartitionsToTxn and AddOffsetsToTxn, which open
    it before its first record or offset (over HTTP the first produce does).

    Raises:
        TransactionalIdNotFoundError, ProducerFencedError: as :meth:`TransactionCoordinator.send_offsets`.
        InvalidTxnStateError: its previous transaction is completing (``PrepareCommit``).
        KafkaStorageError: ``_transactions`` could not be written.
    """
    txn = coordinator._held(tid, epoch)
    with txn.lock:
        check_epoch(txn.row, epoch)
        coordinator._begin(txn)
