"""Every HTTP route, principal and ACL set → status, over a real secured server (docs/design.md §10).

The table must name every route of the OpenAPI schema: a new route without an
entry (and without a 401 case) fails :func:`test_table_covers_every_route`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from logstore.security import (
    AclBinding,
    FileSecurityStore,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    new_key,
)
from tests.support.server import Server

OPEN = {"GET /healthz", "GET /readyz"}
"""Routes that answer without credentials (probes)."""

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
X = ResourceType.TRANSACTIONAL_ID
A, D = Permission.ALLOW, Permission.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED

ACLS = [
    # alice owns the orders- namespace, but may not write orders-locked (deny wins)
    AclBinding("User:alice", T, "orders-", PRE, Operation.ALL, A),
    AclBinding("User:alice", T, "orders-locked", LIT, Operation.WRITE, D),
    AclBinding("User:alice", G, "orders-", PRE, Operation.READ, A),
    AclBinding("User:alice", X, "orders-", PRE, Operation.WRITE, A),
    # bob reads every topic, describes every group and the cluster, may create topics anywhere
    AclBinding("User:bob", T, "*", LIT, Operation.READ, A),
    AclBinding("User:bob", G, "*", LIT, Operation.DESCRIBE, A),
    AclBinding("User:bob", C, "kafka-cluster", LIT, Operation.DESCRIBE, A),
    AclBinding("User:bob", C, "kafka-cluster", LIT, Operation.CREATE, A),
    # carol may describe the cluster (its metadata), not its topics
    AclBinding("User:carol", C, "kafka-cluster", LIT, Operation.DESCRIBE, A),
    # olga operates the cluster: she may alter it (elect leaders), nothing else
    AclBinding("User:olga", C, "kafka-cluster", LIT, Operation.ALTER, A),
    # everyone may describe "public", except eve
    AclBinding("User:*", T, "public", LIT, Operation.DESCRIBE, A),
    AclBinding("User:eve", T, "public", LIT, Operation.DESCRIBE, D),
]
PRINCIPALS = ("admin", "alice", "bob", "carol", "eve", "olga")
TOPICS = {"orders-eu", "orders-locked", "payments", "public"}
GROUPS = {"orders-g", "payments-g"}


class Case(NamedTuple):
    route: str
    who: str | None  # a principal's short name, None = no credentials, "bad" = a wrong key
    path: str  # "{u}" becomes a fresh suffix; "/v1/topics/tmp-{u}" is created by admin first
    body: Any
    status: int
    error: str | None = None


def rec(n: int = 1) -> dict[str, Any]:
    return {"records": [{"value": f"v{i}"} for i in range(n)]}


def commit(topic: str) -> dict[str, Any]:
    return {"topic": topic, "partitions": {"0": 1}}


def mcommit(topic: str) -> dict[str, Any]:
    return {"generation": 1, "offsets": [{"topic": topic, "partition": 0, "offset": 0}]}


def mseek(topic: str) -> dict[str, Any]:
    """A member's seek body (``Consumer.seek``) for partition 0 of ``topic``."""
    return {"positions": [{"topic": topic, "partition": 0, "offset": 0}]}


def reset(topic: str) -> dict[str, Any]:
    return {"topic": topic, "to": "earliest"}


TF, GF, CF = "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"
AUTH = "SASL_AUTHENTICATION_FAILED"
XF, XNF = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_NOT_FOUND"
TXN = "/v1/transactions/orders-none-{u}"
EPOCH = {"producer_epoch": 0}


def txn_offsets(group: str, topic: str = "orders-eu") -> dict[str, Any]:
    return {"producer_epoch": 0, "group": group, "offsets": [{"topic": topic, "partition": 0, "offset": 0}]}


FETCH = "/v1/topics/{t}/partitions/0/records?offset=0"
OFFSETS = "/v1/topics/{t}/partitions/0/offsets?timestamp=0"

