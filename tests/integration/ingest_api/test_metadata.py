"""``GET /v1/metadata`` of an embedded node: a one-node cluster of itself (docs/design.md §8)."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.server import Server

StartServer = Callable[..., Server]


def test_embedded_node_is_the_controller_and_leads_every_partition(server: StartServer) -> None:
    srv = server()
    ids = {}
    with srv.client() as c:
        for name, n in (("orders", 3), ("audit", 1)):
            r = c.post("/v1/topics", json={"name": name, "partitions": n})
            assert r.status_code == 201
            ids[name] = r.json()["topic_id"]
        body = c.get("/v1/metadata").json()
    assert body == {
        "controller": 0,
        "controller_epoch": 0,
        "nodes": [{"node_id": 0, "url": srv.url}],
        "topics": [
            {
                "name": "audit",
                "topic_id": ids["audit"],
                "partitions": [{"partition": 0, "leader": 0, "leader_epoch": 0, "handover_to": None}],
            },
            {
                "name": "orders",
                "topic_id": ids["orders"],
                "partitions": [{"partition": p, "leader": 0, "leader_epoch": 0, "handover_to": None} for p in range(3)],
            },
        ],
    }


def test_metadata_follows_partition_changes(server: StartServer) -> None:
    with server().client() as c:
        assert c.get("/v1/metadata").json()["topics"] == []
        assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
        assert c.patch("/v1/topics/t", json={"partitions": 4}).status_code == 200
        parts = c.get("/v1/metadata").json()["topics"][0]["partitions"]
        assert [p["partition"] for p in parts] == [0, 1, 2, 3]
        assert c.delete("/v1/topics/t").status_code == 204
        assert c.get("/v1/metadata").json()["topics"] == []


def test_metadata_is_in_the_openapi_document(server: StartServer) -> None:
    with server().client() as c:
        doc = c.get("/openapi.json").json()
    op = doc["paths"]["/v1/metadata"]["get"]
    schema = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(doc["components"]["schemas"][schema]["properties"]) == {
        "controller",
        "controller_epoch",
        "nodes",
        "topics",
    }


def test_metadata_of_chosen_topics(server: StartServer) -> None:
    with server().client() as c:
        for name in ("a", "b", "c"):
            assert c.post("/v1/topics", json={"name": name, "partitions": 1}).status_code == 201
        r = c.get("/v1/metadata", params=[("topic", "c"), ("topic", "a"), ("topic", "missing")])
    assert [t["name"] for t in r.json()["topics"]] == ["a", "c"]
