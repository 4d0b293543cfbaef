"""Kafka's group APIs — ListGroups, DescribeGroups, OffsetCommit, OffsetFetch — on ``_offsets`` and classic groups.

A group here is a name with committed offsets (the HTTP API's and Spark's
commits are the same rows), and, while Kafka consumers are its members, a
classic group of the node's :class:`~logstore.groups.classic.ClassicCoordinator`
(JoinGroup and the rest: :mod:`kafka_api.membership`). A member's commit must
carry its current generation and member id; a commit with generation -1 (a
consumer that assigns its partitions itself) is taken while the group has no
members through either door.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafka_api.protocol import ALL_OPERATIONS, build, response_class
from logstore.errors import LogstoreError, UnknownMemberIdError
from logstore.groups.classic import ClassicCoordinator
from logstore.groups.classic_group import COMPLETING, STABLE, GroupView
from logstore.groups.leases import GroupLease
from logstore.node.broker import Broker

__all__ = ["GroupHandlers"]


class GroupHandlers:
    """The group and offset APIs of one node's Kafka listener."""

    def __init__(self, broker: Broker, classic: ClassicCoordinator) -> None:
        self.broker = broker
        self.classic = classic

    # -- ListGroups, DescribeGroups ---------------------------------------------------------------

    async def list_groups(self, version: int, req: Any) -> Any:
        """The classic groups in their state, and the other groups with committed offsets as ``Empty``."""
        states = getattr(req, "states_filter", None)
        names = await asyncio.to_thread(self.broker.store.list_groups)
        found = {g: ("Empty", "consumer") for g in names}
        found |= {v.name: (v.state, v.protocol_type or "consumer") for v in self.classic.views()}
        groups = [
            {"group_id": g, "protocol_type": ptype, "group_state": state, "group_type": "classic"}
            for g, (state, ptype) in sorted(found.items())
            if not states or state in states
        ]
        return build(response_class(16, version), {"throttle_time": 0, "error_code": 0, "groups": groups})

    async def describe_groups(self, version: int, req: Any) -> Any:
        """A classic group with its members and assignments; else ``Empty`` with committed offsets, or ``Dead``."""
        known = set(await asyncio.to_thread(self.broker.store.list_groups))
        groups = []
        for g in req.groups:
            view = self.classic.view(g)
            if view is not None and (view.members or g not in known):
                groups.append(_described(view))
                continue
            groups.append(
                {
                    "error_code": 0,
                    "group_id": g,
                    "group_state": "Empty" if g in known else "Dead",
                    "protocol_type": "consumer" if g in known else "",
                    "protocol_data": "",
                    "members": [],
                    "authorized_operations": ALL_OPERATIONS,
                }
            )
        return build(response_class(15, version), {"throttle_time": 0, "groups": groups})

    # -- OffsetCommit, OffsetFetch ------------------------------------------------------------

    async def offset_commit(self, version: int, req: Any) -> Any:
        """A member's commit (checked against its generation and id), or one without membership (generation -1)."""
        generation = getattr(req, "generation_id_or_member_epoch", -1)
        refused: LogstoreError | None = None
        try:
            member = self.classic.check_commit(
                req.group_id, generation, req.member_id, getattr(req, "group_instance_id", None)
            )
            if member:
                await self.classic.renew(req.group_id, {t.name for t in req.topics})
            else:
                await asyncio.to_thread(self._check_no_other_door, req.group_id)
        except LogstoreError as e:
            refused = e
        topics = []
        for t in req.topics:
            offsets = {p.partition_index: p.committed_offset for p in t.partitions}
            metadata = next((p.committed_metadata for p in t.partitions if p.committed_metadata), None)
            code = 0
            try:
                if refused is not None:
                    raise refused
                await asyncio.to_thread(
                    self.broker.store.commit_offsets, req.group_id, t.name, offsets, metadata=metadata
                )
            except LogstoreError as e:
                code = e.code
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

    def _check_no_other_door(self, group: str) -> None:
        """A commit without membership is refused while HTTP members or a Spark query read the group (its leases)."""
        if GroupLease(self.broker.config.root, group).live_doors():
            raise UnknownMemberIdError(
                f"consumer group '{group}' has live members through the HTTP API or a Spark query (a live lease "
                "under _groups); a commit without membership (generation -1) would move their offsets: stop them "
                "or use another group.id"
            )


def _described(view: GroupView) -> dict[str, Any]:
    members = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "member_metadata": m.metadata,
            "member_assignment": m.assignment,
        }
        for m in view.members
    ]
    return {
        "error_code": 0,
        "group_id": view.name,
        "group_state": view.state,
        "protocol_type": view.protocol_type,
        "protocol_data": view.protocol if view.state in (COMPLETING, STABLE) else "",
        "members": members,
        "authorized_operations": ALL_OPERATIONS,
    }
