"""Kafka's group APIs without members — ListGroups, DescribeGroups, OffsetCommit, OffsetFetch — on ``_offsets``.

A group here is a name with committed offsets (the HTTP API's and Spark's
commits are the same rows). Kafka's classic group protocol (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup) is not served yet, so every group is
``Empty`` and commits carry generation -1.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafka_api.protocol import ALL_OPERATIONS, build, response_class
from logstore.errors import InvalidRequestError, LogstoreError
from logstore.node.broker import Broker

__all__ = ["GroupHandlers"]


class GroupHandlers:
    """The group and offset APIs of one node's Kafka listener."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    # -- ListGroups, DescribeGroups ---------------------------------------------------------------

    async def list_groups(self, version: int, req: Any) -> Any:
        """The groups with committed offsets, each ``Empty``: this door serves no members yet."""
        states = getattr(req, "states_filter", None)
        names = await asyncio.to_thread(self.broker.store.list_groups)
        groups = [
            {"group_id": g, "protocol_type": "consumer", "group_state": "Empty", "group_type": "classic"}
            for g in names
            if not states or "Empty" in states
        ]
        return build(response_class(16, version), {"throttle_time": 0, "error_code": 0, "groups": groups})

    async def describe_groups(self, version: int, req: Any) -> Any:
        """Each group ``Empty`` when it has committed offsets, else ``Dead`` (as Kafka describes an unknown group)."""
        known = set(await asyncio.to_thread(self.broker.store.list_groups))
        groups = [
            {
                "error_code": 0,
                "group_id": g,
                "group_state": "Empty" if g in known else "Dead",
                "protocol_type": "consumer" if g in known else "",
                "protocol_data": "",
                "members": [],
                "authorized_operations": ALL_OPERATIONS,
            }
            for g in req.groups
        ]
        return build(response_class(15, version), {"throttle_time": 0, "groups": groups})

    # -- OffsetCommit, OffsetFetch ------------------------------------------------------------

    async def offset_commit(self, version: int, req: Any) -> Any:
        """Commit without membership (generation -1): straight into ``_offsets``, as the HTTP API's commits."""
        generation = getattr(req, "generation_id_or_member_epoch", -1)
        topics = []
        for t in req.topics:
            offsets = {p.partition_index: p.committed_offset for p in t.partitions}
            metadata = next((p.committed_metadata for p in t.partitions if p.committed_metadata), None)
            code = 0
            try:
                if generation >= 0 or req.member_id:
                    raise InvalidRequestError(
                        "group membership (JoinGroup) is not served yet; commit with generation -1"
                    )
                await asyncio.to_thread(
                    self.broker.store.commit_offsets, req.group_id, t.name, offsets, metadata=metadata
                )
            except LogstoreError as e:
                code = 22 if isinstance(e, InvalidRequestError) else e.code  # ILLEGAL_GENERATION
            topics.append({"name": t.name, "partitions": [{"partition_index": p, "error_code": code} for p in offsets]})
        return build(response_class(8, version), {"throttle_time": 0, "topics": topics})

    async def offset_fetch(self, version: int, req: Any) -> Any:
        if version >= 8:
            groups = []
            for g in req.groups:
                topics = await asyncio.to_thread(self._committed, g.group_id, g.topics)
                groups.append({"group_id": g.group_id, "topics": topics, "error_code": 0})
            return build(response_class(9, version), {"throttle_time": 0, "groups": groups})
        topics = await asyncio.to_thread(self._committed, req.group_id, req.topics)
        return build(response_class(9, version), {"throttle_time": 0, "topics": topics, "error_code": 0})

    def _committed(self, group: str, asked: Any) -> list[dict[str, Any]]:
        committed = self.broker.store.offsets.committed(group)
        by_topic: dict[str, dict[int, Any]] = {}
        for key, c in committed.items():
            by_topic.setdefault(key.topic, {})[key.partition] = c
        wanted = (
            {t: sorted(ps) for t, ps in by_topic.items()}
            if asked is None
            else {t.name: list(t.partition_indexes) for t in asked}
        )
        out = []
        for name, parts in wanted.items():
            have = by_topic.get(name, {})
            out.append(
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": have[p].offset if p in have else -1,
                            "committed_leader_epoch": -1,
                            "metadata": (have[p].metadata or "") if p in have else "",
                            "error_code": 0,
                        }
                        for p in parts
                    ],
                }
            )
        return out
