"""/v1/stats: the node's recent time series of topic sizes, rates and group lag (:mod:`ingest_api.console.stats`).

Samples are taken every ``stats.sample.ms`` and kept for 15 minutes in memory;
a node that just started has few or none. Access as describing the resource:
the lists show only what the caller may DESCRIBE, and a group's lag only on
topics it may DESCRIBE (as ``GET /v1/groups/{group}``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from ingest_api.console.stats import StatsSampler, TopicSample
from ingest_api.deps import Access, AccessDep, requires
from logstore.security import Operation, Resource, ResourceType

router = APIRouter(prefix="/v1/stats", tags=["stats"])


class TopicPoint(BaseModel):
    time_ms: int
    partitions: int
    records: int
    size_bytes: int
    records_per_s: float
    bytes_per_s: float


class TopicStats(BaseModel):
    topic: str
    interval_ms: int
    latest: TopicPoint
    samples: list[TopicPoint]
    """Oldest first."""


class TopicLatest(BaseModel):
    topic: str
    latest: TopicPoint


class TopicStatsList(BaseModel):
    interval_ms: int
    topics: list[TopicLatest]


class GroupPoint(BaseModel):
    time_ms: int
    lag: int
    """Total lag over the partitions shown."""
    topics: dict[str, dict[str, int]]
    """topic → partition (as a string) → lag."""


class GroupStats(BaseModel):
    group: str
    interval_ms: int
    samples: list[GroupPoint]
    """Oldest first."""


class GroupLatest(BaseModel):
    group: str
    latest: GroupPoint


class GroupStatsList(BaseModel):
    interval_ms: int
    groups: list[GroupLatest]


def _sampler(request: Request) -> StatsSampler:
    sampler: StatsSampler = request.app.state.stats
    return sampler


def _topic_point(s: TopicSample) -> TopicPoint:
    return TopicPoint(
        time_ms=s.time_ms,
        partitions=s.partitions,
        records=s.records,
        size_bytes=s.size_bytes,
        records_per_s=s.records_per_s,
        bytes_per_s=s.bytes_per_s,
    )


def _topic_points(sampler: StatsSampler, topic: str) -> list[TopicPoint]:
    return [_topic_point(s) for s in list(sampler.topic_series.get(topic, ()))]


def _group_points(sampler: StatsSampler, group: str, access: Access, *, last_only: bool = False) -> list[GroupPoint]:
    samples = list(sampler.group_series.get(group, ()))
    points = []
    for s in samples[-1:] if last_only else samples:
        topics = {
            t: {str(p): lag for p, lag in sorted(parts.items())}
            for t, parts in sorted(s.lag.items())
            if access.may(Operation.DESCRIBE, Resource.topic(t))
        }
        points.append(GroupPoint(time_ms=s.time_ms, lag=sum(sum(p.values()) for p in topics.values()), topics=topics))
    return points


@router.get("/topics", response_model=TopicStatsList)
async def topics_stats(request: Request, access: AccessDep) -> TopicStatsList:
    """The latest sample of every sampled topic the caller may DESCRIBE (as ``GET /v1/topics`` lists)."""
    sampler = _sampler(request)
    out = []
    for name, series in sorted(list(sampler.topic_series.items())):
        if series and access.may(Operation.DESCRIBE, Resource.topic(name)):
            out.append(TopicLatest(topic=name, latest=_topic_point(series[-1])))
    return TopicStatsList(interval_ms=sampler.interval_ms, topics=out)


@router.get(
    "/topics/{topic}",
    response_model=TopicStats,
    dependencies=[requires(Operation.DESCRIBE, ResourceType.TOPIC, "topic")],
)
async def topic_stats(topic: str, request: Request) -> TopicStats:
    """A topic's samples of the last 15 minutes: records, bytes, records/s and bytes/s.

    A topic not sampled yet (created since the last sweep) is sampled on this request.

    Raises:
        UnknownTopicOrPartitionError: no such topic.
    """
    sampler = _sampler(request)
    await run_in_threadpool(sampler.ensure_topic, topic)
    points = _topic_points(sampler, topic)
    return TopicStats(topic=topic, interval_ms=sampler.interval_ms, latest=points[-1], samples=points)


@router.get("/groups", response_model=GroupStatsList)
async def groups_stats(request: Request, access: AccessDep) -> GroupStatsList:
    """The latest lag of every sampled group the caller may DESCRIBE (as ``GET /v1/groups`` lists)."""
    sampler = _sampler(request)
    out = []
    for name in sorted(list(sampler.group_series)):
        if access.may(Operation.DESCRIBE, Resource.group(name)):
            points = _group_points(sampler, name, access, last_only=True)
            if points:
                out.append(GroupLatest(group=name, latest=points[-1]))
    return GroupStatsList(interval_ms=sampler.interval_ms, groups=out)


@router.get(
    "/groups/{group}",
    response_model=GroupStats,
    dependencies=[requires(Operation.DESCRIBE, ResourceType.GROUP, "group")],
)
async def group_stats(group: str, request: Request, access: AccessDep) -> GroupStats:
    """A group's lag samples of the last 15 minutes, total and per partition, on topics the caller may DESCRIBE.

    A group not sampled yet is sampled on this request.

    Raises:
        GroupIdNotFoundError: the group has no committed offsets.
    """
    sampler = _sampler(request)
    await run_in_threadpool(sampler.ensure_group, group)
    points = _group_points(sampler, group, access)
    return GroupStats(group=group, interval_ms=sampler.interval_ms, samples=points)
