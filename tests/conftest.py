"""Fixtures of every tier: a fresh root per test, and the one SparkSession of the whole run.

The session is started by the first test that asks for it (in tests/integration or tests/system; a unit
test that asks for it fails, as it starts a JVM) and shared by every later one. The fixtures that start
``logstore serve`` are in the integration and system tiers' conftest.py, ZooKeeper's in tests/system/cluster.
The object-store emulators (``s3_server``, ``azurite_server``: one each per run, started by the first test that
asks) are declared here, once: a session fixture imported into two conftest.py files would be two fixtures,
two servers, and whichever started last would own the ``AWS_ENDPOINT_URL`` (``AZURITE_BLOB_STORAGE_URL``) that
the other's tests then read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from logstore.config import LogstoreConfig, load_config
from logstore.store import LogStore
from tests.support.azurite import azurite_server as azurite_server
from tests.support.paths import SPARK_KAFKA_JARS
from tests.support.s3 import s3_server as s3_server

if TYPE_CHECKING:
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
    """The one SparkSession of the test run (local, Delta configured, Spark's Kafka connector on its classpath).

    The connector adds four jars (itself, kafka-clients, commons-pool2, the token provider; the rest pyspark
    ships), so tests/system/kafka drives ``format("kafka")`` against the Kafka listener in this session
    instead of starting a JVM of its own. Without the cache the session starts without it, and those tests skip.
    """
    from logstore.spark import delta_jars, session, unbundled_jars

    # session() puts Delta's cached jars in spark.jars (else Delta comes from spark.jars.packages, left as is)
    jars = delta_jars(load_config().spark_jars_dir or None)
    if any(SPARK_KAFKA_JARS.glob("spark-sql-kafka-*.jar")):
        jars += unbundled_jars(SPARK_KAFKA_JARS)
    s = session(
        **({"spark.jars": ",".join(jars)} if jars else {}),
        **{
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.databricks.delta.snapshotPartitions": "2",
        },
    )
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()