TABLE: list[Case] = [
    Case("POST /v1/topics", "admin", "/v1/topics", {"name": "x-{u}", "partitions": 1}, 201),
    Case("POST /v1/topics", "alice", "/v1/topics", {"name": "orders-{u}", "partitions": 1}, 201),
    Case("POST /v1/topics", "alice", "/v1/topics", {"name": "payments-{u}", "partitions": 1}, 403, TF),
    Case("POST /v1/topics", "bob", "/v1/topics", {"name": "any-{u}", "partitions": 1}, 201),  # CREATE cluster
    Case("POST /v1/topics", "carol", "/v1/topics", {"name": "c-{u}", "partitions": 1}, 403, TF),
    Case("POST /v1/topics", None, "/v1/topics", {"name": "n-{u}", "partitions": 1}, 401, AUTH),
    Case("POST /v1/topics", "bad", "/v1/topics", {"name": "n-{u}", "partitions": 1}, 401, AUTH),
    Case("GET /v1/topics", "admin", "/v1/topics", None, 200),
    Case("GET /v1/topics", "carol", "/v1/topics", None, 200),
    Case("GET /v1/topics", None, "/v1/topics", None, 401, AUTH),
    Case("GET /v1/topics/{topic}", "alice", "/v1/topics/orders-eu", None, 200),
    Case("GET /v1/topics/{topic}", "alice", "/v1/topics/payments", None, 403, TF),
    Case("GET /v1/topics/{topic}", "bob", "/v1/topics/payments", None, 200),  # READ implies DESCRIBE
    Case("GET /v1/topics/{topic}", "carol", "/v1/topics/public", None, 200),  # User:*
    Case("GET /v1/topics/{topic}", "eve", "/v1/topics/public", None, 403, TF),  # deny wins over User:*
    Case("GET /v1/topics/{topic}", "carol", "/v1/topics/missing", None, 403, TF),  # no existence leak
    Case("GET /v1/topics/{topic}", "admin", "/v1/topics/payments", None, 200),  # super user
    Case("GET /v1/topics/{topic}", None, "/v1/topics/public", None, 401, AUTH),
    Case("PATCH /v1/topics/{topic}", "alice", "/v1/topics/orders-eu", {"config": {"retention.ms": 1000}}, 200),
    Case("PATCH /v1/topics/{topic}", "bob", "/v1/topics/payments", {"config": {"retention.ms": 1000}}, 403, TF),
    Case("PATCH /v1/topics/{topic}", None, "/v1/topics/payments", {"config": {}}, 401, AUTH),
    Case("DELETE /v1/topics/{topic}", "alice", "/v1/topics/orders-tmp-{u}", None, 204),
    Case("DELETE /v1/topics/{topic}", "bob", "/v1/topics/tmp-{u}", None, 403, TF),
    Case("DELETE /v1/topics/{topic}", "admin", "/v1/topics/tmp-{u}", None, 204),
    Case("DELETE /v1/topics/{topic}", None, "/v1/topics/tmp-{u}", None, 401, AUTH),
    Case("POST /v1/topics/{topic}/records", "alice", "/v1/topics/orders-eu/records", rec(), 200),
    Case("POST /v1/topics/{topic}/records", "alice", "/v1/topics/orders-locked/records", rec(), 403, TF),
    Case("POST /v1/topics/{topic}/records", "bob", "/v1/topics/payments/records", rec(), 403, TF),
    Case("POST /v1/topics/{topic}/records", "admin", "/v1/topics/payments/records", rec(), 200),
    Case("POST /v1/topics/{topic}/records", None, "/v1/topics/payments/records", rec(), 401, AUTH),
    Case("GET /v1/topics/{topic}/partitions/{partition}/records", "alice", FETCH.format(t="orders-eu"), None, 200),
    Case("GET /v1/topics/{topic}/partitions/{partition}/records", "bob", FETCH.format(t="payments"), None, 200),
    Case("GET /v1/topics/{topic}/partitions/{partition}/records", "carol", FETCH.format(t="public"), None, 403, TF),
    Case("GET /v1/topics/{topic}/partitions/{partition}/records", None, FETCH.format(t="public"), None, 401, AUTH),
    Case("GET /v1/groups", "bob", "/v1/groups", None, 200),
    Case("GET /v1/groups", None, "/v1/groups", None, 401, AUTH),
    Case("GET /v1/groups/{group}", "alice", "/v1/groups/orders-g", None, 200),  # READ implies DESCRIBE
    Case("GET /v1/groups/{group}", "alice", "/v1/groups/payments-g", None, 403, GF),
    Case("GET /v1/groups/{group}", "bob", "/v1/groups/payments-g", None, 200),
    Case("GET /v1/groups/{group}", None, "/v1/groups/payments-g", None, 401, AUTH),
    Case("GET /v1/groups/{group}/coordinator", "alice", "/v1/groups/orders-g/coordinator", None, 200),
    Case("GET /v1/groups/{group}/coordinator", "alice", "/v1/groups/payments-g/coordinator", None, 403, GF),
    Case("GET /v1/groups/{group}/coordinator", "bob", "/v1/groups/payments-g/coordinator", None, 200),
    Case("GET /v1/groups/{group}/coordinator", None, "/v1/groups/payments-g/coordinator", None, 401, AUTH),
    Case("POST /v1/groups/{group}/offsets", "alice", "/v1/groups/orders-g/offsets", commit("orders-eu"), 200),
    Case("POST /v1/groups/{group}/offsets", "alice", "/v1/groups/orders-g/offsets", commit("payments"), 403, TF),
    Case("POST /v1/groups/{group}/offsets", "bob", "/v1/groups/payments-g/offsets", commit("payments"), 403, GF),
    Case("POST /v1/groups/{group}/offsets", "admin", "/v1/groups/payments-g/offsets", commit("payments"), 200),
    Case("POST /v1/groups/{group}/offsets", None, "/v1/groups/orders-g/offsets", commit("orders-eu"), 401, AUTH),
    Case("POST /v1/groups/{group}/reset", "alice", "/v1/groups/orders-g/reset", reset("orders-eu"), 200),
    Case("POST /v1/groups/{group}/reset", "carol", "/v1/groups/orders-g/reset", reset("orders-eu"), 403, GF),
    Case("POST /v1/groups/{group}/reset", None, "/v1/groups/orders-g/reset", reset("orders-eu"), 401, AUTH),
    # group members (a group of their own, so live members do not refuse the plain commits above)
    Case("POST /v1/groups/{group}/members", "alice", "/v1/groups/orders-m/members", {"topics": ["orders-eu"]}, 200),
    Case(
        "POST /v1/groups/{group}/members", "alice", "/v1/groups/payments-m/members", {"topics": ["orders-eu"]}, 403, GF
    ),
    Case("POST /v1/groups/{group}/members", "alice", "/v1/groups/orders-m2/members", {"topics": ["payments"]}, 403, TF),
    Case("POST /v1/groups/{group}/members", None, "/v1/groups/orders-m/members", {"topics": ["orders-eu"]}, 401, AUTH),
    Case(
        "POST /v1/groups/{group}/members/{member}/heartbeat",
        "alice",
        "/v1/groups/orders-m/members/nope/heartbeat",
        None,
        404,
    ),
    Case(
        "POST /v1/groups/{group}/members/{member}/heartbeat",
        "carol",
        "/v1/groups/orders-m/members/nope/heartbeat",
        None,
        403,
        GF,
    ),
    Case(
        "POST /v1/groups/{group}/members/{member}/heartbeat",
        None,
        "/v1/groups/orders-m/members/nope/heartbeat",
        None,
        401,
        AUTH,
    ),
    Case(
        "GET /v1/groups/{group}/members/{member}/records",
        "alice",
        "/v1/groups/orders-m/members/nope/records",
        None,
        404,
    ),
    Case(
        "GET /v1/groups/{group}/members/{member}/records",
        "carol",
        "/v1/groups/orders-m/members/nope/records",
        None,
        403,
        GF,
    ),
    Case(
        "GET /v1/groups/{group}/members/{member}/records",
        None,
        "/v1/groups/orders-m/members/nope/records",
        None,
        401,
        AUTH,
    ),
    Case(
        "POST /v1/groups/{group}/members/{member}/offsets",
        "alice",
        "/v1/groups/orders-m/members/nope/offsets",
        mcommit("orders-eu"),
        404,
    ),
    Case(
        "POST /v1/groups/{group}/members/{member}/offsets",
        "alice",
        "/v1/groups/orders-m/members/nope/offsets",
        mcommit("payments"),
        403,
        TF,
    ),
    Case(
        "POST /v1/groups/{group}/members/{member}/offsets",
        "bob",
        "/v1/groups/payments-m/members/nope/offsets",
        mcommit("payments"),
        403,
        GF,
    ),
    Case(
        "POST /v1/groups/{group}/members/{member}/offsets",
        None,
        "/v1/groups/orders-m/members/nope/offsets",
        mcommit("orders-eu"),
        401,
        AUTH,
    ),
    Case(
        "POST /v1/groups/{group}/members/{member}/positions",
        "alice",
        "/v1/groups/orders-m/members/nope/positions",
        mseek("orders-eu"),
        404,
    ),
    Case(
        "POST /v1/groups/{group}/members/{member}/positions",
        "alice",
        "/v1/groups/orders-m/members/nope/positions",
        mseek("payments"),
        403,
        TF,
    ),
    Case(
        "POST /v1/groups/{group}/members/{member}/positions",
        "carol",
        "/v1/groups/orders-m/members/nope/positions",
        mseek("orders-eu"),
        403,
        GF,
    ),
    Case(
        "POST /v1/groups/{group}/members/{member}/positions",
        None,
        "/v1/groups/orders-m/members/nope/positions",
        mseek("orders-eu"),
        401,
        AUTH,
    ),
    Case("DELETE /v1/groups/{group}/members/{member}", "alice", "/v1/groups/orders-m/members/nope", None, 404),
    Case("DELETE /v1/groups/{group}/members/{member}", "carol", "/v1/groups/orders-m/members/nope", None, 403, GF),
    Case("DELETE /v1/groups/{group}/members/{member}", None, "/v1/groups/orders-m/members/nope", None, 401, AUTH),
    Case("GET /v1/topics/{topic}/partitions/{partition}/offsets", "alice", OFFSETS.format(t="orders-eu"), None, 200),
    Case("GET /v1/topics/{topic}/partitions/{partition}/offsets", "carol", OFFSETS.format(t="public"), None, 200),
    Case("GET /v1/topics/{topic}/partitions/{partition}/offsets", "carol", OFFSETS.format(t="payments"), None, 403, TF),
    Case("GET /v1/topics/{topic}/partitions/{partition}/offsets", None, OFFSETS.format(t="public"), None, 401, AUTH),
    Case("GET /v1/topics/{topic}/maintenance", "carol", "/v1/topics/public/maintenance", None, 200),
    Case("GET /v1/topics/{topic}/maintenance", "eve", "/v1/topics/public/maintenance", None, 403, TF),
    Case("GET /v1/topics/{topic}/maintenance", "carol", "/v1/topics/missing/maintenance", None, 403, TF),
    Case("GET /v1/topics/{topic}/maintenance", None, "/v1/topics/public/maintenance", None, 401, AUTH),
    Case("GET /v1/stats/topics", "carol", "/v1/stats/topics", None, 200),  # lists only what carol may describe
    Case("GET /v1/stats/topics", None, "/v1/stats/topics", None, 401, AUTH),
    Case("GET /v1/stats/topics/{topic}", "alice", "/v1/stats/topics/orders-eu", None, 200),
    Case("GET /v1/stats/topics/{topic}", "alice", "/v1/stats/topics/payments", None, 403, TF),
    Case("GET /v1/stats/topics/{topic}", "carol", "/v1/stats/topics/public", None, 200),
    Case("GET /v1/stats/topics/{topic}", "eve", "/v1/stats/topics/public", None, 403, TF),
    Case("GET /v1/stats/topics/{topic}", "carol", "/v1/stats/topics/missing", None, 403, TF),  # no existence leak
    Case("GET /v1/stats/topics/{topic}", None, "/v1/stats/topics/public", None, 401, AUTH),
    Case("GET /v1/stats/groups", "carol", "/v1/stats/groups", None, 200),
    Case("GET /v1/stats/groups", None, "/v1/stats/groups", None, 401, AUTH),
    Case("GET /v1/stats/groups/{group}", "alice", "/v1/stats/groups/orders-g", None, 200),
    Case("GET /v1/stats/groups/{group}", "alice", "/v1/stats/groups/payments-g", None, 403, GF),
    Case("GET /v1/stats/groups/{group}", "bob", "/v1/stats/groups/payments-g", None, 200),
    Case("GET /v1/stats/groups/{group}", None, "/v1/stats/groups/payments-g", None, 401, AUTH),
    Case("GET /metrics", "bob", "/metrics", None, 200),
    Case("GET /metrics", "alice", "/metrics", None, 403, CF),
    Case("GET /metrics", "admin", "/metrics", None, 200),
    Case("GET /metrics", None, "/metrics", None, 401, AUTH),
    Case("GET /v1/metadata", "bob", "/v1/metadata", None, 200),  # DESCRIBE on the cluster
    Case("GET /v1/metadata", "carol", "/v1/metadata", None, 200),  # lists only "public"
    Case("GET /v1/metadata", "alice", "/v1/metadata", None, 403, CF),
    Case("GET /v1/metadata", None, "/v1/metadata", None, 401, AUTH),
    Case("POST /v1/cluster/elect-leaders", "olga", "/v1/cluster/elect-leaders", {"partitions": None}, 200),  # ALTER
    Case("POST /v1/cluster/elect-leaders", "admin", "/v1/cluster/elect-leaders", None, 200),
    Case("POST /v1/cluster/elect-leaders", "carol", "/v1/cluster/elect-leaders", None, 403, CF),  # DESCRIBE only
    Case("POST /v1/cluster/elect-leaders", "bob", "/v1/cluster/elect-leaders", None, 403, CF),  # DESCRIBE, CREATE
    Case("POST /v1/cluster/elect-leaders", None, "/v1/cluster/elect-leaders", None, 401, AUTH),
    Case("DELETE /v1/groups/{group}", "admin", "/v1/groups/none-{u}", None, 404, "GROUP_ID_NOT_FOUND"),
    Case("DELETE /v1/groups/{group}", "bob", "/v1/groups/payments-g", None, 403, GF),  # DESCRIBE is not DELETE
    Case("DELETE /v1/groups/{group}", None, "/v1/groups/payments-g", None, 401, AUTH),
    # administration: DESCRIBE on the cluster to read, ALTER on the cluster to change (bodies that change nothing)
    Case("GET /v1/admin/keys", "carol", "/v1/admin/keys", None, 200),
    Case("GET /v1/admin/keys", "alice", "/v1/admin/keys", None, 403, CF),
    Case("GET /v1/admin/keys", None, "/v1/admin/keys", None, 401, AUTH),
    Case("POST /v1/admin/keys", "admin", "/v1/admin/keys", {"principal": "User:nobody"}, 201),
    Case("POST /v1/admin/keys", "carol", "/v1/admin/keys", {"principal": "User:carol"}, 403, CF),
    Case("POST /v1/admin/keys", None, "/v1/admin/keys", {"principal": "User:nobody"}, 401, AUTH),
    Case("DELETE /v1/admin/keys/{key_id}", "admin", "/v1/admin/keys/nope", None, 200),
    Case("DELETE /v1/admin/keys/{key_id}", "bob", "/v1/admin/keys/nope", None, 403, CF),
    Case("DELETE /v1/admin/keys/{key_id}", None, "/v1/admin/keys/nope", None, 401, AUTH),
    Case("DELETE /v1/admin/keys", "admin", "/v1/admin/keys?principal=User:nobody-{u}", None, 200),
    Case("DELETE /v1/admin/keys", "carol", "/v1/admin/keys?principal=User:eve", None, 403, CF),
    Case("DELETE /v1/admin/keys", None, "/v1/admin/keys?principal=User:eve", None, 401, AUTH),
    Case("GET /v1/admin/acls", "bob", "/v1/admin/acls", None, 200),
    Case("GET /v1/admin/acls", "alice", "/v1/admin/acls", None, 403, CF),
    Case("GET /v1/admin/acls", None, "/v1/admin/acls", None, 401, AUTH),
    Case("POST /v1/admin/acls", "admin", "/v1/admin/acls", {"acls": []}, 200),
    Case("POST /v1/admin/acls", "carol", "/v1/admin/acls", {"acls": []}, 403, CF),
    Case("POST /v1/admin/acls", None, "/v1/admin/acls", {"acls": []}, 401, AUTH),
    Case("DELETE /v1/admin/acls", "admin", "/v1/admin/acls", {"acls": []}, 200),
    Case("DELETE /v1/admin/acls", "bob", "/v1/admin/acls", {"acls": []}, 403, CF),
    Case("DELETE /v1/admin/acls", None, "/v1/admin/acls", {"acls": []}, 401, AUTH),
    Case("GET /v1/admin/quotas", "carol", "/v1/admin/quotas", None, 200),
    Case("GET /v1/admin/quotas", "eve", "/v1/admin/quotas", None, 403, CF),
    Case("GET /v1/admin/quotas", None, "/v1/admin/quotas", None, 401, AUTH),
    Case(
        "PUT /v1/admin/quotas", "admin", "/v1/admin/quotas", {"principal": "User:nobody", "producer_byte_rate": 9}, 200
    ),
    Case(
        "PUT /v1/admin/quotas",
        "carol",
        "/v1/admin/quotas",
        {"principal": "User:carol", "producer_byte_rate": 9},
        403,
        CF,
    ),
    Case("PUT /v1/admin/quotas", None, "/v1/admin/quotas", {"principal": "User:x", "producer_byte_rate": 9}, 401, AUTH),
    Case("DELETE /v1/admin/quotas", "admin", "/v1/admin/quotas?principal=User:nobody", None, 200),
    Case("DELETE /v1/admin/quotas", "bob", "/v1/admin/quotas?principal=User:alice", None, 403, CF),
    Case("DELETE /v1/admin/quotas", None, "/v1/admin/quotas?principal=User:alice", None, 401, AUTH),
    # transactions: WRITE on the transactional id (DESCRIBE to read), READ on the group and topics for offsets
    Case("POST /v1/transactions/{tid}/init", "alice", "/v1/transactions/orders-tx-{u}/init", {}, 200),
    Case("POST /v1/transactions/{tid}/init", "bob", "/v1/transactions/orders-tx-{u}/init", {}, 403, XF),
    Case("POST /v1/transactions/{tid}/init", None, "/v1/transactions/orders-tx-{u}/init", {}, 401, AUTH),
    Case("POST /v1/transactions/{tid}/offsets", "alice", TXN + "/offsets", txn_offsets("orders-g"), 404, XNF),
    Case("POST /v1/transactions/{tid}/offsets", "alice", TXN + "/offsets", txn_offsets("payments-g"), 403, GF),
    Case("POST /v1/transactions/{tid}/offsets", "bob", TXN + "/offsets", txn_offsets("payments-g"), 403, XF),
    # READ on each topic too, as a plain commit and Kafka's TxnOffsetCommit: alice may not read payments
    Case(
        "POST /v1/transactions/{tid}/offsets", "alice", TXN + "/offsets", txn_offsets("orders-g", "payments"), 403, TF
    ),
    Case("POST /v1/transactions/{tid}/offsets", None, TXN + "/offsets", txn_offsets("orders-g"), 401, AUTH),
    Case("POST /v1/transactions/{tid}/commit", "alice", TXN + "/commit", EPOCH, 404, XNF),
    Case("POST /v1/transactions/{tid}/commit", "bob", TXN + "/commit", EPOCH, 403, XF),
    Case("POST /v1/transactions/{tid}/commit", None, TXN + "/commit", EPOCH, 401, AUTH),
    Case("POST /v1/transactions/{tid}/abort", "alice", TXN + "/abort", EPOCH, 404, XNF),
    Case("POST /v1/transactions/{tid}/abort", "carol", TXN + "/abort", EPOCH, 403, XF),
    Case("POST /v1/transactions/{tid}/abort", None, TXN + "/abort", EPOCH, 401, AUTH),
    Case("GET /v1/transactions", "carol", "/v1/transactions", None, 200),  # lists only what carol may describe
    Case("GET /v1/transactions", None, "/v1/transactions", None, 401, AUTH),
    Case("GET /v1/transactions/{tid}", "alice", TXN, None, 404, XNF),  # WRITE implies DESCRIBE
    Case("GET /v1/transactions/{tid}", "carol", TXN, None, 403, XF),
    Case("GET /v1/transactions/{tid}", None, TXN, None, 401, AUTH),
    Case(
        "POST /v1/topics/{topic}/records",
        "alice",
        "/v1/topics/orders-eu/records?transactional_id=payments-tx&producer_epoch=0",
        rec(),
        403,
        XF,
    ),
    Case(
        "POST /v1/topics/{topic}/records",
        "alice",
        "/v1/topics/orders-eu/records?transactional_id=orders-none-{u}&producer_epoch=0",
        rec(),
        404,
        XNF,
    ),
    Case("GET /healthz", None, "/healthz", None, 200),
    Case("GET /readyz", None, "/readyz", None, 200),
]


