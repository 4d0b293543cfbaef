"""FastAPI dependencies: the node's broker, injected from app state (never built at import)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ingest_api.broker import Broker


def get_broker(request: Request) -> Broker:
    broker: Broker = request.app.state.broker
    return broker


BrokerDep = Annotated[Broker, Depends(get_broker)]
