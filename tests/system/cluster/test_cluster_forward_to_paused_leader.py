"""A request forwarded to a leader that stopped answering is answered as soon as its partitions move.

A paused leader (SIGSTOP: a long GC pause, a frozen VM) accepts connections but answers nothing. In the
30-minute nemesis a node forwarding to one held its clients' requests until the paused node resumed, 3.4 s
after the partitions had moved, so the partition was unavailable for the session timeout plus nearly a
whole client attempt timeout. The forwarding node now answers ``NOT_LEADER_OR_FOLLOWER`` as soon as its view
of the cluster moves the forwarded partitions away from the paused node, naming the new leader, and the
client's retry there succeeds.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from kazoo.client import KazooClient

from tests.support.server import Server
from tests.system.cluster.cluster_helpers import SESSION_MS, leaders, solo_topic_on_two_nodes, until

pytestmark = pytest.mark.zookeeper

HELD_S = SESSION_MS / 1000 + 6
"""How long the leader stays paused after its partition moved: longer than any answer may take."""


def test_a_forward_to_a_paused_leader_is_answered_when_its_partitions_move(
    cluster: Callable[..., Server], zk: KazooClient
) -> None:
    nodes = {i: cluster(i) for i in (1, 2)}
    paused, other = solo_topic_on_two_nodes(nodes, zk)
    url = f"{nodes[other].url}/v1/topics/solo/records"
    # Both nodes serve the partition's leader before the pause: the forward path is warm.
    assert httpx.post(url, json={"records": [{"value": "before"}]}, timeout=30).status_code == 200

    answer: dict[str, object] = {}

    def send() -> None:
        r = httpx.post(url, json={"records": [{"value": "during"}]}, timeout=60)
        answer.update(at=time.monotonic(), status=r.status_code, body=r.json())

    proc = nodes[paused].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        sender = threading.Thread(target=send)
        sender.start()
        until(lambda: leaders(zk, "solo", 1)[0][0] == other, timeout_s=30)
        moved_at = time.monotonic()
        sender.join(timeout=HELD_S)
        answered_while_paused = not sender.is_alive()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    sender.join(timeout=60)
    assert answered_while_paused, "the forwarded request waited for the paused leader to resume"
    body = answer["body"]
    assert isinstance(body, dict) and body["error_code"] == "NOT_LEADER_OR_FOLLOWER", body
    assert answer["status"] == 421, answer
    assert body["leader"]["node_id"] == other, body
    assert float(answer["at"]) - moved_at <= 2.0, answer  # type: ignore[arg-type]

    # The client's retry is acknowledged.
    r = until(lambda: x if (x := httpx.post(url, json={"records": [{"value": "retry"}]})).status_code == 200 else None)
    assert isinstance(r, httpx.Response)
