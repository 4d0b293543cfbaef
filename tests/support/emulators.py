"""What the object-store emulators of the tests (moto's S3 in :mod:`tests.support.s3`, Azurite in
:mod:`tests.support.azurite`) share: starting one on 127.0.0.1 and waiting until it answers, pointing this
process's environment at it for the run, a root in an empty working directory, and a root behind a
:class:`~tests.support.lossy_proxy.LossyProxy`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from tests.support.lossy_proxy import LossyProxy


def start_emulator(
    name: str, argv: list[str], log_path: Path, probe: str, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Run ``argv`` (its output appended to ``log_path``) with ``env`` over this process's environment, and return
    it once a GET of the URL ``probe`` is answered (any status), within 60 s.

    Raises:
        RuntimeError: it exited first (the message holds its log), or it did not answer in time (it is killed).
    """
    with log_path.open("ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait for the socket, not for a fixed time
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited: {log_path.read_text()}")
        try:
            httpx.get(probe, timeout=1)
            return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{name} did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate ``proc`` and wait for it (30 s, then kill it)."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def serving(proc: subprocess.Popen[bytes], env: Mapping[str, str], unset: Iterable[str] = ()) -> Iterator[None]:
    """While inside: the variables ``unset`` removed and ``env`` set in ``os.environ`` (so the ``logstore serve``
    processes the tests start inherit them); after: every one of them as it was, and ``proc`` stopped."""
    before = {k: os.environ.get(k) for k in [*env, *unset]}
    for k in unset:
        os.environ.pop(k, None)
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        stop(proc)


def in_empty_cwd(root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The body of an ``object_root`` fixture: yields the URI ``root`` with the working directory an empty one.

    Then fails if a folder named after the URI appeared there: a URI taken for a local path would pass every
    other check while writing nothing to the store.
    """
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    yield root
    scheme = root.partition("://")[0]
    assert not (cwd / f"{scheme}:").exists(), f"the store wrote to a local folder named after the {scheme}:// URI"


def behind_lossy_proxy(
    root: str, upstream: str, variable: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, LossyProxy]]:
    """The body of a ``lossy_*_root`` fixture: yields (``root``, a proxy to the server at ``upstream``) with the
    environment variable ``variable`` naming the proxy's URL for the test; closes the proxy after."""
    proxy = LossyProxy(upstream)
    monkeypatch.setenv(variable, proxy.url)
    try:
        yield root, proxy
    finally:
        proxy.close()
