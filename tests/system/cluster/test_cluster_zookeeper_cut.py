"""A node cut from ZooKeeper while it still serves clients stops acknowledging writes before its session can expire.

ZooKeeper expires a session one session timeout after it last heard from the
client; from then on another node may lead the partitions. So a node must have
stopped acknowledging acks=1 (a promise the next leader keeps by replaying its
write-ahead log) and acks=all writes by then, whatever the cut looks like: a
network that closes its connections (the node's ZooKeeper client sees the loss
at once) or one that goes silent (a ZooKeeper server that stops answering: the
client notices only when its reads time out, two thirds of the session timeout).
Each node here reaches its own ZooKeeper server through a TCP proxy
(``bench/_proxy.py``, the nemesis's) that can cut it; the silent case stops the
server with SIGSTOP. Once healed, the node acknowledges writes again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from bench._proxy import CuttableProxy
from logstore.cluster.zookeeper_server import ZooKeeperServer
from tests.support.server import Server, free_port
from tests.system.cluster.cluster_helpers import SESSION_MS, produce, until

pytestmark = [pytest.mark.zookeeper]

TOPIC = "cut"


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[tuple[ZooKeeperServer, subprocess.Popen[bytes]]]:
    """A ZooKeeper server of this test alone (the session's one must not be stopped under other tests)."""
    zk = ZooKeeperServer(str(tmp_path / "zookeeper"), port=free_port())
    proc = zk.spawn()
    try:
        zk.wait_serving(proc)
        yield zk, proc
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()


def _write(node: Server, acks: str, n: int) -> tuple[float, float, int | None]:
    """One record with ``acks`` through ``node``: (sent, answered, status; None when no answer came)."""
    sent = time.monotonic()
    try:
        r = httpx.post(
            f"{node.url}/v1/topics/{TOPIC}/records",
            params={"acks": acks},
            json={"records": [{"value": f"{acks}-{n}", "partition": 0}]},
            timeout=SESSION_MS / 1000,
        )
        status: int | None = r.status_code
    except httpx.HTTPError:
        status = None
    return sent, time.monotonic(), status


@pytest.mark.parametrize("how", ["connections_closed", "silent"])
def test_a_node_cut_from_zookeeper_stops_acknowledging_before_its_session_can_expire(
    how: str,
    own_zookeeper: tuple[ZooKeeperServer, subprocess.Popen[bytes]],
    server: Callable[..., Server],
) -> None:
    zk, zk_proc = own_zookeeper
    proxy = CuttableProxy(("127.0.0.1", zk.port), name="zookeeper-proxy")
    node = server(
        **{
            "zookeeper.connect": f"{proxy.address}/cut-{how}",
            "node.id": 1,
            "zookeeper.session.timeout.ms": SESSION_MS,
            "linger.ms": 2,
        }
    )
    try:
        r = httpx.post(f"{node.url}/v1/topics", json={"name": TOPIC, "partitions": 1}, timeout=30)
        assert r.status_code == 201, r.text
        until(lambda: produce(node.url, TOPIC, {"records": [{"value": "first", "partition": 0}]}).status_code == 200)
        answers = [_write(node, acks, n) for n, acks in enumerate(["1", "all"] * 5)]
        assert all(status == 200 for _, _, status in answers), answers

        cut_at = time.monotonic()
        if how == "silent":
            os.kill(zk_proc.pid, signal.SIGSTOP)  # connections stay open; nothing answers
        else:
            proxy.cut()
        n = 0
        while time.monotonic() < cut_at + SESSION_MS / 1000 + 2:
            answers.append(_write(node, "1" if n % 2 == 0 else "all", 100 + n))
            n += 1
        after = [(sent - cut_at, answered - cut_at, status) for sent, answered, status in answers if sent >= cut_at]
        acknowledged = [a for a in after if a[2] == 200]
        refused = [a for a in after if a[2] != 200]
        # Its session may expire one session timeout after the cut: no acknowledgement may come after that.
        assert all(answered < SESSION_MS / 1000 for _, answered, _ in acknowledged), after
        assert refused and refused[0][0] < SESSION_MS / 1000, after  # it noticed, and said so, in time
        print(
            f"\ncut ({how}): last acknowledgement {max((a for _, a, _ in acknowledged), default=0):.2f}s after the "
            f"cut, first refusal {refused[0][0]:.2f}s (status {refused[0][2]}); session {SESSION_MS} ms"
        )
    finally:
        os.kill(zk_proc.pid, signal.SIGCONT)
        proxy.heal()
    until(lambda: _write(node, "all", 1000)[2] == 200, timeout_s=60)  # back in the cluster, it serves again
    assert _write(node, "1", 1001)[2] == 200
    proxy.close()
