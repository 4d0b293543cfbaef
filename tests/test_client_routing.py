"""The clients route by cluster metadata: the routing decision, and the Producer against real servers.

:func:`plan_routes` is pure, so its properties are checked over generated
clusters and batches. Against an embedded server (a one-node cluster) the
Producer must behave as before: every batch whole to the one node. The 421
path is driven by a stand-in node on loopback that has lost the lead and
names the real server as the leader.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route as HttpRoute

from logstore.client import Producer, RecordMetadata, RemoteStore
from logstore.client._cluster import ClusterView, bootstrap_urls, plan_routes, record_partition
from logstore.errors import LogstoreError
from logstore.log.partitioner import Partitioner
from tests.support.server import Server, free_port

StartServer = Callable[..., Server]
ANY = "http://any:1"


@st.composite
def clusters(draw: st.DrawFn) -> ClusterView:
    live = draw(st.sets(st.integers(0, 5), max_size=4))
    leaders = draw(st.lists(st.integers(-1, 5), min_size=1, max_size=8))
    return ClusterView({n: f"http://node{n}:80" for n in live}, {"t": tuple(leaders)})


batches = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=6)), st.one_of(st.none(), st.integers(0, 9))), max_size=40
)


@given(clusters(), batches)
def test_every_record_is_sent_once_and_leader_routes_hold_only_that_leaders_partitions(
    view: ClusterView, batch: list[tuple[bytes | None, int | None]]
) -> None:
    keys, parts = [k for k, _ in batch], [p for _, p in batch]
    routes = plan_routes(view, "t", keys, parts, any_url=ANY)
    sent = [i for r in routes for i in r.indexes]
    assert sorted(sent) == list(range(len(batch)))
    assert [r.indexes[0] for r in routes] == sorted(r.indexes[0] for r in routes)
    assert all(list(r.indexes) == sorted(r.indexes) for r in routes)
    leaders = view.leaders["t"]
    one_leader = len(set(leaders)) == 1 and leaders[0] in view.nodes
    for r in routes:
        if r.forward:
            assert r.url == ANY and not one_leader
            for i in r.indexes:  # only what no live leader can take
                p = record_partition(keys[i], parts[i], len(leaders))
                assert p is None or p >= len(leaders) or leaders[p] not in view.nodes
        else:
            assert r.node_id is not None and r.url == view.nodes[r.node_id]
            if not one_leader:
                assert all(
                    leaders[record_partition(keys[i], parts[i], len(leaders)) or 0] == r.node_id for i in r.indexes
                )
    assert len({r.node_id for r in routes if not r.forward}) == len([r for r in routes if not r.forward])


@given(batches, st.integers(1, 8))
def test_a_node_that_leads_the_whole_topic_gets_the_whole_batch(
    batch: list[tuple[bytes | None, int | None]], partitions: int
) -> None:
    view = ClusterView({0: "http://only:80"}, {"t": (0,) * partitions})
    keys, parts = [k for k, _ in batch], [p for _, p in batch]
    if not batch:
        assert plan_routes(view, "t", keys, parts, any_url=ANY) == []
        return
    (route,) = plan_routes(view, "t", keys, parts, any_url=ANY)
    assert (route.url, route.forward, route.node_id, route.indexes) == (
        "http://only:80",
        False,
        0,
        tuple(range(len(batch))),
    )


def test_without_metadata_or_for_an_unknown_topic_the_batch_goes_whole_to_any_node() -> None:
    view = ClusterView({0: "http://a:80", 1: "http://b:80"}, {"t": (0, 1)})
    for v, topic in ((None, "t"), (view, "other")):
        (route,) = plan_routes(v, topic, [b"k", None], [None, None], any_url=ANY)
        assert (route.url, route.forward, route.indexes) == (ANY, True, (0, 1))


def test_keyless_records_go_to_any_node_and_keyed_ones_to_their_leaders() -> None:
    view = ClusterView({0: "http://a:80", 1: "http://b:80"}, {"t": (0, 1)})
    k0 = next(k for k in (f"k{i}".encode() for i in range(100)) if record_partition(k, None, 2) == 0)
    k1 = next(k for k in (f"k{i}".encode() for i in range(100)) if record_partition(k, None, 2) == 1)
    routes = plan_routes(view, "t", [None, k1, k0, None, k1], [None, None, None, None, None], any_url=ANY)
    assert [(r.url, r.forward, r.indexes) for r in routes] == [
        (ANY, True, (0, 3)),
        ("http://b:80", False, (1, 4)),
        ("http://a:80", False, (2,)),
    ]
    # an explicit partition wins over the key; a partition without a live leader is placed by any node
    view = ClusterView({0: "http://a:80"}, {"t": (0, 1)})
    routes = plan_routes(view, "t", [k1, k0], [0, None], any_url=ANY)
    assert [(r.url, r.forward, r.indexes) for r in routes] == [("http://a:80", False, (0, 1))]
    routes = plan_routes(view, "t", [k1, k0], [None, None], any_url=ANY)
    assert [(r.url, r.forward, r.indexes) for r in routes] == [(ANY, True, (0,)), ("http://a:80", False, (1,))]


@given(st.binary(max_size=40), st.integers(1, 64))
def test_the_client_partitions_keys_as_the_server_does(key: bytes, partitions: int) -> None:
    assert record_partition(key, None, partitions) == Partitioner().partition_for_key(key, partitions)


def test_bootstrap_is_a_comma_list() -> None:
    assert bootstrap_urls(" http://a:1/, http://b:2 ,") == ("http://a:1", "http://b:2")
    with pytest.raises(ValueError):
        bootstrap_urls(" , ")


def test_metadata_view_from_the_api() -> None:
    body = {
        "controller": 1,
        "controller_epoch": 3,
        "nodes": [{"node_id": 1, "url": "http://b:2/"}],
        "topics": [{"name": "t", "partitions": [{"partition": 1, "leader": 1, "leader_epoch": 2}]}],
    }
    view = ClusterView.from_json(body)
    assert view.leaders == {"t": (-1, 1)} and view.nodes == {1: "http://b:2"} and view.controller == 1
    assert view.leader_url("t", 1) == "http://b:2" and view.leader_url("t", 0) is None


# -- against real servers --------------------------------------------------------


def deliveries() -> tuple[list[tuple[LogstoreError | None, RecordMetadata | None]], Any]:
    out: list[tuple[LogstoreError | None, RecordMetadata | None]] = []
    return out, lambda e, m: out.append((e, m))


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
    assert got == [(None, RecordMetadata("late", record_partition(b"a", None, 2) or 0, 0))]


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
    assert got[0][0] is None and got[0][1] == RecordMetadata("t", 0, 0)
    ((params, headers, body),) = stale.produce_requests
    assert params == {"acks": "all", "forward": "false"}  # the leader by the metadata, told not to forward
    # the leader committed that very producer id and sequence: sending it again is a duplicate
    with httpx.Client(base_url=stale.leader.url) as c:
        again = c.post("/v1/topics/t/records", content=body, headers=headers)
    assert again.status_code == 200 and again.json()["offsets"] == [{"partition": 0, "offset": 0}]
    with httpx.Client(base_url=stale.leader.url) as c:
        assert c.get("/v1/topics/t").json()["partitions"][0]["high_watermark"] == 1
