"""/v1/groups/{group}/members: join, heartbeat, fetch, commit, leave (docs/design.md §9).

Thin: the group coordinator (:mod:`logstore.groups.coordinator`) owns membership,
assignment, fencing and positions; records come through ``broker.fetch``.
Access as Kafka's group protocol: READ on the group for every call, and READ
on the topics for join, fetch and commit; fetched bytes count against the
caller's consumer quota.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from ingest_api.deps import Access, AccessDep, BrokerDep, CoordinatorDep, checks, count_quota, requires
from ingest_api.group_routing import route_to_coordinator
from ingest_api.models import Heartbeat, JoinGroup, MemberCommit, MemberOut, MemberRecords, MemberSeek
from ingest_api.routes.records import _fetch_body, _json
from logstore.errors import InvalidRequestError
from logstore.groups.group import MemberState
from logstore.security import Operation, Resource, ResourceType
from logstore.structs import FetchResult, TopicPartition
from logstore.wire.arrow_fetch import ARROW_STREAM, GENERATION_HEADER, encode_member_records

router = APIRouter(
    prefix="/v1/groups/{group}/members",
    tags=["groups"],
    dependencies=[requires(Operation.READ, ResourceType.GROUP, "group"), Depends(route_to_coordinator)],
)


def member_out(state: MemberState, access: Access) -> MemberOut:
    """A member as every answer shows it: its assignment only on topics the caller may DESCRIBE.

    As a group's committed offsets are shown (Kafka's OffsetFetch), so that no answer names
    a topic hidden from the caller: a principal allowed into the group but not onto one of
    its topics sees the members, not that topic. A member's own principal needed READ
    (which implies DESCRIBE) on the topics it joined with, so its own answers lose nothing
    unless its ACLs change.
    """
    visible: dict[str, bool] = {}
    assignment = []
    for tp in state.assignment:
        if tp.topic not in visible:
            visible[tp.topic] = access.may(Operation.DESCRIBE, Resource.topic(tp.topic))
        if visible[tp.topic]:
            assignment.append({"topic": tp.topic, "partition": tp.partition})
    return MemberOut.model_validate(
        {"member_id": state.member_id, "generation": state.generation, "assignment": assignment}
    )


@router.post("", response_model=MemberOut)
async def join(group: str, body: JoinGroup, coordinator: CoordinatorDep, access: AccessDep) -> MemberOut:
    """Join: the member's id, generation and partitions, at once (the others learn by heartbeat)."""
    for topic in body.topics:
        access.require(Operation.READ, Resource.topic(topic))
    state = await run_in_threadpool(
        lambda: coordinator.join(
            group,
            body.topics,
            assignor=body.assignor,
            session_timeout_ms=body.session_timeout_ms,
            auto_offset_reset=body.auto_offset_reset,
            max_poll_interval_ms=body.max_poll_interval_ms,
        )
    )
    return member_out(state, access)


@router.post("/{member}/heartbeat", response_model=MemberOut)
async def heartbeat(
    group: str, member: str, coordinator: CoordinatorDep, access: AccessDep, body: Heartbeat | None = None
) -> MemberOut:
    """Keep the session alive; the response is the member's current generation and assignment."""
    acknowledged = body.generation if body is not None else None
    return member_out(await run_in_threadpool(coordinator.heartbeat, group, member, acknowledged), access)


