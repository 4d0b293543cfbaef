"""The clients route by cluster metadata: the routing decision.

:func:`plan_routes` is pure, so its properties are checked over generated
clusters and batches. The Producer against real servers is in
``tests/integration/client/test_client_routing.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstore.client._routing import ClusterView, bootstrap_urls, plan_routes, record_partition
from logstore.log.partitioner import Partitioner

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
