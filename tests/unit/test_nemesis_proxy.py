"""The benchmarks' TCP proxy (bench/_proxy.py): it forwards, a cut closes what it carries and refuses new
connections, a heal lets them through again; with a delay, each answer waits, an HTTP interim answer does not, and
the answers are counted. In-process: an echo server on a thread, sockets on loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from bench._proxy import CuttableProxy


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(lambda: c.recv(4096), b"")]).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()
    server.close()


def roundtrip(port: int, data: bytes = b"ping") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        try:
            s.sendall(data)
            return s.recv(16)
        except ConnectionResetError:  # closed by the proxy before or while the bytes went
            return b""


def test_a_cut_closes_carried_connections_and_refuses_new_ones_until_healed(echo: tuple[str, int]) -> None:
    proxy = CuttableProxy(echo)
    try:
        assert roundtrip(proxy.port) == b"ping"
        carried = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        carried.sendall(b"one")
        assert carried.recv(16) == b"one"
        proxy.cut()
        assert carried.recv(16) == b""  # closed under the client
        carried.close()
        assert roundtrip(proxy.port) == b""  # accepted and closed at once
        proxy.heal()
        assert roundtrip(proxy.port, b"again") == b"again"
    finally:
        proxy.close()


def test_a_delay_holds_each_answer_once_but_not_an_interim_one_and_counts_them(echo: tuple[str, int]) -> None:
    delay_s = 0.5
    proxy = CuttableProxy(echo, delay_s=delay_s)
    try:
        t0 = time.perf_counter()
        assert roundtrip(proxy.port) == b"ping"
        assert time.perf_counter() - t0 >= delay_s
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
            t0 = time.perf_counter()
            s.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # echoed back: an interim answer, not held
            assert s.recv(64).startswith(b"HTTP/1.1 100")
            assert time.perf_counter() - t0 < delay_s
            t0 = time.perf_counter()
            s.sendall(b"body")  # the next request on the same connection waits again
            assert s.recv(16) == b"body"
            assert time.perf_counter() - t0 >= delay_s
        assert proxy.answers == 2
    finally:
        proxy.close()
