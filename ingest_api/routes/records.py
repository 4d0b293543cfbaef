"""Produce and fetch records."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any, Literal

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from ingest_api.deps import Access, AccessDep, BrokerDep, allow, allow_auto_create, checks, count_quota
from ingest_api.forwarding import COMMIT_SHARE_HEADER, produce_in_cluster
from ingest_api.group_routing import forward_to_coordinator
from ingest_api.models import FetchResponse, ProduceRequest, ProduceResponse
from logstore.errors import InvalidRequestError, NotLeaderOrFollowerError, RequestTimedOutError
from logstore.log.catalog import validate_topic_name
from logstore.node.broker import Acks, Broker
from logstore.security import Operation, Resource, ResourceType
from logstore.structs import FetchResult
from logstore.transactions import TXN_PRODUCER, TransactionCoordinator
from logstore.wire.arrow_produce import ARROW_STREAM, PRODUCER_ID_HEADER, SEQUENCE_HEADER
from logstore.wire.json_bytes import encode_bytes
from logstore.wire.json_produce import ParsedRecords, parse_arrow

router = APIRouter(prefix="/v1/topics", tags=["records"])


def _inline(model: type[ProduceRequest]) -> dict[str, Any]:
    """The model's JSON schema with its ``$defs`` inlined (the body is read raw, so FastAPI cannot place them)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(x) for x in node]
        return node

    return dict(resolve(schema))


@router.post(
    "/{topic}/records",
    response_model=ProduceResponse,
    responses={202: {"description": "acks=0: accepted in memory"}},
    dependencies=[
        checks(allow(Operation.WRITE, ResourceType.TOPIC, "topic"), allow_auto_create(), count_quota("producer"))
    ],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": _inline(ProduceRequest)},
                ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}},
            },
        }
    },
)
async def produce(
    topic: str,
    request: Request,
    broker: BrokerDep,
    access: AccessDep,
    acks: Acks = "all",
    forward: Annotated[
        bool, Query(description="cluster mode: false answers 421 NOT_LEADER_OR_FOLLOWER instead of forwarding")
    ] = True,
    transactional_id: Annotated[
        str | None, Query(description="produce inside this id's open transaction (the first produce begins it)")
    ] = None,
    producer_epoch: Annotated[int | None, Query(description="with transactional_id: the epoch init gave")] = None,
) -> Response:
    """Produce a batch of records; see docs/design.md §3 for acks, idempotence and limits.

    With ``transactional_id`` the records are staged in the transaction, durably, and answered with
    ``"offset": null``: they reach the topic table, at consecutive offsets per partition, when it commits
    (docs/transactions.md). That needs ``WRITE`` on the ``transactional_id`` too.

    The body is JSON, or with ``Content-Type: application/vnd.apache.arrow.stream``
    an Arrow IPC stream of the records (:mod:`logstore.wire.arrow_produce`). Cluster
    mode: records of partitions another node leads are forwarded to it in that
    Arrow form (:mod:`ingest_api.forwarding`).
    """
    started = time.perf_counter()
    validate_topic_name(topic)
    body = await _read_body(request, broker)
    if request.headers.get("content-type", "").startswith(ARROW_STREAM):
        parsed = parse_arrow(
            body,
            request.headers.get(PRODUCER_ID_HEADER),
            request.headers.get(SEQUENCE_HEADER),
            max_bytes=broker.config.max_request_size,
        )
    else:
        parsed = await request.app.state.parsers.parse(body)
    broker.metrics.produce_stage.labels("parse").observe(time.perf_counter() - started)
    if parsed.producer_id is not None and parsed.producer_id.startswith(TXN_PRODUCER):
        _check_commit_share(request, broker)
    if transactional_id is not None or producer_epoch is not None:
        if transactional_id is not None:  # cluster mode: staged by the id's coordinator
            drop = request.app.state.transactions.drop
            what = f"transactional id '{transactional_id}'"
            await forward_to_coordinator(request, broker, what, transactional_id, drop, forward=forward, body=body)
        return await _produce_in_transaction(request, access, topic, parsed, transactional_id, producer_epoch)
    if broker.cluster is not None:
        parts, placed = await produce_in_cluster(
            broker,
            request.app.state.forwarder,
            topic,
            parsed,
            acks,
            forward=forward,
            authorization=request.headers.get("authorization"),
        )
        broker.metrics.produce_latency.labels(acks).observe(time.perf_counter() - started)
        if acks == "0":
            return Response(status_code=202)
        return _json({"offsets": [{"partition": p, "offset": o} for p, o in zip(parts, placed, strict=True)]})
    pipeline = broker.pipeline_if_open(topic)
    if pipeline is None:  # opening one replays its WAL and may create the topic: off the event loop
        pipeline = await run_in_threadpool(broker.pipeline, topic)
    sub = pipeline.submit(parsed, acks)
    if acks == "0":
        broker.metrics.produce_latency.labels(acks).observe(time.perf_counter() - started)
        return Response(status_code=202)
    if acks == "1" and sub.promised is not None and sub.logged is not None:
        await asyncio.wrap_future(sub.logged)
        response = _offsets_json(sub.partitions, pa.array(sub.promised, pa.int64()))
        ready = sub.times.logged
    else:
        result = await sub.wait_committed(broker.config.request_timeout_ms)
        response = _offsets_json(result.partitions, result.offsets)
        ready = sub.times.answered
    done = time.perf_counter()
    stages = broker.metrics.produce_stage
    if acks == "1" and sub.times.logged:
        stages.labels("wal").observe(sub.times.logged - sub.times.queued)
    if ready:  # the done callback that stamps ``logged`` may not have run yet when the waiter wakes
        stages.labels("ack").observe(done - ready)
    broker.metrics.produce_latency.labels(acks).observe(done - started)
    return response


