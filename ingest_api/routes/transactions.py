"""/v1/transactions: Kafka's transactional producer (init, offsets, commit, abort) and its state.

The records of a transaction are produced with ``POST /v1/topics/{t}/records?transactional_id=T&producer_epoch=E``
(:mod:`ingest_api.routes.records`). Every call here needs ``WRITE`` on the resource ``transactional_id`` (describe:
``DESCRIBE``); sending offsets also needs ``READ`` on the group and on each of its topics. In cluster mode a call
of an id runs at its coordinator node, forwarded there (:func:`ingest_api.group_routing.route_to_txn_coordinator`);
the list reads every id's state from ``_transactions``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRouter

from ingest_api.deps import AccessDep, requires
from ingest_api.group_routing import route_to_txn_coordinator
from ingest_api.models import (
    CommittedRangeOut,
    CommitTransactionOut,
    EndTransaction,
    InitTransaction,
    ProducerIdOut,
    TransactionList,
    TransactionOffsets,
    TransactionOut,
    TransactionTopic,
)
from logstore.errors import InvalidRequestError
from logstore.security import Operation, Resource, ResourceType
from logstore.transactions import TransactionCoordinator, TransactionDescription

router = APIRouter(prefix="/v1/transactions", tags=["transactions"])


async def get_transactions(request: Request) -> TransactionCoordinator:
    coordinator: TransactionCoordinator = request.app.state.transactions
    return coordinator


TransactionsDep = Annotated[TransactionCoordinator, Depends(get_transactions)]
_WRITE = [requires(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, "tid"), Depends(route_to_txn_coordinator)]


@router.post("/{tid}/init", response_model=ProducerIdOut, dependencies=_WRITE)
async def init(tid: str, body: InitTransaction, transactions: TransactionsDep) -> ProducerIdOut:
    """``initTransactions``: the id's producer id and a new epoch; older epochs are fenced, their transaction
    aborted."""
    pid, epoch = await run_in_threadpool(transactions.init, tid, body.transaction_timeout_ms)
    return ProducerIdOut(producer_id=pid, producer_epoch=epoch)


@router.post("/{tid}/offsets", dependencies=_WRITE)
async def send_offsets(
    tid: str, body: TransactionOffsets, transactions: TransactionsDep, access: AccessDep
) -> dict[str, str]:
    """``sendOffsetsToTransaction``: the group's offsets commit with the transaction, and only if it commits.

    ``READ`` on the group and on each topic, as a plain commit of them; each topic and partition must exist."""
    access.require(Operation.READ, Resource.group(body.group))
    for topic in sorted({o.topic for o in body.offsets}):  # as a plain commit of them, and Kafka's TxnOffsetCommit
        access.require(Operation.READ, Resource.topic(topic))
    offsets = [(o.topic, o.partition, o.offset) for o in body.offsets]
    await run_in_threadpool(transactions.send_offsets, tid, body.producer_epoch, body.group, offsets)
    return {}


@router.post("/{tid}/commit", response_model=CommitTransactionOut, dependencies=_WRITE)
async def commit(tid: str, body: EndTransaction, transactions: TransactionsDep) -> CommitTransactionOut:
    """``commitTransaction``: answered once every record is in its topic table (consecutive offsets per partition).

    A decided commit completes after any crash; a retry with the same epoch gets the same answer.
    """
    if body.producer_epoch is None:
        raise InvalidRequestError("producer_epoch: a commit names the epoch init gave")
    ranges = await run_in_threadpool(transactions.commit, tid, body.producer_epoch)
    return CommitTransactionOut(
        offsets=[
            CommittedRangeOut(
                topic=r.topic, partition=r.partition, first_offset=r.first_offset, last_offset=r.last_offset
            )
            for r in ranges
        ]
    )


@router.post("/{tid}/abort", dependencies=_WRITE)
async def abort(tid: str, body: EndTransaction, transactions: TransactionsDep) -> dict[str, str]:
    """``abortTransaction``: nothing of the transaction is ever visible; what it staged is removed."""
    await run_in_threadpool(transactions.abort, tid, body.producer_epoch)
    return {}


@router.get("", response_model=TransactionList)
async def list_transactions(transactions: TransactionsDep, access: AccessDep) -> TransactionList:
    """Every transactional id the caller may DESCRIBE, with its state (``kafka-transactions.sh list``)."""
    found = await run_in_threadpool(transactions.list)
    return TransactionList(
        transactions=[
            _out(d)
            for d in found
            if access.may(Operation.DESCRIBE, Resource(ResourceType.TRANSACTIONAL_ID, d.transactional_id))
        ]
    )


@router.get(
    "/{tid}",
    response_model=TransactionOut,
    dependencies=[
        requires(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, "tid"),
        Depends(route_to_txn_coordinator),
    ],
)
async def describe(tid: str, transactions: TransactionsDep) -> TransactionOut:
    """One transactional id's state (``kafka-transactions.sh describe``)."""
    return _out(await run_in_threadpool(transactions.describe, tid))


def _out(d: TransactionDescription) -> TransactionOut:
    return TransactionOut(
        transactional_id=d.transactional_id,
        producer_id=d.producer_id,
        producer_epoch=d.producer_epoch,
        state=d.state,  # type: ignore[arg-type]
        transaction_timeout_ms=d.timeout_ms,
        transaction_start_ms=d.start_ms,
        topics=[TransactionTopic(topic=t, partitions=ps) for t, ps in sorted(d.topics.items())],
        last_update_ms=d.update_ms,
    )
