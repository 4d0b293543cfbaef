"""/v1/groups: list, describe with lag, commit, reset."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from ingest_api.broker import Broker
from ingest_api.deps import Access, AccessDep, BrokerDep, requires
from ingest_api.models import CommitOffsets, GroupList, GroupOut, ResetOffsets
from logstore.errors import InvalidRequestError
from logstore.security import Operation, Resource, ResourceType

router = APIRouter(prefix="/v1/groups", tags=["groups"])


@router.get("", response_model=GroupList)
async def list_groups(broker: BrokerDep, access: AccessDep) -> GroupList:
    """Every authenticated caller may ask; only groups it may DESCRIBE are listed."""
    names = await run_in_threadpool(broker.store.list_groups)
    return GroupList(groups=[g for g in names if access.may(Operation.DESCRIBE, Resource.group(g))])


@router.get(
    "/{group}", response_model=GroupOut, dependencies=[requires(Operation.DESCRIBE, ResourceType.GROUP, "group")]
)
async def describe_group(group: str, broker: BrokerDep, access: AccessDep) -> GroupOut:
    """The group's offsets and lag, on the topics the caller may DESCRIBE (as Kafka's OffsetFetch filters)."""
    return await _group_out(group, broker, access)


async def _group_out(group: str, broker: Broker, access: Access) -> GroupOut:
    rows = await run_in_threadpool(broker.store.describe_group, group)
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
        {"group": group, "topics": [{"topic": t, "partitions": ps} for t, ps in sorted(topics.items())]}
    )


@router.post(
    "/{group}/offsets", response_model=GroupOut, dependencies=[requires(Operation.READ, ResourceType.GROUP, "group")]
)
async def commit_offsets(group: str, body: CommitOffsets, broker: BrokerDep, access: AccessDep) -> GroupOut:
    """Kafka's OffsetCommit: READ on the group and on the topic."""
    access.require(Operation.READ, Resource.topic(body.topic))
    offsets = {}
    for p, o in body.partitions.items():
        if not p.isdigit():
            raise InvalidRequestError(f"partition keys must be partition numbers, got '{p}'")
        offsets[int(p)] = o
    await run_in_threadpool(lambda: broker.store.commit_offsets(group, body.topic, offsets, metadata=body.metadata))
    return await _group_out(group, broker, access)


@router.post(
    "/{group}/reset", response_model=GroupOut, dependencies=[requires(Operation.READ, ResourceType.GROUP, "group")]
)
async def reset_offsets(group: str, body: ResetOffsets, broker: BrokerDep, access: AccessDep) -> GroupOut:
    """Kafka's AlterConsumerGroupOffsets: READ on the group and on the topic."""
    access.require(Operation.READ, Resource.topic(body.topic))
    to = body.to if isinstance(body.to, str) else dict(body.to)
    await run_in_threadpool(broker.store.reset_offsets, group, body.topic, to)  # type: ignore[arg-type]
    return await _group_out(group, broker, access)
