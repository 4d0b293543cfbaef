"""/v1/groups: list, describe with lag and members, commit, reset, delete.

In cluster mode describe, commit, reset and delete run on the group's coordinator
(other nodes forward them), which knows the group's live members.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from ingest_api.deps import Access, AccessDep, BrokerDep, CoordinatorDep, requires
from ingest_api.group_routing import coordinator_of, groups_with_members, route_to_coordinator
from ingest_api.models import CommitOffsets, GroupList, GroupOut, ResetOffsets
from ingest_api.routes.members import member_out
from ingest_api.routes.metadata import NodeOut
from logstore.errors import GroupIdNotFoundError, InvalidRequestError, NonEmptyGroupError, UnknownMemberIdError
from logstore.groups.coordinator import GroupCoordinator
from logstore.node.broker import Broker
from logstore.security import Operation, Resource, ResourceType
from logstore.structs import GroupOffset

router = APIRouter(prefix="/v1/groups", tags=["groups"])


@router.get("", response_model=GroupList)
async def list_groups(
    request: Request,
    broker: BrokerDep,
    coordinator: CoordinatorDep,
    access: AccessDep,
    forward: Annotated[
        bool, Query(description="cluster mode: false lists only the groups this node coordinates (and committed ones)")
    ] = True,
) -> GroupList:
    """Groups that committed offsets or have live members; only those the caller may DESCRIBE.

    In cluster mode live members are known at their group's coordinator: this node asks every live node.
    """
    committed = await run_in_threadpool(broker.store.list_groups)
    live = await groups_with_members(request, broker, coordinator, everywhere=forward)
    names = sorted(set(committed) | live)
    return GroupList(groups=[g for g in names if access.may(Operation.DESCRIBE, Resource.group(g))])


@router.get(
    "/{group}",
    response_model=GroupOut,
    dependencies=[requires(Operation.DESCRIBE, ResourceType.GROUP, "group"), Depends(route_to_coordinator)],
)
async def describe_group(group: str, broker: BrokerDep, coordinator: CoordinatorDep, access: AccessDep) -> GroupOut:
    """Committed offsets with lag per partition, and the live members (id, generation, assignment).

    Topics the caller may not DESCRIBE are left out everywhere, as Kafka's OffsetFetch
    leaves them out: their committed offsets and their partitions in members' assignments
    (every member is listed, its assignment without them), so no answer names such a topic.
    """
    return await _group_out(group, broker, coordinator, access)


@router.delete(
    "/{group}",
    status_code=204,
    dependencies=[requires(Operation.DELETE, ResourceType.GROUP, "group"), Depends(route_to_coordinator)],
)
async def delete_group(group: str, broker: BrokerDep, coordinator: CoordinatorDep) -> Response:
    """Kafka's DeleteGroups: DELETE on the group. Its committed offsets go; it then lists nowhere.

    Refused with 409 ``NON_EMPTY_GROUP`` while the group has live members (asked of its coordinator) or a
    Spark query or members hold its lease of a topic, as Kafka deletes only an empty group.
    """
    live = await run_in_threadpool(coordinator.members, group)
    if live:
        raise NonEmptyGroupError(
            f"consumer group '{group}' has {len(live)} live member(s): stop them (or let their sessions expire) "
            "before deleting it"
        )
    await run_in_threadpool(broker.store.delete_group, group)
    return Response(status_code=204)


@router.get(
    "/{group}/coordinator",
    response_model=NodeOut,
    dependencies=[requires(Operation.DESCRIBE, ResourceType.GROUP, "group")],
)
async def find_coordinator(group: str, request: Request, broker: BrokerDep) -> NodeOut:
    """The node that coordinates the group's members (Kafka's FindCoordinator); embedded mode: this node.

    Clients send member requests there; any other node forwards them (or, with
    ``?forward=false``, answers 421 NOT_COORDINATOR).
    """
    node = await coordinator_of(broker, group, str(request.base_url).rstrip("/"))
    return NodeOut(node_id=node.node_id, url=node.url)


async def _group_out(group: str, broker: Broker, coordinator: GroupCoordinator, access: Access) -> GroupOut:
    """The group as ``GET /v1/groups/{g}`` shows it: only topics the caller may DESCRIBE, in offsets and members."""
    live = await run_in_threadpool(coordinator.members, group)
    rows: list[GroupOffset] = []
    try:
        rows = await run_in_threadpool(broker.store.describe_group, group)
    except GroupIdNotFoundError:
        if not live:
            raise
    topics: dict[str, list[dict[str, int]]] = {}
    for r in rows:
        if not access.may(Operation.DESCRIBE, Resource.topic(r.topic)):
            continue
        topics.setdefault(r.topic, []).append(
            {
                "partition": r.partition,
                "committed_offset": r.committed_offset,
                "high_watermark": r.high_watermark,
                "lag": r.lag,
            }
        )
    return GroupOut.model_validate(
        {
            "group": group,
            "topics": [{"topic": t, "partitions": ps} for t, ps in sorted(topics.items())],
            "members": [member_out(m, access) for m in live],
        }
    )


@router.post(
    "/{group}/offsets",
    response_model=GroupOut,
    dependencies=[requires(Operation.READ, ResourceType.GROUP, "group"), Depends(route_to_coordinator)],
)
async def commit_offsets(
    group: str, body: CommitOffsets, broker: BrokerDep, coordinator: CoordinatorDep, access: AccessDep
) -> GroupOut:
    """Kafka's OffsetCommit: READ on the group and on the topic."""
    access.require(Operation.READ, Resource.topic(body.topic))
    offsets = {}
    for p, o in body.partitions.items():
        if not p.isdigit():
            raise InvalidRequestError(f"partition keys must be partition numbers, got '{p}'")
        offsets[int(p)] = o
    await _refuse_with_live_members(group, coordinator)
    await run_in_threadpool(lambda: broker.store.commit_offsets(group, body.topic, offsets, metadata=body.metadata))
    return await _group_out(group, broker, coordinator, access)


