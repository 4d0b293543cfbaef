"""``logstore cluster status`` after a node is killed (SIGKILL): unhealthy at once, not a session timeout later.

A killed node stays registered (its ephemeral ``/brokers/ids/<id>``) until ZooKeeper expires its session
(``zookeeper.session.timeout.ms``), and its partitions stay on it meanwhile. ``cluster status`` probes every
registered node, so it flags the node ``UNREACHABLE`` and its partitions under-led, and exits 1, from the
kill on; once ZooKeeper dropped the registration the node is no longer listed, and once the controller moved
its partitions the status is healthy again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from tests.support.cli import cli
from tests.support.server import Server
from tests.system.cluster.cluster_helpers import PARTITIONS, create_topic, leaders, led_by, until

pytestmark = pytest.mark.zookeeper

SESSION_MS = 8000
"""Long enough that a status run right after the kill ends before ZooKeeper expires the node's session."""


def test_status_flags_a_killed_node_at_once_and_drops_it_with_its_registration(
    cluster: Callable[..., Server], zk: KazooClient
) -> None:
    nodes = {n: cluster(n, **{"zookeeper.session.timeout.ms": SESSION_MS}) for n in (1, 2, 3)}
    create_topic(nodes[1], "t", zk, {1, 2, 3})
    servers = ",".join(nodes[n].url for n in (1, 3))
    root = nodes[1].root
    ok = cli(root, "cluster", "status", "--server", servers)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    victim = next(n for n in (2, 3) if any(leader == n for leader, _ in leaders(zk, "t", PARTITIONS).values()))
    led = sorted(p for p, (leader, _) in leaders(zk, "t", PARTITIONS).items() if leader == victim)

    nodes[victim].kill()
    killed = time.monotonic()
    r = cli(root, "cluster", "status", "--server", servers)
    took = time.monotonic() - killed
    assert zk.exists(f"/brokers/ids/{victim}"), "the session expired before the status ran: test inconclusive"
    print(f"status {took:.2f}s after the kill (session {SESSION_MS} ms):\n{r.stdout}")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"Node: {victim}\tUrl: {nodes[victim].url}\tUNREACHABLE" in r.stdout.splitlines(), r.stdout
    flagged = [f"t-{p} (leader {victim} unreachable)" for p in led]
    assert r.stdout.splitlines()[-1] == f"Under-led partitions: {len(led)}: {', '.join(flagged)}", r.stdout

    until(lambda: not zk.exists(f"/brokers/ids/{victim}"), timeout_s=30)
    until(lambda: led_by(zk, "t", {1, 2, 3} - {victim}), timeout_s=30)
    after = cli(root, "cluster", "status", "--server", servers)
    assert after.returncode == 0, after.stdout + after.stderr
    assert f"Node: {victim}\t" not in after.stdout, after.stdout