class Secured(NamedTuple):
    server: Server
    keys: dict[str, str]

    def client(self, who: str | None) -> httpx.Client:
        key = {None: None, "bad": "lsk_0000000000000000_wrong"}.get(who, self.keys.get(who or ""))
        return self.server.client(api_key=key)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root = Path(tmp_path_factory.mktemp("authz")) / "data"
    store = FileSecurityStore(str(root))
    keys: dict[str, str] = {}
    for who in PRINCIPALS:
        record, key = new_key(f"User:{who}")
        store.add_key(record)
        keys[who] = key
    store.add_acls(ACLS)
    srv = Server(root, **{"security.enabled": "true", "super.users": "User:admin"}).start()
    try:
        with srv.client(api_key=keys["admin"]) as admin:
            for t in sorted(TOPICS):
                assert admin.post("/v1/topics", json={"name": t, "partitions": 1}).status_code == 201
            for g, t in (("orders-g", "orders-eu"), ("payments-g", "payments")):
                assert admin.post(f"/v1/groups/{g}/offsets", json={"topic": t, "partitions": {"0": 0}}).is_success
        yield Secured(srv, keys)
    finally:
        srv.stop()


def _route_set(openapi: dict[str, Any]) -> set[str]:
    return {f"{method.upper()} {path}" for path, ops in openapi["paths"].items() for method in ops}


