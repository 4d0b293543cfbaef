"""An HTTP proxy in front of the test S3 server that loses replies on request, for the lost-reply tests.

A request that matches a :class:`Rule` (method, a regular expression on its path, a count) is treated as
the rule says: ``"drop_reply"`` forwards it — so the server stores what it carries — and then closes the
client's connection without answering (the reply was lost on the way back); ``"refuse"`` closes the
connection without forwarding (the network is down). Every other request, and every request once a rule's
count is used up, is passed through byte for byte: its body as it came (chunked bodies keep their chunk
framing and trailers, which pyarrow's multipart uploads rely on) and the server's status, headers and body
as they came (a HEAD keeps its ``Content-Length``). Runs in threads of the test process.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from tests.support.server import free_port

__all__ = ["LossyProxy", "Rule"]

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding"}


@dataclass
class Rule:
    """Treat the next ``count`` requests ``method`` ``path`` (a regex searched in it) as ``action`` says."""

    method: str
    path: str
    action: str
    """``"drop_reply"`` (forward, then close without answering) or ``"refuse"`` (close without forwarding)."""
    count: int = 1
    then: list[Rule] = field(default_factory=list)
    """Rules that take effect once this one has acted (say, refusing reads only after a write went through)."""


@dataclass
class LossyProxy:
    """The proxy to ``upstream`` (a ``http://host:port`` URL); ``url`` is where to point ``AWS_ENDPOINT_URL``."""

    upstream: str
    rules: list[Rule] = field(default_factory=list)
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)
    """(method, path, action taken or None) of every request, in arrival order."""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="lossy-proxy", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def action_for(self, method: str, path: str) -> str | None:
        """The action of the first live rule matching the request (using up one of its count), else None."""
        with self._lock:
            action = None
            for rule in self.rules:
                if rule.count > 0 and rule.method == method and re.search(rule.path, path):
                    rule.count -= 1
                    action = rule.action
                    self.rules += rule.then
                    rule.then = []
                    break
            self.seen.append((method, path, action))
            return action


def _handler(proxy: LossyProxy) -> type[BaseHTTPRequestHandler]:
    host = urlsplit(proxy.upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _raw_body(self) -> bytes:
            """The request body exactly as sent (with its chunk framing if chunked)."""
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                raw = b""
                while True:
                    line = self.rfile.readline()
                    raw += line
                    size = int(line.split(b";")[0], 16)
                    if size == 0:
                        while True:  # trailers, then the empty line
                            trailer = self.rfile.readline()
                            raw += trailer
                            if trailer in (b"\r\n", b"\n", b""):
                                return raw
                    raw += self.rfile.read(size + 2)  # the chunk and its CRLF
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def _hang_up(self) -> None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def _any(self) -> None:
            body = self._raw_body()
            action = proxy.action_for(self.command, self.path)
            if action == "refuse":
                self._hang_up()
                return
            upstream = http.client.HTTPConnection(host.hostname or "127.0.0.1", host.port, timeout=60)
            try:
                upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in self.headers.items():
                    upstream.putheader(k, v)
                upstream.endheaders(body or None)
                reply = upstream.getresponse()
                data = reply.read()
                status, reason, headers = reply.status, reply.reason, reply.getheaders()
            finally:
                upstream.close()
            if action == "drop_reply":
                self._hang_up()
                return
            self.send_response_only(status, reason)
            for k, v in headers:
                if k.lower() not in _HOP_BY_HOP and not (k.lower() == "content-length" and self.command != "HEAD"):
                    self.send_header(k, v)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

    return Handler
