"""Kafka's transactional APIs on the node's one transaction coordinator (:mod:`logstore.transactions`).

The same coordinator serves ``/v1/transactions`` over HTTP, so a transactional
id initialised through one door is fenced by an ``init`` through the other,
and a transaction's records land in the topic tables the same way:

* InitProducerId with a ``transactional_id`` → ``init`` (the epoch bump that
  fences every older holder, aborting its open transaction);
* AddPartitionsToTxn, AddOffsetsToTxn → ``begin`` (the partitions a
  transaction writes are known from its records; the call checks the producer
  id and epoch, the ACLs, and opens the transaction);
* Produce of a transactional record batch → ``produce``: the records are
  staged outside the topic tables (durable when answered, ``base_offset`` -1:
  their offsets come with the commit). Each partition's ``base_sequence`` is
  checked as Kafka's idempotent producer expects (a retry of the last batch
  is answered without staging it twice; a gap ``OUT_OF_ORDER_SEQUENCE_NUMBER``);
* TxnOffsetCommit → ``send_offsets``; EndTxn → ``commit`` / ``abort``;
* DescribeTransactions, ListTransactions → ``describe`` / ``list``
  (``kafka-transactions.sh``).

Errors are Kafka's: ``PRODUCER_FENCED`` (``INVALID_PRODUCER_EPOCH`` for
versions older than the one that introduced it, and in Produce and
TxnOffsetCommit), ``INVALID_PRODUCER_ID_MAPPING`` (a producer id its
transactional id does not hold), ``INVALID_TXN_STATE``,
``CONCURRENT_TRANSACTIONS`` (the previous transaction is still completing:
retriable), ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``. ACLs are the HTTP
API's: ``WRITE`` on the ``transactional_id`` for every call of the producer,
``WRITE`` on the topics it adds, ``READ`` on the group whose offsets it
sends; ``DESCRIBE`` on the ``transactional_id`` to describe or list it.

They are served by a single (embedded) node only: in cluster mode (where
``/v1/transactions`` forwards each id to the node that coordinates it) every
transactional call here answers ``UNSUPPORTED_VERSION``, InitProducerId with a
``transactional_id`` first among them.

Coordinator calls block (staging writes, Delta commits): they run in threads.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from typing import Any

from kafka_api.access import allowed, denial
from kafka_api.protocol import build, response_class
from kafka_api.records import DecodedBatch, engine_records
from logstore.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTxnStateError,
    LogstoreError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
    UnknownServerError,
    UnsupportedVersionError,
)
from logstore.security import Operation, Resource, ResourceType
from logstore.transactions import STATES, TransactionCoordinator, begin_transaction

__all__ = ["TransactionHandlers"]

Handler = Callable[[int, Any], Awaitable[Any]]

_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}
"""API key → first version whose clients know ``PRODUCER_FENCED``; older ones get ``INVALID_PRODUCER_EPOCH``."""
_PREPARING = ("PrepareCommit", "PrepareAbort")


def _tid(name: str) -> Resource:
    return Resource(ResourceType.TRANSACTIONAL_ID, name)


class TransactionHandlers:
    """The transactional APIs of one listener, over ``coordinator``.

    Args:
        coordinator: the node's transaction coordinator (the HTTP API's).
        init_producer_id: the listener's InitProducerId for producers without a ``transactional_id``.
        clustered: the node runs in cluster mode: every transactional call answers ``UNSUPPORTED_VERSION``.
    """

    def __init__(self, coordinator: TransactionCoordinator, init_producer_id: Handler, *, clustered: bool) -> None:
        self.coordinator = coordinator
        self._clustered = clustered
        self._plain_init = init_producer_id
        self._holders: dict[int, str] = {}
        """Producer id → the transactional id holding it (an id keeps its producer id across epochs)."""
        self._sequences: dict[tuple[str, str, int], tuple[int, int]] = {}
        """(transactional id, topic, partition) → (epoch, next base_sequence expected)."""

    # -- helpers -----------------------------------------------------------------------

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    def _code(self, api_key: int, version: int, error: BaseException) -> int:
        """``error`` as the code this API version's clients understand."""
        if isinstance(error, ProducerFencedError):
            if api_key in (0, 28) or version < _FENCED_SINCE.get(api_key, 0):
                return InvalidProducerEpochError.code
            return error.code
        if isinstance(error, TransactionalIdNotFoundError) and api_key != 65:
            return InvalidProducerIdMappingError.code
        return error.code if isinstance(error, LogstoreError) else UnknownServerError.code

    def _single_node(self) -> None:
        """Raises UnsupportedVersionError in cluster mode (see the module docstring)."""
        if self._clustered:
            raise UnsupportedVersionError(
                "the Kafka listener serves transactions on a single (embedded) node only; this node runs in cluster "
                "mode (zookeeper.connect is set): use /v1/transactions over HTTP"
            )

    def _holder(self, producer_id: int) -> str | None:
        """The transactional id holding ``producer_id`` (Kafka's Produce names only the producer id); None if none
        (blocks: it may list the coordinator's ids). Raises UnsupportedVersionError in cluster mode."""
        self._single_node()
        if producer_id not in self._holders:
            for d in self.coordinator.list():
                self._holders[d.producer_id] = d.transactional_id
        return self._holders.get(producer_id)

    def _check_producer(self, tid: str, producer_id: int) -> None:
        """Raises InvalidProducerIdMappingError unless ``tid`` holds ``producer_id``."""
        if self._holder(producer_id) != tid:
            raise InvalidProducerIdMappingError(
                f"producer id {producer_id} is not the one transactional id '{tid}' holds; init it again"
            )

    def _begin(self, tid: str, producer_id: int, epoch: int) -> None:
        self._check_producer(tid, producer_id)
        try:
            begin_transaction(self.coordinator, tid, epoch)
        except InvalidTxnStateError as e:
            if self.coordinator.describe(tid).state in _PREPARING:
                raise ConcurrentTransactionsError(f"transactional id '{tid}' is completing its transaction") from e
            raise

    # -- InitProducerId ------------------------------------------------------------------

    async def init_producer_id(self, version: int, req: Any) -> Any:
        """With a ``transactional_id``: the coordinator's producer id and a new epoch (fencing older ones);
        without one, the listener's idempotent producer ids."""
        tid = req.transactional_id
        if tid is None:
            return await self._plain_init(version, req)
        out = {"throttle_time": 0, "error_code": 0, "producer_id": -1, "producer_epoch": -1}
        try:
            if (error := denial(Operation.WRITE, _tid(tid))) is not None:
                raise error
            self._single_node()
            given = getattr(req, "producer_id", -1)
            if given >= 0:  # a producer bumping its own epoch (KIP-360): it must hold the current one
                d = await self._call(self.coordinator.describe, tid)
                if (d.producer_id, d.producer_epoch) != (given, req.producer_epoch):
                    raise ProducerFencedError(
                        f"producer id {given} epoch {req.producer_epoch} of transactional id '{tid}' is not its "
                        f"current one (epoch {d.producer_epoch})"
                    )
            timeout_ms = int(req.transaction_timeout.total_seconds() * 1000)
            pid, epoch = await self._call(self.coordinator.init, tid, timeout_ms)
            self._holders[pid] = tid
            for key in [k for k in self._sequences if k[0] == tid]:  # the old epoch's sequences: gone with it
                del self._sequences[key]
            out |= {"producer_id": pid, "producer_epoch": epoch}
        except Exception as e:
            out["error_code"] = self._code(22, version, e)
        return build(response_class(22, version), out)

    # -- AddPartitionsToTxn, AddOffsetsToTxn ------------------------------------------------

    async def add_partitions(self, version: int, req: Any) -> Any:
        """Open the transaction for its topics' partitions (v0 to v3: one transaction per request)."""
        tid = req.v3_and_below_transactional_id
        topics = req.v3_and_below_topics
        code = 0
        denied: dict[str, int] = {}
        if (error := denial(Operation.WRITE, _tid(tid))) is not None:
            code = error.code
        else:
            for t in topics:
                if (error := denial(Operation.WRITE, Resource.topic(t.name))) is not None:
                    denied[t.name] = error.code
            if not denied:
                try:
                    await self._call(self._begin, tid, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch)
                except Exception as e:
                    code = self._code(24, version, e)
        operation_not_attempted = 55  # Kafka's answer for the partitions beside a denied one
        results = [
            {
                "name": t.name,
                "results_by_partition": [
                    {
                        "partition_index": p,
                        "partition_error_code": denied.get(t.name, operation_not_attempted if denied else code),
                    }
                    for p in t.partitions
                ],
            }
            for t in topics
        ]
        return build(response_class(24, version), {"throttle_time": 0, "results_by_topic_v3_and_below": results})

    async def add_offsets(self, version: int, req: Any) -> Any:
        """Open the transaction for a group's offsets (they come with TxnOffsetCommit)."""
        try:
            for resource, operation in (
                (_tid(req.transactional_id), Operation.WRITE),
                (Resource.group(req.group_id), Operation.READ),
            ):
                if (error := denial(operation, resource)) is not None:
                    raise error
            await self._call(self._begin, req.transactional_id, req.producer_id, req.producer_epoch)
            code = 0
        except Exception as e:
            code = self._code(25, version, e)
        return build(response_class(25, version), {"throttle_time": 0, "error_code": code})

    # -- Produce ---------------------------------------------------------------------------

    async def produce(self, topic: str, partition: int, batches: list[DecodedBatch]) -> dict[str, Any]:
        """Stage one partition's transactional batches (its answer: a Produce partition response's fields).

        The caller checked the topic (``WRITE``, it exists, the partition too); runs in the connection's order.
        """
        first = batches[0]
        try:
            if any(not b.transactional or b.control for b in batches) or any(
                (b.producer_id, b.producer_epoch) != (first.producer_id, first.producer_epoch) for b in batches
            ):
                raise InvalidRequestError("a transactional produce carries transactional batches of one producer only")
            tid = await self._call(self._holder, first.producer_id)
            if tid is None:
                raise InvalidProducerIdMappingError(
                    f"producer id {first.producer_id} is held by no transactional id (InitProducerId first)"
                )
            if (error := denial(Operation.WRITE, _tid(tid))) is not None:
                raise error
            key = (tid, topic, partition)
            epoch, expected = self._sequences.get(key, (first.producer_epoch, first.base_sequence))
            if epoch != first.producer_epoch:
                expected = first.base_sequence  # a new epoch starts its sequences afresh
            if first.base_sequence < expected:  # a retry of a batch already staged: not staged twice
                return _placed()
            if first.base_sequence > expected:
                raise OutOfOrderSequenceNumberError(
                    f"{topic}-{partition}: base_sequence {first.base_sequence} of transactional id '{tid}', "
                    f"expected {expected}"
                )
            parsed = engine_records(batches, partition)
            await self._call(self.coordinator.produce, tid, first.producer_epoch, topic, parsed)
            self._sequences[key] = (first.producer_epoch, first.base_sequence + len(parsed))
        except Exception as e:
            message = e.message if isinstance(e, LogstoreError) else repr(e)
            return {
                "error_code": self._code(0, 0, e),
                "base_offset": -1,
                "log_start_offset": -1,
                "error_message": message,
                "record_errors": [],
            }
        return _placed()

    # -- TxnOffsetCommit, EndTxn -------------------------------------------------------------

    async def txn_offset_commit(self, version: int, req: Any) -> Any:
        """Hold the group's offsets with the transaction; they commit with it (``READ`` on group and topics)."""
        code = 0
        try:
            for resource, operation in (
                (_tid(req.transactional_id), Operation.WRITE),
                (Resource.group(req.group_id), Operation.READ),
                *((Resource.topic(t.name), Operation.READ) for t in req.topics),
            ):
                if (error := denial(operation, resource)) is not None:
                    raise error
            offsets = [(t.name, p.partition_index, p.committed_offset) for t in req.topics for p in t.partitions]

            def send() -> None:
                self._check_producer(req.transactional_id, req.producer_id)
                self.coordinator.send_offsets(req.transactional_id, req.producer_epoch, req.group_id, offsets)

            await self._call(send)
        except Exception as e:
            code = self._code(28, version, e)
        topics = [
            {
                "name": t.name,
                "partitions": [{"partition_index": p.partition_index, "error_code": code} for p in t.partitions],
            }
            for t in req.topics
        ]
        return build(response_class(28, version), {"throttle_time": 0, "topics": topics})

    async def end_txn(self, version: int, req: Any) -> Any:
        """Commit (once every record is visible in the topic tables, and the offsets committed) or abort."""
        tid = req.transactional_id
        try:
            if (error := denial(Operation.WRITE, _tid(tid))) is not None:
                raise error

            def end() -> None:
                self._check_producer(tid, req.producer_id)
                if req.committed:
                    self.coordinator.commit(tid, req.producer_epoch)
                else:
                    self.coordinator.abort(tid, req.producer_epoch)

            await self._call(end)
            code = 0
        except Exception as e:
            code = self._code(26, version, e)
        return build(response_class(26, version), {"throttle_time": 0, "error_code": code})

    # -- DescribeTransactions, ListTransactions --------------------------------------------------

    async def describe_transactions(self, version: int, req: Any) -> Any:
        states = []
        for tid in req.transactional_ids:
            entry: dict[str, Any] = {
                "transactional_id": tid,
                "transaction_state": "",
                "transaction_timeout": 0,
                "transaction_start_time": -1,
                "producer_id": -1,
                "producer_epoch": -1,
                "topics": [],
            }
            try:
                if (error := denial(Operation.DESCRIBE, _tid(tid))) is not None:
                    raise error
                self._single_node()
                d = await self._call(self.coordinator.describe, tid)
            except Exception as e:
                states.append(entry | {"error_code": self._code(65, version, e)})
                continue
            states.append(
                entry
                | {
                    "error_code": 0,
                    "transaction_state": d.state,
                    "transaction_timeout": d.timeout_ms,
                    "transaction_start_time": -1 if d.start_ms is None else d.start_ms,
                    "producer_id": d.producer_id,
                    "producer_epoch": d.producer_epoch,
                    "topics": [{"topic": t, "partitions": ps} for t, ps in sorted(d.topics.items())],
                }
            )
        return build(response_class(65, version), {"throttle_time": 0, "transaction_states": states})

    async def list_transactions(self, version: int, req: Any) -> Any:
        """Every transactional id the principal may ``DESCRIBE``, filtered by state, producer id and (v1) age."""
        try:
            self._single_node()
            listed = await self._call(self.coordinator.list)
        except Exception as e:
            return build(
                response_class(66, version),
                {
                    "throttle_time": 0,
                    "error_code": self._code(66, version, e),
                    "unknown_state_filters": [],
                    "transaction_states": [],
                },
            )
        known = set(STATES)
        states = set(req.state_filters)
        pids = set(req.producer_id_filters)
        min_age = getattr(req, "duration_filter", -1)
        now = datetime.datetime.now(datetime.UTC).timestamp() * 1000
        out = [
            {"transactional_id": d.transactional_id, "producer_id": d.producer_id, "transaction_state": d.state}
            for d in listed
            if (not states or d.state in states)
            and (not pids or d.producer_id in pids)
            and (min_age < 0 or (d.state == "Ongoing" and d.start_ms is not None and now - d.start_ms >= min_age))
            and allowed(Operation.DESCRIBE, _tid(d.transactional_id))
        ]
        return build(
            response_class(66, version),
            {
                "throttle_time": 0,
                "error_code": 0,
                "unknown_state_filters": sorted(states - known),
                "transaction_states": out,
            },
        )


def _placed() -> dict[str, Any]:
    """A staged transactional batch's answer: no offset yet (it comes with the commit)."""
    return {"error_code": 0, "base_offset": -1, "log_append_time": None, "log_start_offset": -1, "record_errors": []}
