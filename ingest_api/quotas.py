"""Quota enforcement as Kafka does it: a client over its byte rate gets its response late, never an error.

:class:`QuotaMiddleware` is a pure ASGI middleware. For a request whose route
declared :func:`ingest_api.deps.quota` it counts the request body (produce)
or the response body (fetch), asks the :class:`~logstore.security.Guard` for
the throttle time, holds the response that long (an ``asyncio`` sleep: other
requests go on) and sends it with ``X-Throttle-Time-Ms``. Every other response
passes through untouched.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from logstore.security import Guard

__all__ = ["THROTTLE_HEADER", "QuotaMiddleware"]

THROTTLE_HEADER = "X-Throttle-Time-Ms"


class QuotaMiddleware:
    def __init__(self, app: ASGIApp, *, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        received = 0
        start: Message | None = None
        body: list[bytes] = []

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
            return message

        async def throttling_send(message: Message) -> None:
            nonlocal start
            marked: Any = scope.get("state", {}).get("quota")
            if marked is None:
                await send(message)
                return
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            kind, principal, client_id = marked
            content = b"".join(body)
            nbytes = received if kind == "producer" else len(content)
            delay_s = self.guard.throttle_s(principal, client_id, kind, nbytes)
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            headers = [*start.get("headers", []), (THROTTLE_HEADER.lower().encode(), str(int(delay_s * 1000)).encode())]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": content, "more_body": False})

        await self.app(scope, counting_receive, throttling_send)
