"""A TCP proxy the nemesis can cut and heal, and that can slow every round trip through it.

:class:`CuttableProxy` listens on one loopback port and forwards every
connection to one upstream ``host:port``, a thread per direction. ``cut()``
closes every connection it carries and, until ``heal()``, closes each new one
as soon as it is accepted: the client sees a connection loss, then refused
sessions, as if the network between it and the server were gone — while the
client's other connections (a node's HTTP clients) are untouched. ``heal()``
lets new connections through again; those that were cut stay closed (the
client reconnects, as over a real network after a partition heals).

With ``delay_s``, the server's answer to each request is held ``delay_s``
before it is forwarded: the first bytes the server sends after the client
has spoken wait, the rest of that answer does not, and connections do not
wait for each other. An HTTP interim answer (``HTTP/1.1 100 Continue``, which
boto3 awaits before a PUT's body) passes at once, so a request costs one
delay, as a store's time to answer (an S3 request's ~20 ms) would. This is
how a benchmark puts that latency in front of a local server. ``answers``
counts those answers (with or without a delay): the requests made through
the proxy.

Used by ``bench/nemesis.py``: each ``logstore serve`` node reaches each
ZooKeeper server through a proxy of its own, so one node can be cut from
ZooKeeper while it still serves clients; and by ``bench/object_store.py``, a
slowed path to the S3 server.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

__all__ = ["CuttableProxy"]

_CHUNK = 65536
_INTERIM = b"HTTP/1.1 1"
"""How an HTTP/1.1 interim answer (``100 Continue``) starts: not held by a delay."""


class CuttableProxy:
    """Forward connections from ``127.0.0.1:<port>`` to ``upstream``; see the module docstring.

    Args:
        upstream: ``(host, port)`` every accepted connection is forwarded to.
        name: what this proxy is, for thread names.
        delay_s: seconds added to each answer (see the module docstring); 0: none.
    """

    def __init__(self, upstream: tuple[str, int], name: str = "proxy", delay_s: float = 0.0) -> None:
        self.upstream = upstream
        self.name = name
        self.delay_s = delay_s
        self.answers = 0
        """Answers the server began to send after a client spoke (interim ones not counted): requests served."""
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name=f"{name}-accept", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``: what a client connects to instead of the upstream."""
        return f"127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """Close every carried connection and refuse new ones until :meth:`heal`."""
        with self._lock:
            self._cut = True
            carried, self._open = self._open, set()
        for s in carried:
            _close(s)

    def heal(self) -> None:
        """Let new connections through again."""
        with self._lock:
            self._cut = False

    def close(self) -> None:
        """Stop listening and close everything."""
        self._closed = True
        self.cut()
        _close(self._server)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            with self._lock:
                refused = self._cut
            if refused:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=2)
                upstream.settimeout(None)
            except OSError:
                _close(client)  # the server is down: the client sees what it would see without a proxy
                continue
            with self._lock:
                if self._cut:
                    _close(client)
                    _close(upstream)
                    continue
                self._open |= {client, upstream}
            asked = threading.Event()  # set: the client has spoken since the server's last answer began
            for a, b in ((client, upstream), (upstream, client)):
                args = (a, b, asked, a is client)
                threading.Thread(target=self._pipe, args=args, name=f"{self.name}-pipe", daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, asked: threading.Event, from_client: bool) -> None:
        try:
            while chunk := src.recv(_CHUNK):
                if from_client:
                    asked.set()
                elif asked.is_set() and not chunk.startswith(_INTERIM):
                    asked.clear()
                    with self._lock:
                        self.answers += 1
                    if self.delay_s:
                        time.sleep(self.delay_s)
                dst.sendall(chunk)
        except OSError:
            pass  # one side closed or was cut
        finally:
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
