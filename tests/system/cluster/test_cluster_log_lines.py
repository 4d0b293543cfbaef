"""A cluster node's log: every line carries its ISO time in milliseconds, its level and its logger."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from tests.support.server import Server
from tests.system.cluster.cluster_helpers import create_topic, until

pytestmark = pytest.mark.zookeeper

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")


def test_a_nodes_log_lines_are_timestamped_with_level_and_logger(
    cluster: Callable[..., Server], zk: KazooClient
) -> None:
    node = cluster(0)
    create_topic(node, "t", zk, {0})
    until(lambda: "partition t-0: leader 0, epoch 0" in node.log())  # the controller's decision, logged
    assert node.stop() in (0, -15), node.log()  # uvicorn re-raises SIGTERM after its graceful shutdown
    # Lines of a traceback follow the line that logged it; audit lines are JSON objects of their own.
    lines = [line for line in node.log().splitlines() if line and not line.startswith((" ", "Traceback", "{"))]
    assert lines, "the node logged nothing"
    assert [line for line in lines if not LINE.match(line)] == [], node.log()
    assert any(re.search(r" INFO logstore\.cluster: node 0 is the controller \(epoch \d+\)$", line) for line in lines)
