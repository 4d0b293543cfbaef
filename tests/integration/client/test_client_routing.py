"""The Producer routes by cluster metadata, against real servers.

Against an embedded server (a one-node cluster) the Producer must behave as
before: every batch whole to the one node. The 421 path is driven by a
stand-in node on loopback that has lost the lead and names the real server
as the leader. The routing decision itself is in
``tests/unit/client/test_client_routing.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route as HttpRoute

from logstore.client import Producer, RemoteStore
from logstore.client._routing import record_partition
from logstore.errors import LogstoreError
from tests.support.helpers import Landed, landed
from tests.support.server import Server, free_port

StartServer = Callable[..., Server]


# -- against real servers --------------------------------------------------------


def deliveries() -> tuple[list[tuple[LogstoreError | None, Landed | None]], Any]:
    out: list[tuple[LogstoreError | None, Landed | None]] = []
    return out, lambda e, m: out.append((e, landed(m)))


def test_producer_routes_keyed_records_of_an_embedded_node_to_their_partitions(server: StartServer) -> None:
    srv = server()
    dead = f"http://127.0.0.1:{free_port()}"
    RemoteStore(f"{dead},{srv.url}").create_topic("t", 4)  # the first bootstrap server is down
    got, on_delivery = deliveries()
    with Producer(f"{dead},{srv.url}", linger_ms=10, batch_records=100) as p:
        for i in range(60):
            p.produce("t", f"v{i}", key=f"k{i}" if i % 3 else None, on_delivery=on_delivery)
        p.produce("t", "pinned", key="k1", partition=3, on_delivery=on_delivery)
        assert p.flush(timeout=60) == 0
    assert [e for e, _ in got if e is not None] == []
    metas = [m for _, m in got]
    assert all(m is not None for m in metas)
    for i, m in enumerate(metas[:60]):
        assert m is not None
        if i % 3:
            assert m.partition == record_partition(f"k{i}".encode(), None, 4)
    assert metas[60] is not None and metas[60].partition == 3
    per_partition = {p: sorted(m.offset for m in metas if m is not None and m.partition == p) for p in range(4)}
    assert all(offsets == list(range(len(offsets))) for offsets in per_partition.values())  # no gaps, no dups


def test_producer_learns_a_topic_created_after_it_started(server: StartServer) -> None:
    srv = server()
    got, on_delivery = deliveries()
    with Producer(srv.url, linger_ms=1) as p:
        RemoteStore(srv.url).create_topic("late", 2)
        p.produce("late", "y", key="a", on_delivery=on_delivery)
        assert p.flush(timeout=30) == 0
        view = p._nodes.view  # the metadata it routed by
    assert view is not None and view.leaders == {"late": (0, 0)}
    assert got == [(None, Landed("late", record_partition(b"a", None, 2) or 0, 0))]


def test_remote_store_fails_over_between_bootstrap_servers(server: StartServer) -> None:
    srv = server()
    dead = f"http://127.0.0.1:{free_port()}"
    remote = RemoteStore(f"{dead},{srv.url}")
    remote.create_topic("t", 1)
    with srv.client() as c:
        assert c.post("/v1/topics/t/records", json={"records": [{"value": "a"}]}).status_code == 200
    assert remote.fetch("t", 0, 0).records["value"].to_pylist() == [b"a"]
    assert remote.metadata()["nodes"] == [{"node_id": 0, "url": srv.url}]


class StaleNode:
    """A node on loopback that has lost the lead of every partition to ``leader`` (an HTTP stand-in, not logstore).

    Its metadata names itself as the leader until it has answered one produce
    with 421, as a node does whose lead moved since a client's last refresh.
    """

    def __init__(self, leader: Server, topic: str) -> None:
        self.leader, self.topic = leader, topic
        self.url = f"http://127.0.0.1:{free_port()}"
        self.produce_requests: list[tuple[dict[str, str], dict[str, str], bytes]] = []
        """(query, the body's content type and idempotence headers, body) of every produce request."""
        app = Starlette(
            routes=[
                HttpRoute("/v1/metadata", self.metadata),
                HttpRoute("/v1/topics/{topic}/records", self.produce, methods=["POST"]),
            ]
        )
        port = int(self.url.rsplit(":", 1)[1])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def leader_id(self) -> int:
        return 1 if self.produce_requests else 0

    async def metadata(self, request: Request) -> JSONResponse:
        leader = self.leader_id()
        return JSONResponse(
            {
                "controller": 1,
                "controller_epoch": 1,
                "nodes": [{"node_id": 0, "url": self.url}, {"node_id": 1, "url": self.leader.url}],
                "topics": [
                    {"name": self.topic, "partitions": [{"partition": 0, "leader": leader, "leader_epoch": leader}]}
                ],
            }
        )

    async def produce(self, request: Request) -> JSONResponse:
        kept = {k: v for k, v in request.headers.items() if k == "content-type" or k.startswith("x-logstore-")}
        self.produce_requests.append((dict(request.query_params), kept, await request.body()))
        return JSONResponse(
            {
                "error_code": "NOT_LEADER_OR_FOLLOWER",
                "message": "not the leader",
                "leader": {"node_id": 1, "url": self.leader.url},
            },
            status_code=421,
        )

    def __enter__(self) -> StaleNode:
        self.thread.start()
        while not self.server.started:
            self.thread.join(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join()


@pytest.fixture
def stale(server: StartServer) -> Iterator[StaleNode]:
    srv = server()
    RemoteStore(srv.url).create_topic("t", 1)
    with StaleNode(srv, "t") as node:
        yield node


def test_a_421_sends_the_same_request_to_the_leader_it_names(stale: StaleNode) -> None:
    got, on_delivery = deliveries()
    with Producer(stale.url, linger_ms=1) as p:
        p.produce("t", "v", key="k", on_delivery=on_delivery)
        assert p.flush(timeout=30) == 0
    assert got[0][0] is None and got[0][1] == Landed("t", 0, 0)
    ((params, headers, body),) = stale.produce_requests
    assert params == {"acks": "all", "forward": "false"}  # the leader by the metadata, told not to forward
    # the leader committed that very producer id and sequence: sending it again is a duplicate
    with httpx.Client(base_url=stale.leader.url) as c:
        again = c.post("/v1/topics/t/records", content=body, headers=headers)
    assert again.status_code == 200 and again.json()["offsets"] == [{"partition": 0, "offset": 0}]
    with httpx.Client(base_url=stale.leader.url) as c:
        assert c.get("/v1/topics/t").json()["partitions"][0]["high_watermark"] == 1
