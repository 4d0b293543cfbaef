"""/v1/groups: list, describe with lag, commit, reset."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from ingest_api.deps import BrokerDep
from ingest_api.models import CommitOffsets, GroupList, GroupOut, ResetOffsets
from logstore.errors import InvalidRequestError

router = APIRouter(prefix="/v1/groups", tags=["groups"])


@router.get("", response_model=GroupList)
async def list_groups(broker: BrokerDep) -> GroupList:
    return GroupList(groups=await run_in_threadpool(broker.store.list_groups))


@router.get("/{group}", response_model=GroupOut)
async def describe_group(group: str, broker: BrokerDep) -> GroupOut:
    rows = await run_in_threadpool(broker.store.describe_group, group)
    topics: dict[str, list[dict[str, int]]] = {}
    for r in rows:
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


@router.post("/{group}/offsets", response_model=GroupOut)
async def commit_offsets(group: str, body: CommitOffsets, broker: BrokerDep) -> GroupOut:
    offsets = {}
    for p, o in body.partitions.items():
        if not p.isdigit():
            raise InvalidRequestError(f"partition keys must be partition numbers, got '{p}'")
        offsets[int(p)] = o
    await run_in_threadpool(lambda: broker.store.commit_offsets(group, body.topic, offsets, metadata=body.metadata))
    return await describe_group(group, broker)


@router.post("/{group}/reset", response_model=GroupOut)
async def reset_offsets(group: str, body: ResetOffsets, broker: BrokerDep) -> GroupOut:
    to = body.to if isinstance(body.to, str) else dict(body.to)
    await run_in_threadpool(broker.store.reset_offsets, group, body.topic, to)  # type: ignore[arg-type]
    return await describe_group(group, broker)
