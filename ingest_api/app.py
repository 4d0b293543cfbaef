"""The FastAPI application: routes, error mapping, lifecycle.

``create_app(config)`` builds an app around a fresh :class:`Broker`. Startup
replays write-ahead logs before ``/readyz`` turns ready; shutdown (SIGTERM
under uvicorn) drains — every pending batch is committed — before the process
exits.

With ``security.enabled`` every route but ``/healthz`` and ``/readyz`` (the
OpenAPI document included; the docs pages are off) needs an API key, each route checks the
Kafka ACL it declares (``ingest_api.deps.requires``), and produce and fetch
count against the caller's quota (:class:`ingest_api.quotas.QuotaMiddleware`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, suppress
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from ingest_api.console import mount_console
from ingest_api.console.stats import StatsSampler
from ingest_api.deps import AccessDep
from ingest_api.forwarding import Forwarder, cluster_appender
from ingest_api.group_routing import Forwarded, forget_moved_groups
from ingest_api.internode import node_client_tls
from ingest_api.openapi import markdown_openapi
from ingest_api.parser_pool import Parsers
from ingest_api.quotas import QuotaMiddleware
from ingest_api.routes import (
    admin,
    cluster,
    groups,
    members,
    metadata,
    ops,
    records,
    stats,
    topic_log,
    topics,
    transactions,
)
from logstore.cluster.security_store import open_security_store
from logstore.common.logs import describe
from logstore.config import LogstoreConfig
from logstore.errors import (
    ClusterAuthorizationFailedError,
    ConcurrentTransactionsError,
    FencedLeaderEpochError,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InconsistentTopicIdError,
    InvalidTxnStateError,
    KafkaStorageError,
    LogstoreError,
    MessageTooLargeError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    RecordListTooLargeError,
    RequestTimedOutError,
    SaslAuthenticationFailedError,
    ThrottlingQuotaExceededError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    TransactionalIdNotFoundError,
    UnknownMemberIdError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from logstore.groups.coordinator import GroupCoordinator
from logstore.log.reader import TopicReader
from logstore.node.broker import Broker
from logstore.node.metrics import Metrics
from logstore.security import Guard, PrincipalMapper, parse_super_users
from logstore.transactions import TransactionCoordinator
from logstore.wire.json_produce import parse_produce

__all__ = ["Door", "create_app", "create_guard", "status_for"]

log = logging.getLogger("ingest_api")

_SESSION_SWEEP_S = 0.5
"""How often expired group members are removed when no request of their group comes."""

_STATUS: list[tuple[type[LogstoreError], int]] = [
    (SaslAuthenticationFailedError, 401),
    (TopicAuthorizationFailedError, 403),
    (GroupAuthorizationFailedError, 403),
    (ClusterAuthorizationFailedError, 403),
    (UnknownTopicOrPartitionError, 404),
    (GroupIdNotFoundError, 404),
    (UnknownMemberIdError, 404),
    (IllegalGenerationError, 409),
    (InconsistentGroupProtocolError, 409),
    (GroupSubscribedToTopicError, 409),
    (NonEmptyGroupError, 409),
    (OffsetOutOfRangeError, 416),
    (MessageTooLargeError, 413),
    (RecordListTooLargeError, 413),
    (RequestTimedOutError, 408),
    (ThrottlingQuotaExceededError, 429),
    (OutOfOrderSequenceNumberError, 409),
    (InvalidTxnStateError, 409),
    (ProducerFencedError, 409),
    (TransactionalIdNotFoundError, 404),
    (TransactionalIdAuthorizationFailedError, 403),
    (TopicAlreadyExistsError, 409),
    (NotLeaderOrFollowerError, 503),
    (NotCoordinatorError, 503),
    (FencedLeaderEpochError, 503),
    (InconsistentTopicIdError, 503),
    (KafkaStorageError, 503),
    (ConcurrentTransactionsError, 503),
    (UnknownServerError, 500),
]


def status_for(error: LogstoreError) -> int:
    """The HTTP status of a logstore error (400 for invalid input).

    ``NOT_LEADER_OR_FOLLOWER`` naming the leader and ``NOT_COORDINATOR`` naming
    the group's coordinator (cluster mode, ``?forward=false``) are 421 Misdirected
    Request: the client should send it there.
    """
    if isinstance(error, NotLeaderOrFollowerError) and error.leader is not None:
        return 421
    if isinstance(error, NotCoordinatorError) and error.coordinator is not None:
        return 421
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 400


def create_guard(config: LogstoreConfig) -> Guard | None:
    """The node's security decisions; None when ``security.enabled`` is false.

    Keys, ACLs and quotas are read from :func:`~logstore.cluster.security_store.open_security_store`: ZooKeeper in
    cluster mode (shared by every node, whatever its root), else ``<root>/_security/``. The app closes the store on
    shutdown.

    Raises:
        KafkaStorageError: cluster mode and ZooKeeper could not be reached.
    """
    if not config.security_enabled:
        return None
    return Guard(
        open_security_store(config),
        super_users=parse_super_users(config.super_users),
        quota_window_samples=config.quota_window_num,
        quota_window_sample_s=config.quota_window_size_seconds,
        principal_mapper=PrincipalMapper(config.ssl_principal_mapping_rules),
    )


def _freeze_and_watch_gc(metrics: Metrics) -> Callable[[], None]:
    """Take what start-up built out of the garbage collector's sight, and time every collection from now on.

    A full (generation 2) collection holds the GIL while it scans every tracked
    object, and the modules, classes and functions of FastAPI, pydantic, pyarrow
    and the rest are several hundred thousand of them: each such collection
    stalled every request and commit of the node for ~50 ms, a few times in ten
    seconds of load, which is where much of produce's p99 came from. They live
    as long as the process, so they are frozen (``gc.freeze``: never scanned,
    never freed); collections then scan what requests create. Each collection's
    pause goes to ``logstore_gc_pause_seconds``. Returns what stops the timing.

    What the first requests would import lazily is imported first, so that it
    is frozen too: a parse. (It used to import pandas, ~30k objects that every
    full collection scanned; :func:`~ingest_api.serve.serve` now keeps pandas
    out of the node, :func:`~logstore.wire.json_produce.without_pandas`.)
    """
    parse_produce(b'{"records": [{"key": "k", "value": "v"}]}')
    gc.collect()
    gc.freeze()
    metrics.gc_frozen_objects.set(gc.get_freeze_count())
    started = 0.0

    def timed(phase: str, info: dict[str, int]) -> None:
        nonlocal started
        if phase == "start":
            started = time.perf_counter()
        else:
            metrics.gc_pause.labels(str(info["generation"])).observe(time.perf_counter() - started)

    gc.callbacks.append(timed)
    return lambda: gc.callbacks.remove(timed)


Door = Callable[[Broker, Guard | None, TransactionCoordinator], AbstractAsyncContextManager[None]]
"""Another front end over the node's one :class:`Broker` (the Kafka listener), with the node's security (None when
``security.enabled`` is false) and transaction coordinator: entered once the node has started, left before it
drains."""


def create_app(config: LogstoreConfig, doors: Sequence[Door] = ()) -> FastAPI:
    """The ingest API over the store ``config`` describes, with ``doors`` served on the same broker and event loop."""
    guard = create_guard(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        broker = Broker(config)
        app.state.broker = broker
        app.state.forwarder = Forwarder(node_client_tls(config))
        await run_in_threadpool(broker.start)
        unwatch_gc = _freeze_and_watch_gc(broker.metrics)
        coordinator = GroupCoordinator(broker.store)
        app.state.coordinator = coordinator
        sweeper = asyncio.create_task(_expire_sessions(coordinator, broker))
        txn_coordinator = TransactionCoordinator(broker, append=cluster_appender(broker, app.state.forwarder))
        app.state.transactions = txn_coordinator
        await run_in_threadpool(txn_coordinator.start)  # decided commits roll forward before the node is used
        txn_sweeper = asyncio.create_task(
            _expire_transactions(txn_coordinator, config.transaction_abort_timed_out_transaction_cleanup_interval_ms)
        )
        store = broker.store
        app.state.stats = StatsSampler(
            config.stats_sample_ms,
            store.list_topics,
            lambda name: TopicReader(store.catalog, name),
            store.offsets.committed,
        )
        sampler = asyncio.create_task(app.state.stats.run())
        parsers = Parsers(config.num_parser_processes, broker.metrics)
        app.state.parsers = parsers
        try:
            async with AsyncExitStack() as stack:
                for door in doors:
                    await stack.enter_async_context(door(broker, guard, txn_coordinator))
                yield
        finally:
            for task in (sweeper, sampler, txn_sweeper):
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
            await run_in_threadpool(coordinator.close)
            await run_in_threadpool(txn_coordinator.close)
            await run_in_threadpool(broker.close)
            await app.state.forwarder.close()
            await parsers.close()
            if guard is not None:
                await run_in_threadpool(guard.store.close)  # last: requests still check keys while draining
            unwatch_gc()

    secured = guard is not None
    app = FastAPI(
        title="logstore",
        version="0.1.0",
        summary="Kafka-style produce, fetch and consumer groups over Delta tables",
        lifespan=lifespan,
        # with security on, the schema is served below behind authentication, and the docs pages are off
        # (a browser cannot send the key when Swagger UI loads the schema)
        openapi_url=None if secured else "/openapi.json",
        docs_url=None if secured else "/docs",
        redoc_url=None if secured else "/redoc",
    )
    app.state.guard = guard
    for module in (topics, topic_log, records, groups, members, ops, stats, metadata, admin, cluster, transactions):
        app.include_router(module.router)
    mount_console(app)
    app.openapi = markdown_openapi(app)  # type: ignore[method-assign]
    if guard is not None:
        app.add_middleware(QuotaMiddleware, guard=guard)

        @app.get("/openapi.json", include_in_schema=False)
        async def openapi(access: AccessDep) -> dict[str, Any]:
            return app.openapi()

    @app.exception_handler(LogstoreError)
    async def logstore_error(request: Request, exc: LogstoreError) -> JSONResponse:
        status = status_for(exc)
        request.app.state.broker.metrics.rejected.labels(exc.name).inc()
        headers = {"Retry-After": "1"} if status in (429, 503) else {}
        if status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="logstore"'
        if isinstance(exc, RecordListTooLargeError | RequestTimedOutError):
            # the body was left unread: closing the connection stops the client sending the rest
            headers["Connection"] = "close"
        return JSONResponse(exc.to_dict(), status_code=status, headers=headers or None)

    @app.exception_handler(Forwarded)
    async def forwarded(request: Request, exc: Forwarded) -> Response:
        return exc.response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        message = f"{where}: {first.get('msg', 'invalid request')}" if where else "invalid request"
        return JSONResponse({"error_code": "INVALID_REQUEST", "message": message}, status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error_code": "UNKNOWN_SERVER_ERROR", "message": repr(exc)}, status_code=500)

    return app


async def _expire_sessions(coordinator: GroupCoordinator, broker: Broker) -> None:
    """Remove group members whose session expired, so their partitions and leases do not wait for a request.

    In cluster mode it also drops groups another node now coordinates (:func:`forget_moved_groups`).

    A failed sweep is logged and the next one runs: this task ends only with the app.
    """
    while True:
        await asyncio.sleep(_SESSION_SWEEP_S)
        try:
            await run_in_threadpool(forget_moved_groups, coordinator, broker)
            await run_in_threadpool(coordinator.expire)
        except Exception as e:  # the sweep must outlive any one failure (storage errors are handled per group)
            log.exception("expiring group members failed (%s); retrying in %.1f s", describe(e), _SESSION_SWEEP_S)


async def _expire_transactions(coordinator: TransactionCoordinator, interval_ms: int) -> None:
    """Abort transactions open past their timeout, and finish decided commits a storage error left behind.

    Every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``; a failed sweep is logged and the next
    one runs: this task ends only with the app.
    """
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            await run_in_threadpool(coordinator.expire)
        except Exception as e:  # the sweep must outlive any one failure
            log.exception("expiring transactions failed (%s); retrying in %d ms", describe(e), interval_ms)
