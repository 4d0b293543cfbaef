"""Consumer groups in cluster mode: each group has one coordinator node, any node serves its member routes.

The coordinator of a group is the live node :func:`logstore.cluster.group_coordinator`
picks by rendezvous hashing of the group name (embedded mode: this node). A member
route reaching another node is forwarded there unchanged (method, path, query,
body, ``Accept`` and ``Content-Type`` headers, and the client's identity as
:mod:`ingest_api.internode` carries it) with ``?forward=false``, so a
forward never loops, and its answer (status, body, content type) is returned as is.
With ``?forward=false`` such a node answers ``NOT_COORDINATOR`` (HTTP 421) naming
the coordinator instead.

Transactional ids are placed and forwarded by the same means: the coordinator of
an id is the live node :func:`logstore.cluster.group_coordinator` picks for its
name (:func:`route_to_txn_coordinator`, and a transactional produce).

Listing groups is Kafka's ListGroups fanned out as its AdminClient does: a group's
live members are known only at its coordinator, so a node lists its own and asks
every other live node for theirs (``?forward=false``: theirs only).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Annotated

import httpx
from fastapi import Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from ingest_api.deps import BrokerDep, CoordinatorDep
from ingest_api.internode import identity_headers
from logstore.cluster import NodeInfo, group_coordinator
from logstore.errors import NotCoordinatorError
from logstore.groups.coordinator import GroupCoordinator
from logstore.node.broker import Broker

__all__ = [
    "Forwarded",
    "coordinator_of",
    "forget_moved_groups",
    "forward_to_coordinator",
    "groups_with_members",
    "route_to_coordinator",
    "route_to_txn_coordinator",
]

log = logging.getLogger("logstore.ingest")

_LIST_TIMEOUT_S = 5.0
"""How long a node waits for another node's list of groups before it answers without them."""


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
    await forward_to_coordinator(request, broker, f"group '{group}'", group, coordinator.drop, forward=forward)


async def route_to_txn_coordinator(
    request: Request,
    tid: str,
    broker: BrokerDep,
    forward: Annotated[
        bool, Query(description="cluster mode: false answers 421 NOT_COORDINATOR on a node that does not coordinate")
    ] = True,
) -> None:
    """As :func:`route_to_coordinator`, for a transactional id's calls (``/v1/transactions/{tid}/…``)."""
    transactions = request.app.state.transactions
    await forward_to_coordinator(request, broker, f"transactional id '{tid}'", tid, transactions.drop, forward=forward)


async def forward_to_coordinator(
    request: Request,
    broker: Broker,
    what: str,
    key: str,
    drop: Callable[[str], None],
    *,
    forward: bool,
    body: bytes | None = None,
) -> None:
    """Return when this node coordinates ``key`` (a group or transactional id); otherwise forward the request.

    ``drop`` forgets this node's state of ``key``; ``body``: the request's body when it was read already.

    Raises:
        Forwarded: the coordinator's answer, for the app to return unchanged.
        NotCoordinatorError: ``forward`` is false and another node coordinates ``key``, or it cannot be reached.
    """
    if broker.cluster is None:
        return
    node = await coordinator_of(broker, key, str(request.base_url).rstrip("/"))
    if node.node_id == broker.cluster.node_id:
        return
    await run_in_threadpool(drop, key)
    if not forward:
        raise NotCoordinatorError(
            f"node {node.node_id} at {node.url} coordinates {what}", coordinator=(node.node_id, node.url)
        )
    client: httpx.AsyncClient = request.app.state.forwarder.client
    params = httpx.QueryParams([(k, v) for k, v in request.query_params.multi_items() if k != "forward"])
    params = params.add("forward", "false")
    headers = {k: v for k, v in request.headers.items() if k in ("accept", "content-type")} | identity_headers()
    try:
        r = await client.request(
            request.method,
            f"{node.url}{request.url.path}",
            params=params,
            content=await request.body() if body is None else body,
            headers=headers,
        )
    except httpx.HTTPError as e:
        raise NotCoordinatorError(
            f"the coordinator of {what}, node {node.node_id} at {node.url}, cannot be reached: {e!r}; retry"
        ) from e
    raise Forwarded(Response(r.content, status_code=r.status_code, media_type=r.headers.get("content-type")))


async def groups_with_members(
    request: Request, broker: Broker, coordinator: GroupCoordinator, *, everywhere: bool
) -> set[str]:
    """Names of the groups with live members: this node's, and with ``everywhere`` in cluster mode every live node's.

    The other nodes are asked at once, acting for the caller (:mod:`ingest_api.internode`), for
    ``GET /v1/groups?forward=false`` (what they coordinate, and the groups with
    committed offsets, which every node reads from the same table). A node that
    does not answer within 5 s is left out and logged: its groups are moving to
    the live nodes (their members rejoin there) once its ZooKeeper session ends.
    """
    names = set(await run_in_threadpool(coordinator.groups))
    if broker.cluster is None or not everywhere:
        return names
    metadata = await run_in_threadpool(broker.cluster_metadata, str(request.base_url).rstrip("/"))
    client: httpx.AsyncClient = request.app.state.forwarder.client
    headers = identity_headers()

    async def ask(node: NodeInfo) -> list[str]:
        try:
            r = await client.get(
                f"{node.url}/v1/groups", params={"forward": "false"}, headers=headers, timeout=_LIST_TIMEOUT_S
            )
            r.raise_for_status()
            return list(r.json()["groups"])
        except (httpx.HTTPError, ValueError, KeyError) as e:
            log.warning(
                "listing groups: node %d at %s did not answer, its groups are left out: %r", node.node_id, node.url, e
            )
            return []

    others = [n for n in metadata.nodes if n.node_id != broker.cluster.node_id]
    for listed in await asyncio.gather(*(ask(n) for n in others)):
        names.update(listed)
    return names


def forget_moved_groups(coordinator: GroupCoordinator, broker: Broker) -> None:
    """Drop the in-memory state of every group another live node now coordinates (cluster mode)."""
    if broker.cluster is None:
        return
    metadata = broker.cluster.metadata()
    live = [n.node_id for n in metadata.nodes]
    for group in coordinator.groups():
        owner = group_coordinator(group, live)
        if owner is not None and owner != broker.cluster.node_id:
            coordinator.drop(group)
