"""Security in cluster mode: keys, ACLs and quotas live in ZooKeeper, shared by every node and the CLI.

Two real ``logstore serve`` nodes of one cluster (one real ZooKeeper) with
``security.enabled``: a key made with ``logstore keys create`` (ZooKeeper from
the config, or ``--zookeeper``) authenticates at both, an ACL added with
``logstore acls add`` is enforced at both, a revoked key is refused at both —
each within 5 s — and no ``_security/`` file is written anywhere: the root is
not where cluster mode keeps them.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from ingest_api.internode import FORWARDED_PRINCIPAL
from logstore.cluster import group_coordinator
from logstore.cluster.security_store import ZooKeeperSecurityStore, open_security_store
from logstore.config import load_config
from logstore.security import (
    AclBinding,
    FileSecurityStore,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    new_key,
)
from tests.support.pki import make_ca, make_cert
from tests.support.server import LOGSTORE, Server

pytestmark = pytest.mark.zookeeper

SECURE = {"security.enabled": "true", "super.users": "User:admin"}
VISIBLE_S = 5.0
"""docs/design.md §10: a change reaches every node within 5 s."""


@pytest.fixture
def chroot(zookeeper: str) -> str:
    return f"{zookeeper}/sec-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def nodes(tmp_path: Path, chroot: str) -> Iterator[list[Server]]:
    """Two secured nodes of one cluster over one root."""
    started = [
        Server(
            tmp_path / "data",
            **{"zookeeper.connect": chroot, "node.id": node_id, "zookeeper.session.timeout.ms": 4000, **SECURE},
        ).start()
        for node_id in (1, 2)
    ]
    yield started
    for s in started:
        if s.proc is not None and s.proc.poll() is None:
            s.kill()


def cli(root: Path, *args: str, **env: str) -> str:
    """``logstore --root ROOT ARGS…`` with ``LOGSTORE_*`` from ``env`` only; its stdout (it must succeed)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}
    r = subprocess.run(
        [*LOGSTORE, "--root", str(root), *args], capture_output=True, text=True, env=base | env, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def until(predicate: Callable[[], bool], timeout_s: float = VISIBLE_S) -> bool:
    """Whether ``predicate`` turns true within ``timeout_s`` (polled; the change arrives by a ZooKeeper watch)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def status(node: Server, path: str, key: str | None) -> int:
    with node.client(api_key=key) as c:
        return c.get(path).status_code


def test_keys_and_acls_made_with_the_cli_reach_every_node_through_zookeeper(
    nodes: list[Server], tmp_path: Path, chroot: str
) -> None:
    # The CLI runs on a root of its own: in cluster mode the root is not where keys and ACLs live.
    cli_root = tmp_path / "cli-root"
    admin = cli(cli_root, "keys", "create", "--principal", "User:admin", LOGSTORE_ZOOKEEPER_CONNECT=chroot)
    admin_key = admin.splitlines()[-1]
    alice_key = cli(cli_root, "keys", "create", "--principal", "User:alice", "--zookeeper", chroot).splitlines()[-1]

    for node in nodes:
        assert until(lambda node=node: status(node, "/v1/topics", alice_key) == 200), node.log()
        assert status(node, "/v1/topics", None) == 401
    with nodes[0].client(api_key=admin_key) as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201
    for node in nodes:
        assert status(node, "/v1/topics/orders", alice_key) == 403  # no ACL yet: denied

    cli(cli_root, "acls", "add", "--allow-principal", "User:alice", "--operation", "DESCRIBE", "--topic", "orders",
        "--zookeeper", chroot)  # fmt: skip
    for node in nodes:
        assert until(lambda node=node: status(node, "/v1/topics/orders", alice_key) == 200), node.log()
    assert "User:alice" in cli(cli_root, "acls", "list", LOGSTORE_ZOOKEEPER_CONNECT=chroot)

    cli(cli_root, "keys", "revoke", "--principal", "User:alice", "--zookeeper", chroot)
    for node in nodes:
        assert until(lambda node=node: status(node, "/v1/topics", alice_key) == 401), node.log()
        assert status(node, "/v1/topics", admin_key) == 200

    assert not list(tmp_path.rglob("_security")), "cluster mode must keep keys and ACLs in ZooKeeper only"
    for node in nodes:
        assert node.stop() in (0, -15), node.log()  # uvicorn re-raises SIGTERM after its graceful shutdown
        assert "Traceback" not in node.log()  # the store's ZooKeeper session closed cleanly with the app


def test_a_change_made_through_one_node_is_enforced_by_the_other(
    nodes: list[Server], tmp_path: Path, chroot: str
) -> None:
    """``logstore keys|acls --server A``: the /v1/admin routes of node A write ZooKeeper, and node B enforces it."""
    admin_key = cli(tmp_path, "keys", "create", "--principal", "User:admin", "--zookeeper", chroot).splitlines()[-1]
    a, b = nodes
    at_a = ("--server", a.url.removeprefix("http://"), "--api-key", admin_key)
    at_b = ("--server", b.url.removeprefix("http://"), "--api-key", admin_key)
    alice_key = cli(tmp_path, "keys", "create", "--principal", "User:alice", *at_a).splitlines()[-1]
    with a.client(api_key=admin_key) as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
    assert until(lambda: status(b, "/v1/topics/orders", alice_key) == 403), b.log()  # known at B, no ACL yet
    cli(tmp_path, "acls", "add", "--allow-principal", "User:alice", "--operation", "DESCRIBE", "--topic", "orders",
        *at_a)  # fmt: skip
    assert until(lambda: status(b, "/v1/topics/orders", alice_key) == 200), b.log()
    assert "User:alice" in cli(tmp_path, "acls", "list", *at_b)
    cli(tmp_path, "keys", "revoke", "--principal", "User:alice", *at_b)
    assert until(lambda: status(a, "/v1/topics", alice_key) == 401), a.log()
    assert not list(tmp_path.rglob("_security")), "cluster mode must keep keys and ACLs in ZooKeeper only"


def test_the_store_is_zookeeper_exactly_when_zookeeper_connect_is_set(tmp_path: Path, chroot: str) -> None:
    with open_security_store(load_config(None, overrides={"logstore.root": str(tmp_path)})) as embedded:
        assert isinstance(embedded, FileSecurityStore)
    config = load_config(None, overrides={"logstore.root": str(tmp_path), "zookeeper.connect": chroot})
    with open_security_store(config) as cluster:
        assert isinstance(cluster, ZooKeeperSecurityStore)


ALICE = "User:CN=alice,OU=eng,O=Acme,C=US"
NODE = "User:CN=logstore-node"


def test_a_client_authenticated_by_its_certificate_is_itself_at_the_node_a_request_is_forwarded_to(
    tmp_path: Path, chroot: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nodes on a private CA with client certificates required: forwards reach the leader (and the group's
    coordinator) as the client, and a forwarded-principal header a client sends itself grants nothing."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # the nodes know the CA from their settings only
    pki = tmp_path / "pki"
    pki.mkdir()
    ca = make_ca(pki)
    node_cert, node_key = make_cert(pki, ca, "node", "/CN=logstore-node", server=True, client=True)
    client_only, client_only_key = make_cert(pki, ca, "node-client", "/CN=logstore-node", server=False)
    alice = tuple(str(p) for p in make_cert(pki, ca, "alice", "/C=US/O=Acme/OU=eng/CN=alice", server=False))
    admin, admin_key = new_key("User:admin")
    config = load_config(None, overrides={"logstore.root": str(tmp_path / "data"), "zookeeper.connect": chroot})
    with open_security_store(config) as store:
        store.add_key(admin)
    tls = {
        **SECURE,
        "super.users": f"User:admin;{NODE}",
        "server.ssl.certfile": str(node_cert),
        "server.ssl.keyfile": str(node_key),
        "server.ssl.cafile": str(ca[1]),
        "server.ssl.client.auth": "required",
    }
    # node 1 calls the others with its server certificate (the default), node 2 with a client certificate of its own
    own = {"inter.node.ssl.certificate.location": str(client_only), "inter.node.ssl.key.location": str(client_only_key)}
    nodes = [
        Server(
            tmp_path / "data",
            ca_file=str(ca[1]),
            client_cert=(alice[0], alice[1]),
            **{"zookeeper.connect": chroot, "node.id": node_id, "zookeeper.session.timeout.ms": 4000, **tls, **extra},
        ).start()
        for node_id, extra in ((1, {}), (2, own))
    ]
    try:
        with nodes[0].client(api_key=admin_key) as c:
            for topic in ("t", "secret"):
                assert c.post("/v1/topics", json={"name": topic, "partitions": 2}).status_code == 201

            def leaders() -> dict[int, int] | None:
                topics = {t["name"]: t for t in c.get("/v1/metadata").json()["topics"]}
                parts = topics.get("t", {}).get("partitions", [])
                found = {p["partition"]: p["leader"] for p in parts if p["leader"] in (1, 2)}
                return found if len(found) == 2 and set(found.values()) == {1, 2} else None

            assert until(lambda: leaders() is not None, timeout_s=30)
        group = next(f"g{i}" for i in range(100) if group_coordinator(f"g{i}", [1, 2]) == 2)
        with open_security_store(config) as store:
            store.add_acls(
                [
                    AclBinding(ALICE, ResourceType.TOPIC, "t", PatternType.LITERAL, Operation.WRITE, Permission.ALLOW),
                    AclBinding(ALICE, ResourceType.GROUP, group, PatternType.LITERAL, Operation.READ, Permission.ALLOW),
                ]
            )
        for node in nodes:  # the ACLs reached both nodes (WRITE implies DESCRIBE; nothing is forwarded here)
            assert until(lambda node=node: status(node, "/v1/topics/t", None) == 200), node.log()
        for node in nodes:  # as alice, by her certificate alone: every node forwards the partition the other leads
            with node.client() as c:
                for p in (0, 1):
                    r = c.post("/v1/topics/t/records", json={"records": [{"value": "eA==", "partition": p}]})
                    assert r.status_code == 200, (r.text, node.log())
                # her own identity even when she names another principal in the header nodes use
                forged = {FORWARDED_PRINCIPAL: "User:admin"}
                assert c.get("/v1/topics/t/partitions/0/records?offset=0", headers=forged).status_code == 403
                for p in (0, 1):  # whether this node leads the partition or forwards it
                    r = c.post(
                        "/v1/topics/secret/records",
                        json={"records": [{"value": "eA==", "partition": p}]},
                        headers=forged,
                    )
                    assert r.status_code == 403, r.text
        with nodes[0].client() as c:  # group coordinated by node 2, asked at node 1: forwarded, still alice
            r = c.get(f"/v1/groups/{group}")  # alice may describe it; it has no members or offsets yet
            assert (r.status_code, r.json()["error_code"]) == (404, "GROUP_ID_NOT_FOUND"), r.text
            other = next(f"h{i}" for i in range(100) if group_coordinator(f"h{i}", [1, 2]) == 2)
            assert c.get(f"/v1/groups/{other}", headers={FORWARDED_PRINCIPAL: "User:admin"}).status_code == 403
        # the header counts from a node's connection (its certificate's principal is a super user), and only there
        node_channel = ssl.create_default_context(cafile=str(ca[1]))
        node_channel.load_cert_chain(str(client_only), str(client_only_key))
        with httpx.Client(base_url=nodes[1].url, verify=node_channel) as c:
            read = "/v1/topics/t/partitions/0/records?offset=0"
            assert c.get(read, headers={FORWARDED_PRINCIPAL: ALICE}).status_code == 403  # alice may not read t
            assert c.get(read, headers={FORWARDED_PRINCIPAL: "User:admin"}).status_code == 200
        with nodes[0].client(api_key=admin_key) as c:
            for p in (0, 1):
                got = c.get(f"/v1/topics/t/partitions/{p}/records?offset=0").json()["records"]
                assert len(got) == 2
            for p in (0, 1):
                assert c.get(f"/v1/topics/secret/partitions/{p}/records?offset=0").json()["records"] == []
    finally:
        for s in nodes:
            if s.proc is not None and s.proc.poll() is None:
                s.kill()
