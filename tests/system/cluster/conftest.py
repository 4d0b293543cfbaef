"""Fixtures of the cluster tests: a real ZooKeeper server for the run, a chroot (one cluster) per test, nodes of
that cluster over one shared root, and a ZooKeeper client to read partition states.

The shared root is a directory (``tmp_path / "data"``); a test parametrised indirectly with
``cluster_root=["local", "s3"]`` runs again on a bucket of moto's S3 server (tests/support/s3.py), with no shared
file system between the nodes."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from logstore.cluster.zookeeper_server import ZooKeeperServer
from tests.support.s3 import object_root as object_root
from tests.support.s3 import s3_bucket as s3_bucket
from tests.support.s3 import s3_root as s3_root
from tests.support.server import Server, free_port, started_servers
from tests.system.cluster.cluster_helpers import SESSION_MS


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real standalone ZooKeeper server for the test run; yields ``host:port`` (give each test its own chroot)."""
    zk = ZooKeeperServer(str(tmp_path_factory.mktemp("zookeeper")), port=free_port())
    proc = zk.spawn()
    try:
        zk.wait_serving(proc)
        yield zk.connect
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> ZooKeeperServer:
    """A ZooKeeper server of the test's own, not started: the test stops and starts it (``spawn``, ``kill``)."""
    return ZooKeeperServer(str(tmp_path / "zk"), port=free_port())


@pytest.fixture
def chroot(zookeeper: str) -> str:
    """A fresh ZooKeeper chroot of the session's server: one cluster per test."""
    return f"{zookeeper}/test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cluster_root(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """The root the cluster's nodes share: ``tmp_path / "data"``, or with the indirect parameter ``"s3"`` a new
    bucket's ``s3://<bucket>/data`` (``object_root``: the test runs in an empty working directory). A path stays
    a ``Path``: tests of a local root reach into it (``node.root / "topics"``)."""
    if getattr(request, "param", "local") == "s3":
        return str(request.getfixturevalue("object_root"))
    return tmp_path / "data"


@pytest.fixture
def cluster(cluster_root: Path | str, tmp_path: Path, chroot: str) -> Iterator[Callable[..., Server]]:
    """``cluster(node_id)`` starts a node of one cluster over one shared root (``cluster_root``)."""

    def node(node_id: int, **config: object) -> Server:
        return Server(
            cluster_root,
            log_dir=tmp_path,
            **{
                "zookeeper.connect": chroot,
                "node.id": node_id,
                "zookeeper.session.timeout.ms": SESSION_MS,
                "linger.ms": 2,
                **config,
            },
        )

    yield from started_servers(node)


@pytest.fixture
def zk(chroot: str) -> Iterator[KazooClient]:
    """A ZooKeeper client of the cluster's chroot, for the test to read partition states."""
    client = KazooClient(hosts=chroot)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()
