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
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logstore.cluster.security_store import ZooKeeperSecurityStore, open_security_store
from logstore.config import load_config
from logstore.security import FileSecurityStore
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


def test_the_store_is_zookeeper_exactly_when_zookeeper_connect_is_set(tmp_path: Path, chroot: str) -> None:
    with open_security_store(load_config(None, overrides={"logstore.root": str(tmp_path)})) as embedded:
        assert isinstance(embedded, FileSecurityStore)
    config = load_config(None, overrides={"logstore.root": str(tmp_path), "zookeeper.connect": chroot})
    with open_security_store(config) as cluster:
        assert isinstance(cluster, ZooKeeperSecurityStore)
