"""A real `logstore serve` process on loopback, for the HTTP tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

_EXE = str(Path(sys.executable).parent / "logstore")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``logstore serve`` in a child process; ``url`` is its base URL."""

    def __init__(self, root: Path, **config: object) -> None:
        self.root = root
        self.config = config
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}
        env |= {"LOGSTORE_" + k.upper().replace(".", "_"): str(v) for k, v in self.config.items()}
        self.proc = subprocess.Popen(
            [_EXE, "--root", str(self.root), "serve", "--port", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait for the socket, not for a fixed time
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError("server did not become ready")

    def restart(self) -> Server:
        """Start again on the same root and port (after :meth:`kill` or :meth:`stop`)."""
        return self.start()

    def client(self, timeout: float = 30) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)

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