def test_table_covers_every_route(secured: Secured) -> None:
    with secured.client(None) as anonymous:
        assert anonymous.get("/openapi.json").status_code == 401  # the schema itself needs a key
    with secured.client("carol") as c:
        routes = _route_set(c.get("/openapi.json").json())
    assert routes == {case.route for case in TABLE}, "every route needs entries in TABLE (and TABLE no stale ones)"
    unauthenticated = {case.route for case in TABLE if case.who is None and case.status == 401}
    assert routes - OPEN == unauthenticated, "every route but the probes needs a 401-without-credentials case"


@pytest.mark.parametrize("case", TABLE, ids=[f"{c.route}|{c.who}|{c.path}|{c.status}" for c in TABLE])
def test_route_access(secured: Secured, case: Case) -> None:
    u = uuid.uuid4().hex[:8]
    path = case.path.replace("{u}", u)
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("name"), str):
        body = {**body, "name": body["name"].replace("{u}", u)}
    if "tmp-" in path:
        with secured.client("admin") as admin:
            assert admin.post("/v1/topics", json={"name": path.rsplit("/", 1)[1], "partitions": 1}).status_code == 201
    method = case.route.split(" ", 1)[0]
    with secured.client(case.who) as c:
        r = c.request(method, path, json=body)
    assert r.status_code == case.status, r.text
    if case.error is not None:
        assert r.json()["error_code"] == case.error
    if case.status == 401:
        assert r.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    ("who", "topics"),
    [
        ("admin", TOPICS),
        ("alice", {"orders-eu", "orders-locked", "public"}),
        ("bob", TOPICS),
        ("carol", {"public"}),
        ("eve", set()),
    ],
)
def test_topic_list_shows_only_what_the_principal_may_describe(secured: Secured, who: str, topics: set[str]) -> None:
    with secured.client("admin") as admin:  # sample every topic now rather than wait for the next sweep
        for t in TOPICS:
            assert admin.get(f"/v1/stats/topics/{t}").status_code == 200
    with secured.client(who) as c:
        listed = set(c.get("/v1/topics").json()["topics"])
        stats = {s["topic"] for s in c.get("/v1/stats/topics").json()["topics"]}
    assert listed & TOPICS == topics
    assert stats & TOPICS == topics
    if who not in ("admin", "bob"):
        assert all(t in topics or t.startswith("orders-") for t in listed | stats)