def _check_commit_share(request: Request, broker: Broker) -> None:
    """Raises InvalidRequestError unless the request is a transaction coordinator's share of a decided commit.

    ``__txn.<producer id>`` is the producer a commit appends with, its sequence the transaction's number: a
    client naming itself so could make a commit look like a retry (its records dropped) or wedge it (a sequence
    gap). A single node's commits never come over HTTP; a cluster's coordinator forwards each partition's share
    to its leader marked :data:`~ingest_api.forwarding.COMMIT_SHARE_HEADER`, honoured only where transactions
    are served in cluster mode (security off, where no caller is authenticated).
    """
    if broker.cluster is None or broker.config.security_enabled or COMMIT_SHARE_HEADER not in request.headers:
        raise InvalidRequestError(
            f"producer_id '{TXN_PRODUCER}…' is reserved: transactions commit with it; name the producer otherwise"
        )


async def _produce_in_transaction(
    request: Request, access: Access, topic: str, parsed: ParsedRecords, tid: str | None, epoch: int | None
) -> Response:
    """Stage the records in ``tid``'s transaction: 200 once durable, each record's partition and a null offset."""
    if tid is None or epoch is None:
        raise InvalidRequestError("a transactional produce names both transactional_id and producer_epoch")
    access.require(Operation.WRITE, Resource(ResourceType.TRANSACTIONAL_ID, tid))
    transactions: TransactionCoordinator = request.app.state.transactions
    parts = await run_in_threadpool(transactions.produce, tid, epoch, topic, parsed)
    return _json({"offsets": [{"partition": p, "offset": None} for p in parts.to_pylist()]})


async def _read_body(request: Request, broker: Broker) -> bytes:
    """The request body, read as it arrives, bounded by ``max.request.size`` and ``request.timeout.ms``.

    Raises:
        RecordListTooLargeError: the declared Content-Length, or the bytes received so far (a chunked
            body declares none), exceed ``max.request.size``; the rest is not read.
        RequestTimedOutError: the body did not arrive in full within ``request.timeout.ms``.
    """
    length = request.headers.get("content-length")
    if length is not None and length.isdigit():
        broker.check_request_size(int(length))
    chunks: list[bytes] = []
    size = 0
    timeout_ms = broker.config.request_timeout_ms
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            async for chunk in request.stream():
                size += len(chunk)
                broker.check_request_size(size)
                chunks.append(chunk)
    except TimeoutError:
        raise RequestTimedOutError(
            f"the request body did not arrive within request.timeout.ms={timeout_ms} ({size} bytes received)"
        ) from None
    return b"".join(chunks)


