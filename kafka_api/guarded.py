"""ACLs on the group APIs, around their handlers (:mod:`kafka_api.groups`), as a Kafka broker applies them.

The group handlers know nothing of principals: each wrapper here checks the
connection's principal (:mod:`kafka_api.access`) before the handler runs, or
filters what it answered, with the checks of the HTTP API's group routes:

* OffsetCommit: READ on the group (else every partition
  ``GROUP_AUTHORIZATION_FAILED``), and READ on each topic (else its
  partitions ``TOPIC_AUTHORIZATION_FAILED``, nothing of them committed);
* OffsetFetch: DESCRIBE on the group; a topic the principal may not DESCRIBE
  is answered ``TOPIC_AUTHORIZATION_FAILED`` when asked for by name, and left
  out of "all topics";
* DescribeGroups: DESCRIBE on each group; ListGroups lists those only;
* JoinGroup, Heartbeat, LeaveGroup, SyncGroup (whichever are served): READ on the group.

With security off every wrapper passes straight through.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from kafka_api.access import allowed, denial, error_response, session
from kafka_api.protocol import build, response_class
from logstore.errors import TopicAuthorizationFailedError
from logstore.security import Operation, Resource

__all__ = ["GROUP_READ_APIS", "guard_group_api", "guarded_group_apis"]

Handler = Callable[[int, Any], Awaitable[Any]]

GROUP_READ_APIS = (11, 12, 13, 14)
"""JoinGroup, Heartbeat, LeaveGroup, SyncGroup: each needs READ on its ``group_id``."""


def guarded_group_apis(apis: dict[int, Handler]) -> dict[int, Handler]:
    """``apis`` (API key → handler) with the group APIs among them wrapped in their ACL checks."""
    wrappers: dict[int, Callable[[Handler], Handler]] = {
        8: _offset_commit,
        9: _offset_fetch,
        15: _describe_groups,
        16: _list_groups,
    }
    out = dict(apis)
    for key, handler in apis.items():
        if key in wrappers:
            out[key] = wrappers[key](handler)
        elif key in GROUP_READ_APIS:
            out[key] = guard_group_api(key, handler)
    return out


def guard_group_api(api_key: int, handler: Handler) -> Handler:
    """A handler of a request with a ``group_id`` that needs READ on that group."""

    async def run(version: int, req: Any) -> Any:
        error = denial(Operation.READ, Resource.group(req.group_id))
        if error is not None:
            return error_response(api_key, version, error.code)
        return await handler(version, req)

    return run


def _offset_commit(handler: Handler) -> Handler:
    async def run(version: int, req: Any) -> Any:
        if session().guard is None:
            return await handler(version, req)
        group_error = denial(Operation.READ, Resource.group(req.group_id))
        denied: dict[str, int] = {}
        for t in req.topics:
            if group_error is not None:
                denied[t.name] = group_error.code
            elif (e := denial(Operation.READ, Resource.topic(t.name))) is not None:
                denied[t.name] = e.code
        kept = tuple(t for t in req.topics if t.name not in denied)
        refused = [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": denied[t.name]} for p in t.partitions
                ],
            }
            for t in req.topics
            if t.name in denied
        ]
        base = build(response_class(8, version), {"throttle_time": 0, "topics": refused})
        if not kept:
            return base
        answer = await handler(version, dataclasses.replace(req, topics=kept))
        return dataclasses.replace(answer, topics=(*answer.topics, *base.topics))

    return run


def _visible_topics(answer_topics: tuple[Any, ...], asked_by_name: bool) -> tuple[Any, ...]:
    out = []
    for t in answer_topics:
        if allowed(Operation.DESCRIBE, Resource.topic(t.name)):
            out.append(t)
        elif asked_by_name:
            code = TopicAuthorizationFailedError.code
            parts = tuple(dataclasses.replace(p, committed_offset=-1, error_code=code) for p in t.partitions)
            out.append(dataclasses.replace(t, partitions=parts))
    return tuple(out)


def _offset_fetch(handler: Handler) -> Handler:
    async def run(version: int, req: Any) -> Any:
        if session().guard is None:
            return await handler(version, req)
        if version >= 8:
            groups = [g for g in req.groups if denial(Operation.DESCRIBE, Resource.group(g.group_id)) is None]
            refused = [g.group_id for g in req.groups if g not in groups]
            answer = await handler(version, dataclasses.replace(req, groups=tuple(groups)))
            kept = tuple(
                dataclasses.replace(g, topics=_visible_topics(g.topics, asked.topics is not None))
                for g, asked in zip(answer.groups, groups, strict=True)
            )
            code = 30  # GROUP_AUTHORIZATION_FAILED
            base = build(
                response_class(9, version),
                {"throttle_time": 0, "groups": [{"group_id": g, "topics": [], "error_code": code} for g in refused]},
            )
            return dataclasses.replace(answer, groups=(*kept, *base.groups))
        error = denial(Operation.DESCRIBE, Resource.group(req.group_id))
        if error is not None:
            return build(response_class(9, version), {"throttle_time": 0, "topics": [], "error_code": error.code})
        answer = await handler(version, req)
        return dataclasses.replace(answer, topics=_visible_topics(answer.topics, req.topics is not None))

    return run


def _describe_groups(handler: Handler) -> Handler:
    async def run(version: int, req: Any) -> Any:
        answer = await handler(version, req)
        if session().guard is None:
            return answer
        groups = []
        for g in answer.groups:
            error = denial(Operation.DESCRIBE, Resource.group(g.group_id))
            if error is None:
                groups.append(g)
            else:
                groups.append(
                    dataclasses.replace(g, error_code=type(g.error_code)(error.code), group_state="", members=())
                )
        return dataclasses.replace(answer, groups=tuple(groups))

    return run


def _list_groups(handler: Handler) -> Handler:
    async def run(version: int, req: Any) -> Any:
        answer = await handler(version, req)
        if session().guard is None or allowed(Operation.DESCRIBE, Resource.cluster()):
            return answer
        groups = tuple(g for g in answer.groups if allowed(Operation.DESCRIBE, Resource.group(g.group_id)))
        return dataclasses.replace(answer, groups=groups)

    return run
