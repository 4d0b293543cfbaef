"""Kafka's ACL model as pure functions: who may do what to which resource.

An :class:`AclBinding` says that a principal is allowed (or denied) an
operation on the resources a pattern names. :func:`authorize` decides a request
as Kafka's ``AclAuthorizer`` does:

* a super user (``super.users``) may do everything;
* a matching ``DENY`` wins over any ``ALLOW``;
* else a matching ``ALLOW`` permits it; ``READ``, ``WRITE``, ``DELETE`` and
  ``ALTER`` imply ``DESCRIBE`` (an allow only: denying ``READ`` does not deny
  ``DESCRIBE``); ``ALL`` matches every operation;
* no matching ACL → denied (Kafka's ``allow.everyone.if.no.acl.found=false``).

A binding matches a principal when its principal is the same or ``User:*``,
and a resource of the same type when its pattern is ``literal`` and the names
are equal, ``literal`` with the name ``*`` (every resource of the type), or
``prefixed`` and the resource name starts with the pattern's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from logstore.errors import InvalidRequestError

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD",
    "AclBinding",
    "Operation",
    "PatternType",
    "Permission",
    "Resource",
    "ResourceType",
    "authorize",
    "parse_principal",
]

CLUSTER_NAME = "kafka-cluster"
"""The one cluster resource's name, as in Kafka."""
WILDCARD = "*"
"""A literal resource name or principal name that matches every one."""


class ResourceType(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"
    TRANSACTIONAL_ID = "transactional_id"


class PatternType(StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class Operation(StrEnum):
    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DELETE = "DELETE"
    ALTER = "ALTER"
    DESCRIBE = "DESCRIBE"
    ALL = "ALL"


class Permission(StrEnum):
    ALLOW = "ALLOW"
    DENY = "DENY"


_IMPLIES_DESCRIBE = frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER})


def parse_principal(text: str) -> str:
    """A principal ``Type:name`` (``User:alice``, ``User:*``), validated.

    Raises:
        InvalidRequestError: no ``:``, or an empty type or name.
    """
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise InvalidRequestError(f"a principal is TYPE:NAME, e.g. User:alice; got '{text}'")
    return text


@dataclass(frozen=True)
class Resource:
    """A resource a request acts on: a topic, a group, a transactional id, or the cluster (``kafka-cluster``)."""

    type: ResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> Resource:
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def group(cls, name: str) -> Resource:
        return cls(ResourceType.GROUP, name)

    @classmethod
    def cluster(cls) -> Resource:
        return cls(ResourceType.CLUSTER, CLUSTER_NAME)


@dataclass(frozen=True)
class AclBinding:
    """One ACL: ``principal`` is ``permission``-ed ``operation`` on the resources the pattern names.

    Attributes:
        principal: ``User:alice``, or ``User:*`` for every user.
        resource_type: topic, group, transactional_id or cluster.
        resource_name: a name, a prefix (``pattern_type=prefixed``) or ``*`` (literal: every resource).
        pattern_type: literal or prefixed.
        operation: the operation granted or denied (``ALL``: every one).
        permission: ALLOW or DENY.
    """

    principal: str
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    operation: Operation
    permission: Permission

    def matches_resource(self, resource: Resource) -> bool:
        if self.resource_type != resource.type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return resource.name.startswith(self.resource_name)
        return self.resource_name in (resource.name, WILDCARD)

    def matches_principal(self, principal: str) -> bool:
        if self.principal == principal:
            return True
        kind, _, name = self.principal.partition(":")
        return name == WILDCARD and principal.partition(":")[0] == kind

    def to_dict(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "resource_type": self.resource_type.value,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.value,
            "operation": self.operation.value,
            "permission": self.permission.value,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AclBinding:
        return cls(
            parse_principal(str(d["principal"])),
            ResourceType(d["resource_type"]),
            str(d["resource_name"]),
            PatternType(d["pattern_type"]),
            Operation(d["operation"]),
            Permission(d["permission"]),
        )

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, permission={self.permission.value}, operation={self.operation.value}, "
            f"resource={self.resource_type.value}:{self.pattern_type.value}:{self.resource_name})"
        )


def authorize(
    acls: Iterable[AclBinding],
    principal: str,
    operation: Operation,
    resource: Resource,
    *,
    super_users: frozenset[str] = frozenset(),
) -> bool:
    """Whether ``principal`` may perform ``operation`` on ``resource`` under ``acls`` (see the module doc)."""
    if principal in super_users:
        return True
    allowed = False
    for acl in acls:
        if not (acl.matches_resource(resource) and acl.matches_principal(principal)):
            continue
        if acl.permission is Permission.DENY:
            if acl.operation in (operation, Operation.ALL):
                return False
        elif acl.operation in (operation, Operation.ALL) or (
            operation is Operation.DESCRIBE and acl.operation in _IMPLIES_DESCRIBE
        ):
            allowed = True
    return allowed
