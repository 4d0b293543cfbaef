"""The FastAPI application: routes, error mapping, lifecycle.

``create_app(config)`` builds an app around a fresh :class:`Broker`. Startup
replays write-ahead logs before ``/readyz`` turns ready; shutdown (SIGTERM
under uvicorn) drains — every pending batch is committed — before the process
exits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ingest_api.broker import Broker
from ingest_api.routes import groups, ops, records, topics
from logstore.config import LogstoreConfig
from logstore.errors import (
    ConcurrentTransactionsError,
    FencedLeaderEpochError,
    GroupIdNotFoundError,
    KafkaStorageError,
    LogstoreError,
    MessageTooLargeError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    RecordListTooLargeError,
    RequestTimedOutError,
    ThrottlingQuotaExceededError,
    TopicAlreadyExistsError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)

__all__ = ["create_app", "status_for"]

_STATUS: list[tuple[type[LogstoreError], int]] = [
    (UnknownTopicOrPartitionError, 404),
    (GroupIdNotFoundError, 404),
    (OffsetOutOfRangeError, 416),
    (MessageTooLargeError, 413),
    (RecordListTooLargeError, 413),
    (RequestTimedOutError, 408),
    (ThrottlingQuotaExceededError, 429),
    (OutOfOrderSequenceNumberError, 409),
    (TopicAlreadyExistsError, 409),
    (NotLeaderOrFollowerError, 503),
    (FencedLeaderEpochError, 503),
    (KafkaStorageError, 503),
    (ConcurrentTransactionsError, 503),
    (UnknownServerError, 500),
]


def status_for(error: LogstoreError) -> int:
    """The HTTP status of a logstore error (400 for invalid input)."""
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 400


def create_app(config: LogstoreConfig) -> FastAPI:
    """The ingest API over the store ``config`` describes."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        broker = Broker(config)
        app.state.broker = broker
        await run_in_threadpool(broker.start)
        try:
            yield
        finally:
            await run_in_threadpool(broker.close)

    app = FastAPI(
        title="logstore",
        version="0.1.0",
        summary="Kafka-style produce, fetch and consumer groups over Delta tables",
        lifespan=lifespan,
    )
    for module in (topics, records, groups, ops):
        app.include_router(module.router)

    @app.exception_handler(LogstoreError)
    async def logstore_error(request: Request, exc: LogstoreError) -> JSONResponse:
        status = status_for(exc)
        request.app.state.broker.metrics.rejected.labels(exc.name).inc()
        headers = {"Retry-After": "1"} if status in (429, 503) else {}
        if isinstance(exc, RecordListTooLargeError | RequestTimedOutError):
            # the body was left unread: closing the connection stops the client sending the rest
            headers["Connection"] = "close"
        return JSONResponse(exc.to_dict(), status_code=status, headers=headers or None)

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