@router.get(
    "/{topic}/partitions/{partition}/records",
    response_model=FetchResponse,
    dependencies=[checks(allow(Operation.READ, ResourceType.TOPIC, "topic"), count_quota("consumer"))],
)
async def fetch(
    topic: str,
    partition: Annotated[int, Path(ge=0, le=2**31 - 1)],
    broker: BrokerDep,
    offset: Annotated[int, Query(ge=0, le=2**63 - 1)],
    max_records: Annotated[int, Query(ge=1, le=100_000)] = 500,
    max_bytes: Annotated[
        int, Query(ge=1, description="bytes of keys and values, at most fetch.max.bytes; the first record always")
    ] = 1024 * 1024,
    wait_ms: Annotated[int, Query(ge=0, le=60_000)] = 0,
    forward: Annotated[
        bool, Query(description="cluster mode: false answers 421 NOT_LEADER_OR_FOLLOWER on a node that does not lead")
    ] = True,
    isolation_level: Annotated[
        Literal["read_committed", "read_uncommitted"],
        Query(description="accepted for Kafka's clients; both read the same: only committed records are in a table"),
    ] = "read_uncommitted",
) -> Response:
    """Records from ``offset`` on; with ``wait_ms`` waits (long poll) for new ones.

    ``max_bytes`` is capped by the node's ``fetch.max.bytes``, as Kafka's broker caps a fetch.
    In cluster mode any node serves committed records straight from the shared
    Delta table (nothing is forwarded); a long poll wakes at once on this
    node's own commits and within 100 ms on other nodes'.
    """
    validate_topic_name(topic)
    if broker.cluster is not None and not forward:
        leader = broker.leader_of(topic, partition)
        if leader is not None:
            raise NotLeaderOrFollowerError(
                f"node {leader.node_id} leads partition {partition} of topic '{topic}'",
                leader=(leader.node_id, leader.url),
            )
    max_bytes = min(max_bytes, broker.config.fetch_max_bytes)
    result = await broker.poll(
        [topic],
        lambda: run_in_threadpool(broker.fetch, topic, partition, offset, max_records, max_bytes),
        lambda r: len(r.records) > 0,
        wait_ms / 1000,
    )
    return _json(_fetch_body(result))


def _fetch_body(result: FetchResult) -> dict[str, object]:
    recs = result.records
    n = len(recs)
    ts = pc.divide(recs["timestamp"].cast("int64"), 1000).to_pylist()  # µs → ms (timestamps are >= 0)
    no_headers = pc.fill_null(pc.list_value_length(recs["headers"]), 0)
    if n == 0 or pc.max(no_headers).as_py() == 0:
        headers: list[Any] = [{} for _ in range(n)]
    else:
        headers = [_headers_json(h or []) for h in recs["headers"].to_pylist()]
    records = [
        {"partition": p, "offset": o, "timestamp": t, "timestamp_type": tt, "key": k, "value": v, "headers": h}
        for p, o, t, tt, k, v, h in zip(
            recs["partition"].to_pylist(),
            recs["offset"].to_pylist(),
            ts,
            recs["timestamp_type"].to_pylist(),
            _encode_column(recs["key"]),
            _encode_column(recs["value"]),
            headers,
            strict=True,
        )
    ]
    # The last stable offset is the high watermark: an open or aborted transaction has nothing in the table.
    return {
        "records": records,
        "high_watermark": result.high_watermark,
        "last_stable_offset": result.high_watermark,
        "log_start_offset": result.log_start_offset,
    }


def _encode_column(col: pa.ChunkedArray | pa.Array) -> list[Any]:
    """:func:`encode_bytes` of every value; a column that is all valid UTF-8 (the usual case) in one cast."""
    try:
        return list(pc.cast(col, pa.string()).to_pylist())
    except pa.ArrowInvalid:
        return [encode_bytes(b) for b in col.to_pylist()]


def _headers_json(headers: list[dict[str, Any]]) -> dict[str, Any] | list[dict[str, Any]]:
    """An object when the keys are unique (the common case); a list of ``{key, value}`` in order when one repeats.

    Kafka allows a header key more than once; an object would keep only the last.
    """
    pairs = {h["key"]: encode_bytes(h["value"]) for h in headers}
    if len(pairs) == len(headers):
        return pairs
    return [{"key": h["key"], "value": encode_bytes(h["value"])} for h in headers]


def _offsets_json(partitions: pa.Array, offsets: pa.Array) -> Response:
    """``{"offsets": [{"partition": p, "offset": o}, ...]}``, one entry per record in request order.

    Formatted by Arrow kernels into one buffer, not through a Python dict per
    record: an answer to 1,000 records cost the event loop ~0.2 ms the other way.
    """
    if len(partitions) == 0:
        return _json({"offsets": []})
    entries = pc.binary_join_element_wise(
        '{"partition":', pc.cast(partitions, pa.string()), ',"offset":', pc.cast(offsets, pa.string()), "},", ""
    )
    if isinstance(entries, pa.ChunkedArray):
        entries = entries.combine_chunks()
    _, ends, data = entries.buffers()  # int32 end offsets, then the characters of every entry back to back
    bounds = np.frombuffer(ends, np.int32)
    first, last = int(bounds[entries.offset]), int(bounds[entries.offset + len(entries)])
    body = b'{"offsets":[' + memoryview(data)[first : last - 1].tobytes() + b"]}"  # without the last comma
    return Response(body, media_type="application/json")


def _json(body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), media_type="application/json", headers=headers)
