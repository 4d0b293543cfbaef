"""Kafka's ACL model: matching, deny wins, implied DESCRIBE, super users, default deny."""

from __future__ import annotations

import pytest

from logstore.errors import InvalidRequestError
from logstore.security import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    authorize,
    parse_principal,
)

A = Permission.ALLOW
D = Permission.DENY
LIT = PatternType.LITERAL
PRE = PatternType.PREFIXED
TOPIC = ResourceType.TOPIC


def acl(principal: str, name: str, op: Operation, perm: Permission = A, pattern: PatternType = LIT) -> AclBinding:
    return AclBinding(principal, TOPIC, name, pattern, op, perm)


def may(acls: list[AclBinding], principal: str, op: Operation, topic: str, **kw: frozenset[str]) -> bool:
    return authorize(acls, principal, op, Resource.topic(topic), **kw)


def test_no_matching_acl_denies() -> None:
    assert not may([], "User:alice", Operation.READ, "orders")
    assert not may([acl("User:bob", "orders", Operation.READ)], "User:alice", Operation.READ, "orders")
    assert not may([acl("User:alice", "orders", Operation.WRITE)], "User:alice", Operation.READ, "orders")


def test_literal_prefixed_and_wildcard_patterns() -> None:
    acls = [
        acl("User:alice", "orders", Operation.READ),
        acl("User:alice", "eu-", Operation.READ, pattern=PRE),
        acl("User:bob", "*", Operation.READ),
    ]
    assert may(acls, "User:alice", Operation.READ, "orders")
    assert not may(acls, "User:alice", Operation.READ, "orders2")  # literal is exact
    assert may(acls, "User:alice", Operation.READ, "eu-payments")
    assert not may(acls, "User:alice", Operation.READ, "us-payments")
    assert may(acls, "User:bob", Operation.READ, "anything")
    # a prefixed "*" is a prefix, not a wildcard
    assert not may([acl("User:c", "*", Operation.READ, pattern=PRE)], "User:c", Operation.READ, "x")


def test_wildcard_principal_matches_every_user() -> None:
    acls = [acl("User:*", "public", Operation.READ)]
    assert may(acls, "User:anyone", Operation.READ, "public")
    assert not may(acls, "Group:anyone", Operation.READ, "public")


def test_deny_wins_over_any_allow() -> None:
    acls = [
        acl("User:alice", "orders", Operation.ALL, pattern=PRE),
        acl("User:alice", "orders-locked", Operation.WRITE, D),
        acl("User:*", "public", Operation.READ),
        acl("User:eve", "public", Operation.READ, D),
    ]
    assert may(acls, "User:alice", Operation.WRITE, "orders-eu")
    assert not may(acls, "User:alice", Operation.WRITE, "orders-locked")
    assert may(acls, "User:alice", Operation.READ, "orders-locked")  # only WRITE is denied
    assert not may(acls, "User:eve", Operation.READ, "public")
    assert not may([*acls, acl("User:*", "*", Operation.ALL, D)], "User:alice", Operation.READ, "orders-eu")


@pytest.mark.parametrize("op", [Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER, Operation.ALL])
def test_read_write_delete_alter_and_all_imply_describe(op: Operation) -> None:
    assert may([acl("User:alice", "t", op)], "User:alice", Operation.DESCRIBE, "t")


def test_create_does_not_imply_describe_and_deny_of_read_does_not_deny_describe() -> None:
    assert not may([acl("User:alice", "t", Operation.CREATE)], "User:alice", Operation.DESCRIBE, "t")
    acls = [acl("User:alice", "t", Operation.DESCRIBE), acl("User:alice", "t", Operation.READ, D)]
    assert may(acls, "User:alice", Operation.DESCRIBE, "t")
    assert not may(acls, "User:alice", Operation.READ, "t")


def test_all_matches_every_operation() -> None:
    acls = [acl("User:alice", "t", Operation.ALL)]
    assert all(may(acls, "User:alice", op, "t") for op in Operation)


def test_super_users_may_do_everything_even_when_denied() -> None:
    acls = [acl("User:admin", "*", Operation.ALL, D)]
    assert may(acls, "User:admin", Operation.DELETE, "t", super_users=frozenset({"User:admin"}))
    assert not may(acls, "User:admin", Operation.DELETE, "t")


def test_resource_types_do_not_mix() -> None:
    acls = [AclBinding("User:alice", ResourceType.GROUP, "orders", LIT, Operation.READ, A)]
    assert not may(acls, "User:alice", Operation.READ, "orders")
    assert authorize(acls, "User:alice", Operation.READ, Resource.group("orders"))
    cluster = [AclBinding("User:ops", ResourceType.CLUSTER, "kafka-cluster", LIT, Operation.DESCRIBE, A)]
    assert authorize(cluster, "User:ops", Operation.DESCRIBE, Resource.cluster())


def test_bindings_round_trip_and_principals_are_validated() -> None:
    b = acl("User:alice", "eu-", Operation.WRITE, D, PRE)
    assert AclBinding.from_dict(b.to_dict()) == b
    assert parse_principal("User:alice") == "User:alice"
    for bad in ("alice", "User:", ":alice"):
        with pytest.raises(InvalidRequestError):
            parse_principal(bad)