@pytest.mark.parametrize(
    ("who", "groups"), [("admin", GROUPS), ("alice", {"orders-g"}), ("bob", GROUPS), ("carol", set())]
)
def test_group_list_shows_only_what_the_principal_may_describe(secured: Secured, who: str, groups: set[str]) -> None:
    with secured.client("admin") as admin:
        for g in GROUPS:
            assert admin.get(f"/v1/stats/groups/{g}").status_code == 200
    with secured.client(who) as c:
        assert set(c.get("/v1/groups").json()["groups"]) & GROUPS == groups
        assert {s["group"] for s in c.get("/v1/stats/groups").json()["groups"]} & GROUPS == groups


def test_group_offsets_show_only_topics_the_principal_may_describe(secured: Secured) -> None:
    with secured.client("admin") as admin:
        r = admin.post("/v1/groups/orders-mixed/offsets", json={"topic": "payments", "partitions": {"0": 0}})
        assert r.is_success
        assert admin.post("/v1/groups/orders-mixed/offsets", json=commit("orders-eu")).is_success
    with secured.client("alice") as alice:
        shown = [t["topic"] for t in alice.get("/v1/groups/orders-mixed").json()["topics"]]
    assert shown == ["orders-eu"]


@pytest.mark.parametrize(("who", "topics"), [("admin", TOPICS), ("bob", TOPICS), ("carol", {"public"})])
def test_metadata_lists_only_topics_the_principal_may_describe(secured: Secured, who: str, topics: set[str]) -> None:
    with secured.client(who) as c:
        listed = {t["name"] for t in c.get("/v1/metadata").json()["topics"]}
    assert listed & TOPICS == topics
    if who == "carol":
        assert listed == {"public"}


