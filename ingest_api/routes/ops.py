"""Health, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ingest_api.deps import BrokerDep, requires
from logstore.errors import LogstoreError
from logstore.security import Operation, ResourceType

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers (no credentials needed: a probe)."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(broker: BrokerDep) -> Response:
    """Readiness: write-ahead logs replayed, accepting produce requests (no credentials needed: a probe)."""
    if broker.ready:
        return JSONResponse({"status": "ready"})
    return JSONResponse({"status": "starting"}, status_code=503)


@router.get("/metrics", dependencies=[requires(Operation.DESCRIBE, ResourceType.CLUSTER)])
async def metrics(broker: BrokerDep) -> Response:
    """Prometheus text: records and bytes in, latencies, commit sizes, high watermarks, group lag."""
    await run_in_threadpool(_update_lag, broker)
    return Response(generate_latest(broker.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _update_lag(broker: BrokerDep) -> None:
    for group in broker.store.list_groups():
        try:
            rows = broker.store.describe_group(group)
        except LogstoreError:
            continue
        for r in rows:
            broker.metrics.group_lag.labels(r.group, r.topic, str(r.partition)).set(r.lag)
