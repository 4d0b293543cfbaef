"""Produce in cluster mode: records go to their partition's leader, here or forwarded.

Any node accepts a produce request. :meth:`Broker.route` picks every record's
partition and groups the records by the node leading it; the share this node
leads is submitted here, every other share is forwarded to its leader with
``?forward=false`` over a warm HTTP connection pool, as an Arrow IPC stream of
the parsed records with their partitions chosen — the Arrow produce body of
:mod:`logstore.wire.arrow_produce`, which clients may send too — so the records are
parsed once, not re-encoded as JSON. The answers (offsets or an error) are merged in record order.

Atomicity: a request whose records all have one leader commits atomically as
in embedded mode. A request split between leaders commits atomically per
leader: when one share fails, the others may have been committed, and the
error is what the client sees. It retries the whole request: an idempotent
one (every share carries its ``producer_id`` and ``sequence``) is checked per
partition, so the shares that landed answer their original offsets and only
the others are written (:mod:`logstore.log.producer_state`).

A forward lasts only until this node's view of the cluster says its leader is
gone: no longer registered (its ZooKeeper session expired) and the partitions
it carries moved to another node. A leader that stopped answering (paused: a
long GC pause, a frozen VM, SIGSTOP) keeps its connections open, so its
requests would otherwise wait for it to resume long after its partitions moved;
they are answered ``NOT_LEADER_OR_FOLLOWER``, naming the new leader when it is
registered, and the client retries there. Like a forward that lost its
connection, such an answer does not say the records were not written: the old
leader may have logged them before it stopped (the new leader replays its
acks=1 frames) or commit them if it resumes before the new leader's claim
fences it; an idempotent retry is answered exactly, a plain one may write them
twice. A leader handing its partitions over stays registered, so its answer is
always awaited.

With ``?forward=false`` a node that does not lead every record's partition
answers ``NOT_LEADER_OR_FOLLOWER`` (HTTP 421) naming a leader, instead of
forwarding.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from typing import Any

import httpx
import orjson
import pyarrow as pa
from anyio import from_thread
from fastapi.concurrency import run_in_threadpool

from ingest_api.internode import identity_headers
from logstore.cluster import ClusterMetadata, NodeInfo
from logstore.errors import (
    ERRORS_BY_NAME,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    UnknownServerError,
)
from logstore.node.accumulator import Acks
from logstore.node.broker import Broker
from logstore.node.routing import Share
from logstore.transactions import TXN_PRODUCER, Appender
from logstore.wire.arrow_produce import (
    ARROW_STREAM,
    PRODUCE_SCHEMA,
    PRODUCER_ID_HEADER,
    SEQUENCE_HEADER,
    encode_produce,
)
from logstore.wire.json_produce import ParsedRecords

__all__ = [
    "COMMIT_SHARE_HEADER",
    "Forwarder",
    "cluster_appender",
    "encode_arrow",
    "produce_here",
    "produce_in_cluster",
    "successor",
]

COMMIT_SHARE_HEADER = "x-logstore-transaction-commit"
"""Marks a forwarded share of a decided transaction's commit (producer ``__txn.<producer id>``, reserved
otherwise; see :func:`ingest_api.routes.records.produce`)."""

Placed = tuple[list[int], list[int | None]]
"""(partitions, offsets) of records in order; an offset is None where acks=1 could not promise one."""


class Forwarder:
    """HTTP connections to the other nodes (one pool per node, kept warm), on the app's event loop.

    Args:
        tls: the node-to-node TLS client context (:func:`ingest_api.internode.node_client_tls`).
    """

    def __init__(self, tls: ssl.SSLContext | None = None, timeout_s: float = 30.0) -> None:
        self._client = httpx.AsyncClient(
            verify=tls if tls is not None else True,
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )

    @property
    def client(self) -> httpx.AsyncClient:
        """The pooled client, for other forwarded requests (group member routes)."""
        return self._client

    async def produce(
        self, leader: NodeInfo, topic: str, parsed: ParsedRecords, acks: Acks, authorization: str | None
    ) -> Placed:
        """Forward records to their leader and return its answer, acting for the request's client.

        The client is named by its ``Authorization`` header, or for a client
        authenticated by its certificate by the forwarded-principal header
        (:mod:`ingest_api.internode`).

        Raises:
            LogstoreError: the leader's error (a leader that moved: NOT_LEADER_OR_FOLLOWER, retriable).
        """
        headers = {"content-type": ARROW_STREAM}
        if parsed.producer_id is not None:
            headers[PRODUCER_ID_HEADER] = parsed.producer_id
            headers[SEQUENCE_HEADER] = str(parsed.sequence)
            if parsed.producer_id.startswith(TXN_PRODUCER):  # only a commit's share gets here (the entry refuses)
                headers[COMMIT_SHARE_HEADER] = "1"
        headers.update(identity_headers() or ({"authorization": authorization} if authorization else {}))
        try:
            r = await self._client.post(
                f"{leader.url}/v1/topics/{topic}/records",
                params={"acks": acks, "forward": "false"},
                content=encode_arrow(parsed),
                headers=headers,
            )
        except httpx.HTTPError as e:
            raise NotLeaderOrFollowerError(
                f"the leader of these records, node {leader.node_id} at {leader.url}, cannot be reached: {e!r}; retry"
            ) from e
        if r.status_code == 202:
            return [], []
        body = orjson.loads(r.content) if r.content else {}
        if r.status_code != 200:
            name = body.get("error_code", "UNKNOWN_SERVER_ERROR")
            message = f"node {leader.node_id}: {body.get('message', r.text)}"
            if name == NotLeaderOrFollowerError.name:
                raise NotLeaderOrFollowerError(message)  # leadership moved meanwhile: the client retries
            raise ERRORS_BY_NAME.get(name, UnknownServerError)(message)
        offsets = body["offsets"]
        return [o["partition"] for o in offsets], [o["offset"] for o in offsets]

    async def close(self) -> None:
        await self._client.aclose()


async def produce_in_cluster(
    broker: Broker,
    forwarder: Forwarder,
    topic: str,
    parsed: ParsedRecords,
    acks: Acks,
    *,
    forward: bool,
    authorization: str | None,
) -> Placed:
    """Submit the records this node leads, forward the others, merge the answers in record order.

    Raises:
        NotLeaderOrFollowerError: ``forward`` is false and another node leads some records
            (``leader`` names it), or a leader could not be reached.
        LogstoreError: as for a produce in embedded mode, per share.
    """
    shares = await run_in_threadpool(broker.route, topic, parsed)
    remote = [s for s in shares if s.leader is not None]
    if remote and not forward:
        leader = remote[0].leader
        assert leader is not None
        raise NotLeaderOrFollowerError(
            f"node {leader.node_id} leads partitions of these records of topic '{topic}'",
            leader=(leader.node_id, leader.url),
        )
    if remote:
        broker.metrics.forwarded_requests.inc(len(remote))
        broker.metrics.forwarded_records.inc(sum(len(s.index) for s in remote))
    answers = await asyncio.gather(
        *(
            produce_here(broker, topic, s.parsed, acks)
            if s.leader is None
            else _forward_while_led(broker, forwarder, topic, s, acks, authorization)
            for s in shares
        )
    )
    if acks == "0":
        return [], []
    return _merge(len(parsed), shares, answers)


async def produce_here(broker: Broker, topic: str, parsed: ParsedRecords, acks: Acks) -> Placed:
    """Submit records to this node's pipeline of ``topic`` and wait for what ``acks`` asks.

    An acks=1 batch promised offsets is answered once its write-ahead log
    frame is fsynced — in cluster mode only while the node's lease holds
    (:meth:`Broker.lease_valid`); otherwise it waits for the commit.
    """
    pipeline = broker.pipeline_if_open(topic)
    if pipeline is None:  # opening one replays its WAL and may create the topic: off the event loop
        pipeline = await run_in_threadpool(broker.pipeline, topic)
    sub = pipeline.submit(parsed, acks)
    if acks == "0":
        return [], []
    partitions, offsets = await sub.acknowledged(broker.lease_valid, broker.config.request_timeout_ms)
    return partitions, list[int | None](offsets)  # REQUEST_TIMED_OUT while commits fail


async def _forward_while_led(
    broker: Broker, forwarder: Forwarder, topic: str, share: Share, acks: Acks, authorization: str | None
) -> Placed:
    """Forward ``share`` to its leader (:meth:`Forwarder.produce`) and await the answer until this node's view
    says that leader is gone.

    Raises:
        NotLeaderOrFollowerError: the leader is no longer registered and a partition of the share moved
            (:func:`successor`) before it answered; the forward is cancelled.
    """
    assert share.leader is not None
    leader = share.leader.node_id
    partitions = sorted(set(share.parsed.partitions.to_pylist()))
    with broker.leadership.listen() as changed:
        call = asyncio.ensure_future(forwarder.produce(share.leader, topic, share.parsed, acks, authorization))
        woken: asyncio.Future[Any] | None = None
        try:
            while not call.done():
                changed.clear()  # before the look: a change during it wakes the wait below at once
                moved = successor(broker.view, topic, partitions, leader)
                if moved is not None:
                    node_id, node = moved
                    raise NotLeaderOrFollowerError(
                        f"node {leader}, the leader of partitions {partitions} of topic '{topic}', did not answer "
                        f"their forwarded records before its session expired; node {node_id} leads them now; the "
                        "records may or may not have been written, retry",
                        leader=None if node is None else (node.node_id, node.url),
                    )
                woken = asyncio.ensure_future(changed.wait())
                await asyncio.wait((call, woken), return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
            return call.result()
        finally:
            call.cancel()
            if woken is not None:
                woken.cancel()


def successor(
    view: ClusterMetadata | None, topic: str, partitions: Sequence[int], leader: int
) -> tuple[int, NodeInfo | None] | None:
    """The node leading one of ``partitions`` of ``topic`` instead of ``leader``, and its registration, once
    ``leader`` is gone from ``view``; None while ``leader`` may still answer.

    Gone means both: not registered (its session expired; a cache being refilled after a lost connection to
    ZooKeeper can miss a live node for a moment, but never moves its partitions) and a partition moved (a
    leader handing partitions over is still registered, and its answer says whether they were committed).
    """
    if view is None or view.node(leader) is not None:
        return None
    for p in partitions:
        state = view.leader(topic, p)
        if state is not None and state.leader != leader:
            return state.leader, view.node(state.leader)
    return None


def cluster_appender(broker: Broker, forwarder: Forwarder) -> Appender | None:
    """How the transaction coordinator appends a committed topic batch in cluster mode (None: embedded mode).

    Each partition's share goes to its leader as any idempotent produce (acks=all, the transaction's producer id
    and sequence), so completing a commit again appends nothing twice. Called from a worker thread of the app's
    event loop (the coordinator's calls run in its thread pool); waits at most ``request.timeout.ms``.
    """
    if broker.cluster is None:
        return None
    timeout_s = broker.config.request_timeout_ms / 1000

    async def append(topic: str, parsed: ParsedRecords) -> tuple[pa.Array, pa.Array]:
        try:
            async with asyncio.timeout(timeout_s):
                parts, offsets = await produce_in_cluster(
                    broker, forwarder, topic, parsed, "all", forward=True, authorization=None
                )
        except TimeoutError:
            raise KafkaStorageError(
                f"the transaction's records for topic '{topic}' are not committed after "
                f"request.timeout.ms={timeout_s * 1000:.0f}; the commit is decided and completes, retry"
            ) from None
        return pa.array(parts, pa.int32()), pa.array(offsets, pa.int64())

    return lambda topic, parsed: from_thread.run(append, topic, parsed)


def _merge(n: int, shares: list[Share], answers: list[Placed]) -> Placed:
    parts: list[int] = [0] * n
    offsets: list[int | None] = [None] * n
    for share, (share_parts, share_offsets) in zip(shares, answers, strict=True):
        for i, p, o in zip(share.index.tolist(), share_parts, share_offsets, strict=True):
            parts[i], offsets[i] = p, o
    return parts, offsets


def encode_arrow(parsed: ParsedRecords) -> bytes:
    """Records with their partitions chosen, as an Arrow produce body (:mod:`logstore.wire.arrow_produce`)."""
    parts = parsed.partitions.cast(pa.int32())
    return encode_produce(
        pa.Table.from_arrays(
            [parts, parsed.timestamps, parsed.keys, parsed.values, parsed.headers], schema=PRODUCE_SCHEMA
        )
    )
