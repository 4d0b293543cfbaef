"""An s3:// root that cannot be used fails at once, with an error that names the setting or the object."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from logstore.config import load_config
from logstore.errors import InvalidConfigError, KafkaStorageError
from logstore.storage import storage_for
from logstore.store import LogStore
from tests.support.emulators import stop
from tests.support.s3 import S3_ENV, start_moto
from tests.support.server import LOGSTORE, Server


def logstore(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}
    return subprocess.run([*LOGSTORE, *args], cwd=cwd, capture_output=True, text=True, env=base | env, timeout=120)


def test_a_bucket_that_does_not_exist_is_named(s3_server: str, tmp_path: Path) -> None:
    config = load_config(environ={}, path=None, overrides={"logstore.root": "s3://no-such-bucket/data"})
    with pytest.raises(KafkaStorageError, match="bucket 'no-such-bucket' does not exist") as e:
        LogStore(config)
    assert "logstore.root" in e.value.message
    r = logstore(tmp_path, "--root", "s3://no-such-bucket/data", "topics", "list")
    assert r.returncode == 1
    assert r.stderr.startswith("KAFKA_STORAGE_ERROR: logstore.root: bucket 'no-such-bucket' does not exist"), r.stderr


@pytest.fixture
def checking_s3(tmp_path: Path) -> Iterator[str]:
    """A second moto server that checks credentials (it knows none, so every key is refused)."""
    proc, url = start_moto(tmp_path, INITIAL_NO_AUTH_ACTION_COUNT="0")
    try:
        yield url
    finally:
        stop(proc)


def test_refused_credentials_name_the_variables(checking_s3: str, tmp_path: Path) -> None:
    env = S3_ENV | {"AWS_ENDPOINT_URL": checking_s3, "AWS_ACCESS_KEY_ID": "wrong"}
    r = logstore(tmp_path, "--root", "s3://some-bucket/data", "topics", "list", **env)
    assert r.returncode == 1
    assert r.stderr.startswith("KAFKA_STORAGE_ERROR: logstore.root: S3 refused the credentials"), r.stderr
    assert "AWS_ACCESS_KEY_ID" in r.stderr and "AWS_SECRET_ACCESS_KEY" in r.stderr


def test_an_endpoint_nobody_serves_is_named(tmp_path: Path) -> None:
    env = S3_ENV | {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1"}
    r = logstore(tmp_path, "--root", "s3://some-bucket/data", "topics", "list", **env)
    assert r.returncode == 1
    assert r.stderr.startswith("KAFKA_STORAGE_ERROR: logstore.root: cannot reach S3"), r.stderr
    assert "AWS_ENDPOINT_URL (now http://127.0.0.1:9)" in r.stderr


def test_a_root_with_no_bucket_or_an_unserved_scheme_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match="names a bucket"):
        load_config(environ={}, path=None, overrides={"logstore.root": "s3:///data"})
    with pytest.raises(InvalidConfigError, match="names a container"):
        load_config(environ={}, path=None, overrides={"logstore.root": "az:///data"})
    with pytest.raises(InvalidConfigError, match="'gs://' roots are not served"):
        load_config(environ={}, path=None, overrides={"logstore.root": "gs://bucket/data"})
    with pytest.raises(InvalidConfigError, match=r"security\.enabled: keys, ACLs and quotas have no object-store form"):
        load_config(environ={}, path=None, overrides={"logstore.root": "s3://b/data", "security.enabled": "true"})
    # Cluster mode is served on an object-store root (tests/system/cluster/test_cluster_nodes.py); security is not.
    cluster = {"logstore.root": "s3://b/data", "zookeeper.connect": "127.0.0.1:2181"}
    assert load_config(environ={}, path=None, overrides=cluster).zookeeper_connect == "127.0.0.1:2181"
    with pytest.raises(InvalidConfigError, match=r"security\.enabled: keys, ACLs and quotas have no object-store form"):
        load_config(environ={}, path=None, overrides={**cluster, "security.enabled": "true"})
    # A local write-ahead log would hide a dead node's acks=1 records from the node that takes its partitions.
    with pytest.raises(InvalidConfigError, match=r"wal\.dir '/var/lib/logstore/wal' is a local directory"):
        load_config(environ={}, path=None, overrides={**cluster, "wal.dir": "/var/lib/logstore/wal"})
    shared = {**cluster, "wal.dir": "s3://b/wal/1"}
    assert load_config(environ={}, path=None, overrides=shared).wal_dir == "s3://b/wal/1"


def test_a_write_ahead_log_held_from_another_host_is_refused_naming_its_lock(s3_root: str, tmp_path: Path) -> None:
    # No flock on S3: a lock object left by a node on another machine stays until that node is back or it is
    # deleted by someone who knows the node is gone; the error says which object.
    lock = f"{s3_root}/_wal/node.lock"
    storage_for(lock).put(lock, b'{"pid": 1, "host": "elsewhere", "since": "2026-01-01T00:00:00+00:00"}')
    node = Server(s3_root, log_dir=tmp_path)
    with pytest.raises(RuntimeError, match="server exited"):
        node.start()
    assert "in use by another process (pid 1 on host elsewhere" in node.log()
    assert f"delete {lock}" in node.log()
    storage_for(lock).delete(lock)
    node.start()
    assert node.client().get("/readyz").status_code == 200
    node.stop()
    assert not storage_for(lock).exists(lock)  # released on a clean stop
