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
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import httpx
import pytest

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
    with (log_dir / f"moto-{port}.log").open("ab") as log:
        proc = subprocess.Popen(
            [exe, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log, env={**os.environ, **env}
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait for the socket, not for a fixed time
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited: {(log_dir / f'moto-{port}.log').read_text()}")
        try:
            httpx.get(url + "/moto-api/", timeout=1)
            return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("moto_server did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server for the whole run; its endpoint URL, also in ``AWS_ENDPOINT_URL`` while it runs."""
    proc, url = start_moto(tmp_path_factory.mktemp("moto"))
    before = {k: os.environ.get(k) for k in [*S3_ENV, "AWS_ENDPOINT_URL"]}
    os.environ.update(S3_ENV, AWS_ENDPOINT_URL=url)
    try:
        yield url
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        stop(proc)


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
    """``s3_root`` for a test that runs in an empty working directory (so do the nodes it starts).

    The test fails if a folder named after the URI appeared there: a URI taken for a local path would pass
    every other check while writing nothing to S3.
    """
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    yield s3_root
    assert not (cwd / "s3:").exists(), "the store wrote to a local folder named after the s3:// URI"


@pytest.fixture(name="server")
def server_on_root(root: str, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``logstore serve`` on the ``root`` fixture's root: the tiers' ``server`` fixture, for storage tests."""

    def new(on: str | None = None, **config: object) -> Server:
        return Server(on or root, log_dir=tmp_path, **config)

    yield from started_servers(new)