def test_denials_are_audited_without_keys(secured: Secured) -> None:
    with secured.client("carol") as c:
        assert c.get("/v1/topics/payments").status_code == 403
    log = secured.server.log()
    denied = [line for line in log.splitlines() if '"decision":"DENIED"' in line]
    assert any('"principal":"User:carol"' in line and '"resource_name":"payments"' in line for line in denied)
    assert any('"event":"authenticate"' in line and '"reason":"no credentials"' in line for line in denied)
    assert not any(key.split("_", 2)[2] in log for key in secured.keys.values())


def test_auto_creating_a_topic_on_produce_needs_create(tmp_path: Path, server: Any) -> None:
    root = tmp_path / "data"
    store = FileSecurityStore(str(root))
    keys = {}
    for who in ("writer", "creator"):
        record, keys[who] = new_key(f"User:{who}")
        store.add_key(record)
        store.add_acls([AclBinding(f"User:{who}", T, "*", LIT, Operation.WRITE, A)])
    store.add_acls([AclBinding("User:creator", C, "kafka-cluster", LIT, Operation.CREATE, A)])
    srv = server(root, **{"security.enabled": "true", "auto.create.topics.enable": "true"})
    with srv.client(api_key=keys["writer"]) as c:
        r = c.post("/v1/topics/fresh/records", json=rec())
        assert r.status_code == 404 and r.json()["error_code"] == "UNKNOWN_TOPIC_OR_PARTITION", r.text
    assert not (root / "topics" / "fresh").exists()
    with srv.client(api_key=keys["creator"]) as c:
        assert c.post("/v1/topics/fresh/records", json=rec()).status_code == 200
    with srv.client(api_key=keys["writer"]) as c:
        assert c.post("/v1/topics/fresh/records", json=rec()).status_code == 200  # it exists now


