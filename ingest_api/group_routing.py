"""Consumer groups in cluster mode: each group has one coordinator node, any node serves its member routes.

The coordinator of a group is the live node :func:`logstore.cluster.group_coordinator`
picks by rendezvous hashing of the group name (embedded mode: this node). A member
route reaching another node is forwarded there unchanged (method, path, query,
body, ``Authorization`` and ``Accept`` headers) with ``?forward=false``, so a
forward never loops, and its answer (status, body, content type) is returned as is.
With ``?forward=false`` such a node answers ``NOT_COORDINATOR`` (HTTP 421) naming
the coordinator instead.
"""

from __future__ import annotations

from typing import Annotated

import httpx
from fastapi import Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from ingest_api.broker import Broker
from ingest_api.deps import BrokerDep, CoordinatorDep
from logstore.cluster import NodeInfo, group_coordinator
from logstore.coordinator import Coordinator
from logstore.errors import NotCoordinatorError

__all__ = ["Forwarded", "coordinator_of", "forget_moved_groups", "route_to_coordinator"]


class Forwarded(Exception):
    """The coordinator's answer to a forwarded member request, returned to the client as is."""

    def __init__(self, response: Response) -> None:
        super().__init__("forwarded to the group's coordinator")
        self.response = response


async def coordinator_of(broker: Broker, group: str, self_url: str) -> NodeInfo:
    """The node that coordinates ``group``: by rendezvous hashing over the live nodes (embedded: this node)."""
    metadata = await run_in_threadpool(broker.cluster_metadata, self_url)
    chosen = group_coordinator(group, [n.node_id for n in metadata.nodes])
    node = None if chosen is None else metadata.node(chosen)
    if node is None:  # no live node in ZooKeeper's view (not even this one): answer for ourselves
        return NodeInfo(max(broker.config.node_id, 0), self_url)
    return node


async def route_to_coordinator(
    request: Request,
    group: str,
    broker: BrokerDep,
    coordinator: CoordinatorDep,
    forward: Annotated[
        bool, Query(description="cluster mode: false answers 421 NOT_COORDINATOR on a node that does not coordinate")
    ] = True,
) -> None:
    """Let the request run here when this node coordinates ``group``; otherwise forward it (or refuse).

    A node that finds another coordinates the group drops its own in-memory
    state of the group (the group moved here once and back), so a later return
    of the group does not resurrect stale members.

    Raises:
        Forwarded: the coordinator's answer, for the app to return unchanged.
        NotCoordinatorError: ``forward`` is false and another node coordinates the group, or it cannot be reached.
    """
    if broker.cluster is None:
        return
    node = await coordinator_of(broker, group, str(request.base_url).rstrip("/"))
    if node.node_id == broker.cluster.node_id:
        return
    await run_in_threadpool(coordinator.drop, group)
    if not forward:
        raise NotCoordinatorError(
            f"node {node.node_id} at {node.url} coordinates group '{group}'", coordinator=(node.node_id, node.url)
        )
    client: httpx.AsyncClient = request.app.state.forwarder.client
    params = httpx.QueryParams([(k, v) for k, v in request.query_params.multi_items() if k != "forward"])
    params = params.add("forward", "false")
    headers = {k: v for k, v in request.headers.items() if k in ("authorization", "accept", "content-type")}
    try:
        r = await client.request(
            request.method,
            f"{node.url}{request.url.path}",
            params=params,
            content=await request.body(),
            headers=headers,
        )
    except httpx.HTTPError as e:
        raise NotCoordinatorError(
            f"the coordinator of group '{group}', node {node.node_id} at {node.url}, cannot be reached: {e!r}; retry"
        ) from e
    raise Forwarded(Response(r.content, status_code=r.status_code, media_type=r.headers.get("content-type")))


def forget_moved_groups(coordinator: Coordinator, broker: Broker) -> None:
    """Drop the in-memory state of every group another live node now coordinates (cluster mode)."""
    if broker.cluster is None:
        return
    metadata = broker.cluster.metadata()
    live = [n.node_id for n in metadata.nodes]
    for group in coordinator.groups():
        owner = group_coordinator(group, live)
        if owner is not None and owner != broker.cluster.node_id:
            coordinator.drop(group)
