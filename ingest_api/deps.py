"""FastAPI dependencies: the node's broker and group coordinator, injected from app state (never built at import)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ingest_api.broker import Broker
from logstore.coordinator import Coordinator


def get_broker(request: Request) -> Broker:
    broker: Broker = request.app.state.broker
    return broker


BrokerDep = Annotated[Broker, Depends(get_broker)]


def get_coordinator(request: Request) -> Coordinator:
    coordinator: Coordinator = request.app.state.coordinator
    return coordinator


CoordinatorDep = Annotated[Coordinator, Depends(get_coordinator)]
