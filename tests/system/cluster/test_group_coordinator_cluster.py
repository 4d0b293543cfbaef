"""Consumer groups in cluster mode: one coordinator node per group, found by any node, surviving its loss.

Real ZooKeeper and three real ``logstore serve`` nodes over one root. Members of
one group bootstrapped at different nodes form one group (any node forwards
member requests to the coordinator; ``?forward=false`` elsewhere is 421
NOT_COORDINATOR). When the coordinator is killed with SIGKILL, the consumers
rejoin at the group's new coordinator and resume at the committed offsets:
every record is consumed, none twice when committing after processing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest
from kazoo.client import KazooClient

from logstore.client import Consumer
from logstore.errors import KafkaStorageError, NetworkExceptionError, NotCoordinatorError
from tests.support.server import Server
from tests.system.cluster.cluster_helpers import PARTITIONS, SESSION_MS, create_topic, produce_ok, until

pytestmark = pytest.mark.zookeeper

GROUP = "billing"


def coordinator(node: Server) -> dict[str, object]:
    r = httpx.get(f"{node.url}/v1/groups/{GROUP}/coordinator", timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json())


def coordinator_of_group(node: Server, group: str) -> int:
    r = httpx.get(f"{node.url}/v1/groups/{group}/coordinator", timeout=10)
    assert r.status_code == 200, r.text
    return int(r.json()["node_id"])


def consumer(url: str) -> Consumer:
    c = Consumer(
        {
            "bootstrap.servers": url,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
        }
    )
    c.subscribe(["orders"])
    return c


def poll_some(consumers: list[Consumer], seen: list[tuple[int, int]], until_s: float) -> None:
    """Poll every consumer for a while, committing after processing each batch."""
    deadline = time.monotonic() + until_s
    while time.monotonic() < deadline:
        for c in consumers:
            try:
                batch = c.consume(100, timeout=0.2)
                seen.extend((m.partition(), m.offset()) for m in batch)
                if batch:
                    c.commit(asynchronous=False)
            except (KafkaStorageError, NetworkExceptionError, NotCoordinatorError):
                pass  # a node left: the consumer moved to the next bootstrap server, the next poll rejoins


def test_members_at_different_nodes_form_one_group_and_non_coordinators_redirect(
    cluster: Callable[..., Server], zk: KazooClient
) -> None:
    nodes = {i: cluster(i) for i in (1, 2, 3)}
    create_topic(nodes[1], "orders", zk, {1, 2, 3})
    answers = [coordinator(n) for n in nodes.values()]
    assert answers[0] == answers[1] == answers[2]
    owner = int(answers[0]["node_id"])  # type: ignore[call-overload]
    others = [n for i, n in nodes.items() if i != owner]
    r = httpx.post(
        f"{others[0].url}/v1/groups/{GROUP}/members", params={"forward": "false"}, json={"topics": ["orders"]}
    )
    assert r.status_code == 421 and r.json()["error_code"] == "NOT_COORDINATOR", r.text
    a, b = consumer(others[0].url), consumer(others[1].url)
    try:
        produce_ok(nodes[1].url, "orders", {"records": [{"value": str(i)} for i in range(60)]})
        seen: list[tuple[int, int]] = []

        def balanced() -> bool:
            poll_some([a, b], seen, 0.5)
            ax, bx = set(a.assignment()), set(b.assignment())
            return bool(ax) and bool(bx) and not ax & bx and len(ax | bx) == PARTITIONS

        until(balanced, timeout_s=30)
        for node in nodes.values():  # describe is forwarded to the coordinator, which knows the members
            members = httpx.get(f"{node.url}/v1/groups/{GROUP}", timeout=10).json()["members"]
            assert len(members) == 2, node.url
        # A group with a live member and no commits is known only at its coordinator; every node lists it.
        idle = next(g for g in (f"idle-{i}" for i in range(100)) if coordinator_of_group(nodes[1], g) == owner)
        r = httpx.post(f"{nodes[owner].url}/v1/groups/{idle}/members", json={"topics": ["orders"]}, timeout=10)
        assert r.status_code == 200, r.text
        for node in nodes.values():
            assert idle in httpx.get(f"{node.url}/v1/groups", timeout=10).json()["groups"], node.url
        only_own = httpx.get(f"{others[0].url}/v1/groups", params={"forward": "false"}, timeout=10).json()["groups"]
        assert idle not in only_own
    finally:
        a.close()
        b.close()


def test_consumers_follow_a_killed_coordinator_and_resume_at_committed_offsets(
    cluster: Callable[..., Server], zk: KazooClient
) -> None:
    nodes = {i: cluster(i) for i in (1, 2, 3)}
    create_topic(nodes[1], "orders", zk, {1, 2, 3})
    owner = int(coordinator(nodes[1])["node_id"])  # type: ignore[call-overload]
    survivors = [i for i in nodes if i != owner]
    # each consumer starts at the coordinator and falls back to a survivor
    a = consumer(f"{nodes[owner].url},{nodes[survivors[0]].url}")
    b = consumer(f"{nodes[owner].url},{nodes[survivors[1]].url}")
    seen: list[tuple[int, int]] = []
    try:
        produce_ok(nodes[survivors[0]].url, "orders", {"records": [{"value": str(i)} for i in range(60)]})
        until(lambda: poll_some([a, b], seen, 0.5) or len(seen) >= 60, timeout_s=30)
        nodes[owner].kill()
        killed = time.monotonic()
        produce_ok(nodes[survivors[0]].url, "orders", {"records": [{"value": str(i)} for i in range(60, 120)]})
        until(lambda: poll_some([a, b], seen, 0.05) or len(seen) >= 120, timeout_s=SESSION_MS / 1000 + 20)
        # issue 12: the group recovers (consumes again) within the session timeout + 2 s of the kill
        assert time.monotonic() - killed < SESSION_MS / 1000 + 2
        assert int(coordinator(nodes[survivors[0]])["node_id"]) in survivors  # type: ignore[call-overload]
    finally:
        a.close()
        b.close()
    assert len(seen) == len(set(seen)) == 120, "every record once, none twice"
