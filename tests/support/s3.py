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
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from tests.support.server import free_port

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
