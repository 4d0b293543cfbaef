"""A TCP proxy the nemesis can cut and heal: a node's only way to its ZooKeeper servers.

:class:`CuttableProxy` listens on one loopback port and forwards every
connection to one upstream ``host:port``, a thread per direction. ``cut()``
closes every connection it carries and, until ``heal()``, closes each new one
as soon as it is accepted: the client sees a connection loss, then refused
sessions, as if the network between it and the server were gone — while the
client's other connections (a node's HTTP clients) are untouched. ``heal()``
lets new connections through again; those that were cut stay closed (the
client reconnects, as over a real network after a partition heals).

Used by ``bench/nemesis.py``: each ``logstore serve`` node reaches each
ZooKeeper server through a proxy of its own, so one node can be cut from
ZooKeeper while it still serves clients.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["CuttableProxy"]

_CHUNK = 65536


class CuttableProxy:
    """Forward connections from ``127.0.0.1:<port>`` to ``upstream``; see the module docstring.

    Args:
        upstream: ``(host, port)`` every accepted connection is forwarded to.
        name: what this proxy is, for thread names.
    """

    def __init__(self, upstream: tuple[str, int], name: str = "proxy") -> None:
        self.upstream = upstream
        self.name = name
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
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), name=f"{self.name}-pipe", daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(_CHUNK):
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
