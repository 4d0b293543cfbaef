"""Shared fixtures: a fresh root per test, one SparkSession for the whole run."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from logstore.config import LogstoreConfig, load_config
from logstore.store import LogStore

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from pyspark.sql import SparkSession


@pytest.fixture
def config(tmp_path: Path) -> LogstoreConfig:
    """Defaults over a fresh, empty root (no config file, no LOGSTORE_* variables)."""
    return load_config(environ={}, path=None, overrides={"logstore.root": str(tmp_path / "data")})


@pytest.fixture
def store(config: LogstoreConfig) -> LogStore:
    return LogStore(config)


@pytest.fixture
def make_topic(store: LogStore) -> Callable[..., str]:
    """Create a topic with a fresh name: ``make_topic(partitions=3, **config)``."""
    counter = iter(range(1_000_000))

    def make(partitions: int = 1, **config: object) -> str:
        name = f"topic-{next(counter)}"
        store.create_topic(name, partitions, {k.replace("_", "."): v for k, v in config.items()})
        return name

    return make


@pytest.fixture(scope="session", autouse=True)
def spark_local_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Spark's scratch (``SPARK_LOCAL_DIRS``) of every JVM the run starts, under the run's temporary directory.

    A Spark process removes its scratch directories (``spark-*``, one with a copy of pyspark of ~13 MB, and
    ``blockmgr-*``) only when it ends cleanly; the crash tests end theirs with kill -9. Under pytest's base
    directory, of which pytest keeps the last three runs, they do not pile up in ``/tmp``.
    """
    before = os.environ.get("SPARK_LOCAL_DIRS")
    os.environ["SPARK_LOCAL_DIRS"] = str(tmp_path_factory.mktemp("spark-local"))
    yield
    if before is None:
        del os.environ["SPARK_LOCAL_DIRS"]
    else:
        os.environ["SPARK_LOCAL_DIRS"] = before


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The one SparkSession of the test run (local, Delta configured)."""
    from logstore.spark import session

    s = session(
        **{
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.databricks.delta.snapshotPartitions": "2",
        }
    )
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real standalone ZooKeeper server for the test run; yields ``host:port`` (give each test its own chroot)."""
    from logstore.cluster.zookeeper_server import ZooKeeperServer
    from tests.support.server import free_port

    zk = ZooKeeperServer(str(tmp_path_factory.mktemp("zookeeper")), port=free_port())
    proc = zk.spawn()
    try:
        zk.wait_serving(proc)
        yield zk.connect
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def chroot(zookeeper: str) -> str:
    """A fresh ZooKeeper chroot of the session's server: one cluster per test."""
    import uuid

    return f"{zookeeper}/test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cluster(tmp_path: Path, chroot: str) -> Iterator[Callable[..., object]]:
    """``cluster(node_id)`` starts a node of one cluster over one shared root (``tmp_path / "data"``)."""
    from tests.cluster_helpers import SESSION_MS
    from tests.support.server import Server

    started: list[Server] = []

    def start(node_id: int, **config: object) -> Server:
        s = Server(
            tmp_path / "data",
            **{
                "zookeeper.connect": chroot,
                "node.id": node_id,
                "zookeeper.session.timeout.ms": SESSION_MS,
                "linger.ms": 2,
                **config,
            },
        ).start()
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc is not None and s.proc.poll() is None:
            s.kill()


@pytest.fixture
def zk(chroot: str) -> Iterator[KazooClient]:
    """A ZooKeeper client of the cluster's chroot, for the test to read partition states."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=chroot)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Callable[..., object]]:
    """Start ``logstore serve`` on a fresh root: ``server(**{"linger.ms": 5})``; stopped after the test."""
    from tests.support.server import Server

    started: list[Server] = []

    def start(root: Path | None = None, **config: object) -> Server:
        s = Server(root or tmp_path / "data", **config).start()
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc is not None and s.proc.poll() is None:
            s.kill()
