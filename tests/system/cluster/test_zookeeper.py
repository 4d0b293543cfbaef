"""ZooKeeper, the cluster's coordinator: the real Apache server from the project's jar cache.

``logstore zookeeper start`` serves clients (kazoo) in the foreground, and a
three-server ensemble on loopback keeps serving a client after one member is
killed with SIGKILL.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from logstore.cluster.zookeeper_server import ZooKeeperServer, ensemble, zookeeper_ok
from tests.support.server import LOGSTORE, free_port

pytestmark = pytest.mark.zookeeper


def _client(connect: str) -> KazooClient:
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=30)
    return zk


def test_cli_starts_a_standalone_server_that_serves_kazoo(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            *LOGSTORE,
            "--root",
            str(tmp_path),
            "zookeeper",
            "start",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "zk"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ZooKeeperServer(str(tmp_path / "zk"), port=port).wait_serving(proc)
        zk = _client(f"127.0.0.1:{port}")
        zk.create("/logstore/brokers/ids/1", b'{"node_id": 1}', ephemeral=True, makepath=True)
        assert zk.get_children("/logstore/brokers/ids") == ["1"]
        zk.stop()
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=30)
    # The CLI process became the JVM: SIGTERM reached ZooKeeper itself, which no longer serves.
    assert status is not None
    assert not zookeeper_ok("127.0.0.1", port)
    assert not (tmp_path / "_zookeeper").exists()  # --data-dir was honoured
    assert (tmp_path / "zk" / "zoo.cfg").exists()


@pytest.fixture
def three_servers(tmp_path: Path) -> Iterator[tuple[list[ZooKeeperServer], list[subprocess.Popen[bytes]]]]:
    members = ensemble(str(tmp_path), [(free_port(), free_port(), free_port()) for _ in range(3)])
    procs = [m.spawn() for m in members]
    try:
        for m, p in zip(members, procs, strict=True):
            m.wait_serving(p, timeout_s=90)
        yield members, procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def test_an_ensemble_keeps_serving_after_one_server_is_killed(
    three_servers: tuple[list[ZooKeeperServer], list[subprocess.Popen[bytes]]],
) -> None:
    members, procs = three_servers
    zk = _client(",".join(m.connect for m in members))
    zk.create("/logstore/controller_epoch", b"1", makepath=True)
    # Kill the member this client is connected to, so it must fail over to another one.
    connected_port = zk._connection._socket.getpeername()[1]
    victim = next(i for i, m in enumerate(members) if m.port == connected_port)
    procs[victim].kill()
    procs[victim].wait()
    # A request in flight when the socket dies fails with ConnectionLoss (kazoo does not resend it
    # by itself); the retry reconnects to a survivor, which serves once the two left agree on a leader.
    # Setting a value is idempotent, so a retry of a write that did land is harmless.
    KazooRetry(max_tries=-1, deadline=60)(zk.set, "/logstore/controller_epoch", b"2")
    assert zk.get("/logstore/controller_epoch")[0] == b"2"
    survivor = next(m for i, m in enumerate(members) if i != victim)
    other = _client(survivor.connect)
    assert other.get("/logstore/controller_epoch")[0] == b"2"
    other.stop()
    zk.stop()