def test_group_members_show_only_topics_the_principal_may_describe(secured: Secured) -> None:
    """A member's assignment hides the topics the caller may not DESCRIBE, as the committed offsets do."""
    with secured.client("admin") as admin:
        joined = admin.post("/v1/groups/orders-live/members", json={"topics": ["orders-eu", "payments"]})
        assert joined.status_code == 200, joined.text
        member = joined.json()["member_id"]
        assert {tp["topic"] for tp in joined.json()["assignment"]} == {"orders-eu", "payments"}
        described = admin.get("/v1/groups/orders-live").json()
        assert {tp["topic"] for tp in described["members"][0]["assignment"]} == {"orders-eu", "payments"}
    try:
        with secured.client("alice") as alice:  # READ on orders-* groups and ALL on orders-* topics, not payments
            r = alice.get("/v1/groups/orders-live")
            beat = alice.post(f"/v1/groups/orders-live/members/{member}/heartbeat")
        assert r.status_code == 200 and beat.status_code == 200, (r.text, beat.text)
        shown = r.json()["members"]
        assert [m["member_id"] for m in shown] == [member]
        assert shown[0]["assignment"] == [{"topic": "orders-eu", "partition": 0}]
        assert beat.json()["assignment"] == [{"topic": "orders-eu", "partition": 0}]
        assert "payments" not in r.text and "payments" not in beat.text
    finally:
        with secured.client("admin") as admin:
            assert admin.delete(f"/v1/groups/orders-live/members/{member}").is_success