@router.post(
    "/{group}/reset",
    response_model=GroupOut,
    dependencies=[requires(Operation.READ, ResourceType.GROUP, "group"), Depends(route_to_coordinator)],
)
async def reset_offsets(
    group: str, body: ResetOffsets, broker: BrokerDep, coordinator: CoordinatorDep, access: AccessDep
) -> GroupOut:
    """Kafka's AlterConsumerGroupOffsets: READ on the group and on the topic.

    With ``dry_run`` nothing is committed, and the answer is the group as the reset would leave it on ``topic``
    (its partitions with the new offsets, their high watermarks and lag), as ``kafka-consumer-groups
    --reset-offsets`` without ``--execute`` shows it.
    """
    access.require(Operation.READ, Resource.topic(body.topic))
    to = body.to if isinstance(body.to, str) else dict(body.to)
    await _refuse_with_live_members(group, coordinator)
    new = await run_in_threadpool(
        lambda: broker.store.reset_offsets(
            group,
            body.topic,
            to,  # type: ignore[arg-type]
            force=body.force,
            dry_run=body.dry_run,
        )
    )
    if not body.dry_run:
        return await _group_out(group, broker, coordinator, access)
    info = await run_in_threadpool(broker.store.describe_topic, body.topic)
    hw = {p.partition: p.high_watermark for p in info.partitions}
    partitions = [
        {"partition": p, "committed_offset": o, "high_watermark": hw[p], "lag": hw[p] - o}
        for p, o in sorted(new.items())
    ]
    return GroupOut.model_validate(
        {"group": group, "topics": [{"topic": body.topic, "partitions": partitions}], "members": []}
    )


async def _refuse_with_live_members(group: str, coordinator: GroupCoordinator) -> None:
    """Offsets of a group with live members move only through its members' commits (as in Kafka).

    Raises:
        UnknownMemberIdError: the group has live members; commit as one of them, or stop them first.
    """
    live = await run_in_threadpool(coordinator.members, group)
    if live:
        raise UnknownMemberIdError(
            f"consumer group '{group}' has {len(live)} live member(s): commit through a member "
            f"(POST /v1/groups/{group}/members/{{m}}/offsets), or stop them before moving its offsets"
        )