@router.get(
    "/{member}/records",
    response_model=MemberRecords,
    dependencies=[checks(count_quota("consumer"))],
    responses={
        200: {
            "description": f"JSON; with `Accept: {ARROW_STREAM}`, an Arrow IPC stream (see logstore.wire.arrow_fetch)",
            "content": {ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def records(
    request: Request,
    group: str,
    member: str,
    broker: BrokerDep,
    coordinator: CoordinatorDep,
    access: AccessDep,
    max_records: Annotated[int, Query(ge=1, le=100_000)] = 500,
    max_bytes: Annotated[int, Query(ge=1)] = 1024 * 1024,
    wait_ms: Annotated[int, Query(ge=0, le=60_000)] = 0,
    paused: Annotated[
        list[str] | None, Query(description="partitions not to fetch, as topic:partition (the consumer paused them)")
    ] = None,
) -> Response:
    """Records of the member's partitions from the group's positions; with ``wait_ms`` waits for new ones.

    JSON by default; ``Accept: application/vnd.apache.arrow.stream`` gets an
    Arrow IPC stream instead (:mod:`logstore.wire.arrow_fetch`), which the Python
    ``Consumer`` uses: no per-record JSON on either side.
    """
    joined = await run_in_threadpool(coordinator.member, group, member)
    for topic in joined.topics:
        access.require(Operation.READ, Resource.topic(topic))
    max_bytes = min(max_bytes, broker.config.fetch_max_bytes)
    skip = frozenset(_topic_partition(p) for p in paused or ())
    deadline = time.monotonic() + wait_ms / 1000
    state = joined

    async def look() -> list[tuple[str, FetchResult]]:
        nonlocal state
        slices = await run_in_threadpool(
            lambda: coordinator.fetch(
                group, member, broker.fetch, max_records=max_records, max_bytes=max_bytes, paused=skip
            )
        )
        # Nothing may fail once the group's positions moved past these records; a rebalance ends the wait
        # (the member learns of it from this answer's generation header).
        if not slices and time.monotonic() < deadline:
            state = await run_in_threadpool(coordinator.member, group, member)
        return slices

    slices = await broker.poll(
        joined.topics, look, lambda found: bool(found) or state.generation != joined.generation, wait_ms / 1000
    )
    headers = {GENERATION_HEADER: str(state.generation)}
    if ARROW_STREAM in request.headers.get("accept", ""):
        return Response(encode_member_records(slices), media_type=ARROW_STREAM, headers=headers)
    out = []
    for topic, result in slices:
        body = _fetch_body(result)
        for r in body["records"]:  # type: ignore[attr-defined]
            r["topic"] = topic
            out.append(r)
    return _json({"records": out}, headers)


@router.post("/{member}/offsets", status_code=204)
async def commit(
    group: str, member: str, body: MemberCommit, coordinator: CoordinatorDep, access: AccessDep
) -> Response:
    """Commit the member's offsets; a stale generation is 409 ILLEGAL_GENERATION."""
    for topic in {o.topic for o in body.offsets}:
        access.require(Operation.READ, Resource.topic(topic))
    offsets = {TopicPartition(o.topic, o.partition): o.offset for o in body.offsets}
    await run_in_threadpool(coordinator.commit, group, member, body.generation, offsets)
    return Response(status_code=204)


@router.post("/{member}/positions", status_code=204)
async def seek(group: str, member: str, body: MemberSeek, coordinator: CoordinatorDep, access: AccessDep) -> Response:
    """Move the group's fetch positions of partitions the member owns (``Consumer.seek``); nothing is committed."""
    for topic in {o.topic for o in body.positions}:
        access.require(Operation.READ, Resource.topic(topic))
    positions = {TopicPartition(o.topic, o.partition): o.offset for o in body.positions}
    await run_in_threadpool(coordinator.seek, group, member, positions)
    return Response(status_code=204)


@router.delete("/{member}", status_code=204)
async def leave(group: str, member: str, coordinator: CoordinatorDep) -> Response:
    """Leave the group: the others rebalance at once."""
    await run_in_threadpool(coordinator.leave, group, member)
    return Response(status_code=204)


def _topic_partition(text: str) -> TopicPartition:
    """``"orders:3"`` → the partition (the topic name may hold colons; the last one splits).

    Raises:
        InvalidRequestError: no ``:partition`` number.
    """
    topic, _, partition = text.rpartition(":")
    if not topic or not partition.isdigit():
        raise InvalidRequestError(f"paused partitions are topic:partition, got '{text}'")
    return TopicPartition(topic, int(partition))
