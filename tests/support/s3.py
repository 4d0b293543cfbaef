"""A real S3 server for the object-storage tests: moto's (``moto_server``) on 127.0.0.1, one per test run.

``s3_server`` starts it (and stops it at the end of the run) and points the ``AWS_*`` variables of this
process — and so of the ``logstore serve`` processes the tests start — at it; ``s3_root`` gives each test a
bucket of its own and returns ``s3://<bucket>/data``. Nothing here mocks the S3 client: boto3, pyarrow and
delta-rs talk HTTP to the server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest

from tests.support.emulators import behind_lossy_proxy, in_empty_cwd, serving, start_emulator
from tests.support.lossy_proxy import LossyProxy
from tests.support.server import Server, free_port, started_servers

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
}
"""Credentials and region the tests use (moto accepts any credentials unless told to check them)."""


def start_moto(log_dir: Path, **env: str) -> tuple[subprocess.Popen[bytes], str]:
    """``moto_server`` on a free loopback port, once it answers; (process, endpoint URL)."""
    exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or "moto_server"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [exe, "-H", "127.0.0.1", "-p", str(port)]
    return start_emulator("moto_server", argv, log_dir / f"moto-{port}.log", f"{url}/moto-api/", env), url


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server for the whole run; its endpoint URL, also in ``AWS_ENDPOINT_URL`` while it runs."""
    proc, url = start_moto(tmp_path_factory.mktemp("moto"))
    with serving(proc, {**S3_ENV, "AWS_ENDPOINT_URL": url}):
        yield url


@pytest.fixture
def s3_bucket(s3_server: str) -> str:
    """A new, empty bucket."""
    name = f"logstore-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server, region_name=S3_ENV["AWS_REGION"]).create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_root(s3_bucket: str) -> str:
    """``logstore.root`` in a new bucket: ``s3://<bucket>/data``."""
    return f"s3://{s3_bucket}/data"


@pytest.fixture
def object_root(s3_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``s3_root`` for a test that runs in an empty working directory (so do the nodes it starts); the test fails
    if a local folder named after the URI appears there (:func:`~tests.support.emulators.in_empty_cwd`)."""
    yield from in_empty_cwd(s3_root, tmp_path, monkeypatch)


@pytest.fixture(name="server")
def server_on_root(root: str, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``logstore serve`` on the ``root`` fixture's root: the tiers' ``server`` fixture, for storage tests."""

    def new(on: str | None = None, **config: object) -> Server:
        return Server(on or root, log_dir=tmp_path, **config)

    yield from started_servers(new)


@pytest.fixture
def lossy_s3_root(s3_bucket: str, s3_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, LossyProxy]]:
    """``s3://<bucket>/data`` reached through a :class:`LossyProxy` to the S3 server; (root, proxy).

    ``AWS_ENDPOINT_URL`` points at the proxy for the test (the bucket is new, so the storage built for it
    talks to the proxy); add :class:`~tests.support.lossy_proxy.Rule` s to ``proxy.rules`` to lose replies.
    """
    yield from behind_lossy_proxy(f"s3://{s3_bucket}/data", s3_server, "AWS_ENDPOINT_URL", monkeypatch)
