"""A real `logstore serve` process on loopback for the HTTP tests, and the ``server`` fixture that starts them."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.harness import free_port

LOGSTORE = [sys.executable, "-m", "logstore_cli"]
"""The ``logstore`` command, run from the code under test (not the console script installed once)."""


class Server:
    """``logstore serve`` in a child process; ``url`` is its base URL.

    ``ca_file`` set means the server speaks TLS (``server.ssl.*`` in ``config``)
    with a certificate that CA signed; ``client_cert`` is a ``(cert, key)`` pair
    for a server that requires client certificates.
    """

    def __init__(
        self,
        root: Path | str,
        *,
        log_dir: Path | None = None,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
        **config: object,
    ) -> None:
        self.root = root
        self.config = config
        self.port = free_port()
        self.ca_file = ca_file
        self.client_cert = client_cert
        self.url = f"{'https' if ca_file else 'http'}://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        # stderr to a file, not a pipe: a pipe nobody reads fills up and stalls the server
        # An s3:// root has no parent folder to keep the log in: log_dir says where (default: the working directory).
        default_dir = Path.cwd() if "://" in str(root) else Path(root).parent
        self.log_path = (log_dir or default_dir) / f"server-{self.port}.log"

    def log(self) -> str:
        """What the server wrote on stderr so far (errors, audit lines), across restarts."""
        return self.log_path.read_text() if self.log_path.exists() else ""

    def ssl_context(self) -> ssl.SSLContext | bool:
        """How a test client verifies this server (and presents its client certificate)."""
        if self.ca_file is None:
            return True
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.client_cert is not None:
            ctx.load_cert_chain(*self.client_cert)
        return ctx

    def start(self) -> Server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}
        # The Kafka listener only where a test asks for it (``listeners=...``): else every server would try 9092.
        env["LOGSTORE_LISTENERS"] = ""
        env |= {"LOGSTORE_" + k.upper().replace(".", "_"): str(v) for k, v in self.config.items()}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [*LOGSTORE, "--root", str(self.root), "serve", "--port", str(self.port)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait for the socket, not for a fixed time
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1, verify=self.ssl_context()).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError("server did not become ready")

    def restart(self) -> Server:
        """Start again on the same root and port (after :meth:`kill` or :meth:`stop`)."""
        return self.start()

    def client(self, timeout: float = 30, api_key: str | None = None) -> httpx.Client:
        """An HTTP client of this server; with ``api_key``, sent as ``Authorization: Bearer``."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        return httpx.Client(base_url=self.url, timeout=timeout, headers=headers, verify=self.ssl_context())

    def kill(self) -> None:
        """SIGKILL: no drain, no flush."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> int:
        """SIGTERM: drain and exit; returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start ``logstore serve`` on a fresh root: ``server(**{"linger.ms": 5})``; killed after the test if still running.

    A fixture of the integration and system tiers (their conftest.py imports it).
    """

    def new(root: Path | str | None = None, **config: object) -> Server:
        return Server(root or tmp_path / "data", log_dir=tmp_path, **config)

    yield from started_servers(new)


def started_servers(make: Callable[..., Server]) -> Iterator[Callable[..., Server]]:
    """The body of a fixture that starts servers: yields a function that starts ``make(*args, **config)`` and
    returns it; after the test, kills those of them still running."""
    started: list[Server] = []

    def start(*args: Any, **config: object) -> Server:
        s = make(*args, **config).start()
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc is not None and s.proc.poll() is None:
            s.kill()
