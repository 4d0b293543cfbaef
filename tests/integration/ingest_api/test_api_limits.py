"""The HTTP tier's bounds: request bodies by size and by time, fetches by bytes, producer ids by length.

Every bound answers with a Kafka error before memory grows with the input:
``max.request.size`` (413 ``RECORD_LIST_TOO_LARGE``, also for chunked bodies),
``request.timeout.ms`` (408 ``REQUEST_TIMED_OUT`` for a body that stalls),
a fetch's ``max_bytes`` (the reader stops reading once it has enough), and
``producer_id`` of 1-256 characters without control characters.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import httpx
import orjson
import pytest

from logstore.wire.json_produce import MAX_PRODUCER_ID_LENGTH
from tests.support.server import Server

StartServer = Callable[..., Server]
MIB = 1024 * 1024
MAX_REQUEST = MIB
TIMEOUT_MS = 2000
FETCH_MAX = 1024


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """One server with topic ``t`` for the cases that only send bad input (it changes nothing)."""
    srv = Server(
        tmp_path_factory.mktemp("limits") / "data",
        **{"max.request.size": MAX_REQUEST, "request.timeout.ms": TIMEOUT_MS, "fetch.max.bytes": FETCH_MAX},
    ).start()
    try:
        c = srv.client()
        assert c.post("/v1/topics", json={"name": "t"}).status_code == 201
        yield c
    finally:
        srv.kill()


@pytest.mark.parametrize(
    ("producer_id", "fragment"),
    [
        ("p" * (MAX_PRODUCER_ID_LENGTH + 1), "1 to 256 characters"),
        ("", "1 to 256 characters"),
        (7, "1 to 256 characters"),
        ("line\nbreak", "control characters"),
        ("nul\x00", "control characters"),
        ("del\x7f", "control characters"),
    ],
)
def test_producer_id_is_bounded(api: httpx.Client, producer_id: object, fragment: str) -> None:
    r = api.post("/v1/topics/t/records", json={"records": [{"value": "x"}], "producer_id": producer_id, "sequence": 0})
    assert r.status_code == 400, r.text
    assert r.json()["error_code"] == "INVALID_REQUEST" and fragment in r.json()["message"]


def test_longest_producer_id_is_accepted(api: httpx.Client) -> None:
    body = {"records": [{"value": "x"}], "producer_id": "é" * MAX_PRODUCER_ID_LENGTH, "sequence": 0}
    assert api.post("/v1/topics/t/records", json=body).status_code == 200


def _response(sock: socket.socket) -> tuple[int, dict[str, object], bool]:
    """Status, JSON body and whether the server then closed the connection, read off a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        body += sock.recv(65536)
    sock.settimeout(2)  # well inside uvicorn's 5 s keep-alive: a close now is the server's answer, not idleness
    try:
        closed = sock.recv(1) == b""
    except ConnectionResetError:
        closed = True  # closed with the client's bytes unread: the kernel answers with a reset
    except TimeoutError:
        closed = False
    return int(lines[0].split()[1]), orjson.loads(body), closed


def _connect(api: httpx.Client) -> socket.socket:
    sock = socket.create_connection((api.base_url.host, api.base_url.port), timeout=30)
    return sock


def test_chunked_body_over_the_limit_is_refused_before_it_is_read(api: httpx.Client) -> None:
    total = 64 * MAX_REQUEST  # what the client would send if the server kept reading
    piece = b'{"records": [' + b'{"value": "' + b"x" * (64 * 1024 - 20) + b'"},'
    sock = _connect(api)
    sock.sendall(b"POST /v1/topics/t/records HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    answered: list[tuple[int, dict[str, object], bool]] = []
    reader = threading.Thread(target=lambda: answered.append(_response(sock)))
    reader.start()
    sent = 0
    try:
        sock.settimeout(5)  # a server that stopped reading blocks the send once the socket buffers are full
        while sent < total and not answered:
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            sent += len(piece)
        if not answered:
            sock.sendall(b"0\r\n\r\n")  # all of it went through: end the body so the server answers at last
    except OSError:
        pass  # reset, closed or blocked: the server stopped reading
    reader.join(timeout=60)
    sock.close()
    assert answered, "no response"
    status, body, closed = answered[0]
    assert status == 413 and body["error_code"] == "RECORD_LIST_TOO_LARGE", body
    assert "max.request.size" in str(body["message"])
    assert closed
    assert sent < total // 2, f"the client sent {sent} bytes of a refused body"


def test_stalled_body_times_out(api: httpx.Client) -> None:
    sock = _connect(api)
    sock.sendall(b"POST /v1/topics/t/records HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
    sock.sendall(b'{"records": [{"value": "x"}]')  # then nothing more
    status, body, closed = _response(sock)
    sock.close()
    assert status == 408 and body["error_code"] == "REQUEST_TIMED_OUT", body
    assert f"request.timeout.ms={TIMEOUT_MS}" in str(body["message"])
    assert closed
    # the node still serves everyone else
    assert api.post("/v1/topics/t/records", json={"records": [{"value": "ok"}]}).status_code == 200


def test_fetch_max_bytes_caps_what_a_fetch_asks_for(api: httpx.Client) -> None:
    api.post("/v1/topics", json={"name": "capped"})
    assert api.post("/v1/topics/capped/records", json={"records": [{"value": "x" * 400}] * 5}).status_code == 200
    params = {"offset": 0, "max_bytes": 2**40, "max_records": 5}
    got = api.get("/v1/topics/capped/partitions/0/records", params=params).json()["records"]
    assert len(got) == FETCH_MAX // 400
