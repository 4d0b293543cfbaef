""":func:`zookeeper_ok` asks whether ZooKeeper serves sessions, not whether its port is open.

A ZooKeeper still loading its data answers ``ruok`` with ``imok`` and drops every session request; the peer here
answers each four-letter word as such a server does (ZooKeeper 3.9's texts), then as one that serves. A probe
that trusted ``imok`` let an outage test start its clock while ZooKeeper still refused sessions.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from logstore.cluster.zookeeper_server import zookeeper_ok

NOT_SERVING = b"This ZooKeeper instance is not currently serving requests\n"
SERVING = b"Zookeeper version: 3.9.3\nLatency min/avg/max: 0/0.0/0\nMode: standalone\nNode count: 5\n"


class FourLetterPeer:
    """A loopback peer answering ``ruok`` with ``imok`` and ``srvr`` with :attr:`srvr`."""

    def __init__(self) -> None:
        self.srvr = NOT_SERVING
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                word = conn.recv(4)
                conn.sendall(b"imok" if word == b"ruok" else self.srvr)


@pytest.fixture
def peer() -> Iterator[FourLetterPeer]:
    p = FourLetterPeer()
    yield p
    p.sock.close()


def test_a_zookeeper_that_says_imok_but_does_not_serve_is_not_ok(peer: FourLetterPeer) -> None:
    assert not zookeeper_ok("127.0.0.1", peer.port)


def test_a_zookeeper_that_reports_its_mode_is_ok(peer: FourLetterPeer) -> None:
    peer.srvr = SERVING
    assert zookeeper_ok("127.0.0.1", peer.port)


def test_an_ensemble_member_looking_for_a_quorum_is_not_ok(peer: FourLetterPeer) -> None:
    peer.srvr = NOT_SERVING  # what a member answers while it elects
    assert not zookeeper_ok("127.0.0.1", peer.port)
    peer.srvr = SERVING.replace(b"standalone", b"follower")
    assert zookeeper_ok("127.0.0.1", peer.port)


def test_nothing_listening_is_not_ok() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    assert not zookeeper_ok("127.0.0.1", port)
