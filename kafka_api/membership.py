"""Kafka's classic group membership APIs — JoinGroup, SyncGroup, Heartbeat, LeaveGroup — on the node's
:class:`~logstore.groups.classic.ClassicCoordinator`.

The requests carry the consumer protocol's bytes (subscriptions in JoinGroup,
assignments in SyncGroup) which the coordinator passes on untouched, as
Kafka's does: the clients' assignors (``range``, ``roundrobin``,
``cooperative-sticky`` …) read and write them. Only the subscribed topics are
read here, for the group's leases (one door per group, see the coordinator).
"""

from __future__ import annotations

import contextvars
import datetime
import struct
from typing import Any

from kafka_api.protocol import build, response_class
from logstore.errors import InvalidTopicError, LogstoreError, MemberIdRequiredError
from logstore.groups.classic import ClassicCoordinator, Joining
from logstore.log.catalog import validate_topic_name

__all__ = ["CLIENT", "MembershipHandlers", "subscribed_topics"]

CLIENT: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("kafka_client", default=("", ""))
"""(client id, client host) of the request being handled, set by the listener for DescribeGroups to show."""

_JOIN_GROUP, _HEARTBEAT, _LEAVE_GROUP, _SYNC_GROUP = 11, 12, 13, 14


def subscribed_topics(protocols: tuple[tuple[str, bytes], ...]) -> frozenset[str]:
    """The topics named by consumer-protocol subscriptions (``ConsumerProtocolSubscription``, any version).

    Each starts with its version (int16) and the topics (int32 count, then int16-length strings); what
    follows (user data, owned partitions, rack) is not read. A subscription that does not parse, and names
    that are not topic names, add nothing.
    """
    topics: set[str] = set()
    for _, data in protocols:
        try:
            (count,) = struct.unpack_from(">i", data, 2)
            pos = 6
            for _ in range(count):
                (length,) = struct.unpack_from(">h", data, pos)
                pos += 2
                name = bytes(data[pos : pos + length]).decode()
                pos += length
                validate_topic_name(name)
                topics.add(name)
        except (struct.error, UnicodeDecodeError, InvalidTopicError):
            continue
    return frozenset(topics)


def _ms(value: datetime.timedelta | None) -> int:
    return -1 if value is None else int(value.total_seconds() * 1000)


class MembershipHandlers:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup of one node's Kafka listener."""

    def __init__(self, classic: ClassicCoordinator) -> None:
        self.classic = classic

    async def join_group(self, version: int, req: Any) -> Any:
        """Join (or rejoin) a group; answered once its rebalance completes (the leader gets every subscription)."""
        client_id, host = CLIENT.get()
        protocols = tuple((p.name, bytes(p.metadata)) for p in req.protocols)
        joining = Joining(
            member_id=req.member_id,
            instance_id=getattr(req, "group_instance_id", None),
            client_id=client_id,
            client_host=host,
            session_timeout_ms=_ms(req.session_timeout),
            rebalance_timeout_ms=_ms(getattr(req, "rebalance_timeout", None)),
            protocol_type=req.protocol_type,
            protocols=protocols,
            topics=subscribed_topics(protocols) if req.protocol_type == "consumer" else frozenset(),
            requires_member_id=version >= 4,
        )
        base = {"throttle_time": 0, "skip_assignment": False}
        try:
            a = await self.classic.join(req.group_id, joining)
        except LogstoreError as e:
            failed = {"error_code": e.code, "generation_id": -1, "protocol_name": "", "leader": "", "members": []}
            member_id = e.member_id if isinstance(e, MemberIdRequiredError) else req.member_id
            return build(response_class(_JOIN_GROUP, version), base | failed | {"member_id": member_id})
        members = [{"member_id": m, "group_instance_id": i, "metadata": data} for m, i, data in a.members]
        answer = {
            "error_code": 0,
            "generation_id": a.generation,
            "protocol_type": a.protocol_type,
            "protocol_name": a.protocol_name,
            "leader": a.leader,
            "member_id": a.member_id,
            "members": members,
        }
        return build(response_class(_JOIN_GROUP, version), base | answer)

    async def sync_group(self, version: int, req: Any) -> Any:
        """The member's assignment; the leader's request carries every member's (answered once it came)."""
        assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
        instance = getattr(req, "group_instance_id", None)
        try:
            ptype, pname, data = await self.classic.sync(
                req.group_id, req.generation_id, req.member_id, instance, assignments
            )
        except LogstoreError as e:
            return build(
                response_class(_SYNC_GROUP, version), {"throttle_time": 0, "error_code": e.code, "assignment": b""}
            )
        answer = {
            "throttle_time": 0,
            "error_code": 0,
            "protocol_type": ptype,
            "protocol_name": pname,
            "assignment": data,
        }
        return build(response_class(_SYNC_GROUP, version), answer)

    async def heartbeat(self, version: int, req: Any) -> Any:
        try:
            self.classic.heartbeat(
                req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None)
            )
            code = 0
        except LogstoreError as e:
            code = e.code
        return build(response_class(_HEARTBEAT, version), {"throttle_time": 0, "error_code": code})

    async def leave_group(self, version: int, req: Any) -> Any:
        """Remove members (v3+: several, by member or instance id); the group rebalances without them."""
        if version < 3:
            (error,) = self.classic.leave(req.group_id, [(req.member_id, None)])
            return build(
                response_class(_LEAVE_GROUP, version), {"throttle_time": 0, "error_code": error.code if error else 0}
            )
        named = [(m.member_id, m.group_instance_id) for m in req.members]
        errors = self.classic.leave(req.group_id, named)
        members = [
            {"member_id": m, "group_instance_id": i, "error_code": e.code if e else 0}
            for (m, i), e in zip(named, errors, strict=True)
        ]
        return build(response_class(_LEAVE_GROUP, version), {"throttle_time": 0, "error_code": 0, "members": members})
