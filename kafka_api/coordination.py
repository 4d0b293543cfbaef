"""Cluster mode: a group's requests are served by its coordinator node only, as a Kafka broker serves them.

Each group has one coordinator (the node FindCoordinator names:
:func:`~logstore.cluster.group_coordinator` over the live nodes with a listener).
Another node answers the group's OffsetCommit, OffsetFetch, JoinGroup,
Heartbeat, LeaveGroup and SyncGroup with ``NOT_COORDINATOR``, and the client
asks FindCoordinator again — so one node holds a group's state, and commits of
one group are not spread over nodes. Embedded nodes coordinate every group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from kafka_api.access import error_response
from kafka_api.protocol import build, response_class
from logstore.errors import NotCoordinatorError

__all__ = ["at_coordinator"]

Handler = Callable[[int, Any], Awaitable[Any]]

_GROUP_APIS = (8, 9, 11, 12, 13, 14)
"""OffsetCommit, OffsetFetch, JoinGroup, Heartbeat, LeaveGroup, SyncGroup."""
_CODE = NotCoordinatorError.code


def at_coordinator(apis: dict[int, Handler], coordinates: Callable[[str], Awaitable[bool]]) -> dict[int, Handler]:
    """``apis`` with each group API answering ``NOT_COORDINATOR`` for a group ``coordinates`` says is another's."""
    out = dict(apis)
    for key, handler in apis.items():
        if key in _GROUP_APIS:
            out[key] = _wrap(key, handler, coordinates)
    return out


def _wrap(api_key: int, handler: Handler, coordinates: Callable[[str], Awaitable[bool]]) -> Handler:
    async def run(version: int, req: Any) -> Any:
        if api_key == 9 and version >= 8:  # OffsetFetch of several groups
            mine = [g for g in req.groups if await coordinates(g.group_id)]
            if len(mine) == len(req.groups):
                return await handler(version, req)
            refused = [{"group_id": g.group_id, "topics": [], "error_code": _CODE} for g in req.groups if g not in mine]
            base = build(response_class(9, version), {"throttle_time": 0, "groups": refused})
            if not mine:
                return base
            answer = await handler(version, dataclasses.replace(req, groups=tuple(mine)))
            return dataclasses.replace(answer, groups=(*answer.groups, *base.groups))
        if await coordinates(req.group_id):
            return await handler(version, req)
        if api_key == 8:  # OffsetCommit: an error per partition
            topics = [
                {
                    "name": t.name,
                    "partitions": [{"partition_index": p.partition_index, "error_code": _CODE} for p in t.partitions],
                }
                for t in req.topics
            ]
            return build(response_class(8, version), {"throttle_time": 0, "topics": topics})
        if api_key == 9 and version < 2:  # OffsetFetch v1 has no top-level error: one per partition
            topics = [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": _CODE}
                        for p in t.partition_indexes
                    ],
                }
                for t in req.topics or ()
            ]
            return build(response_class(9, version), {"throttle_time": 0, "topics": topics})
        return error_response(api_key, version, _CODE)

    return run
