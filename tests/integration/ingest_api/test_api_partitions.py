"""Adding partitions while records flow: nothing fails, nothing is lost, keys follow the new count.

The partition count may rise through this node (PATCH), another process or
the CLI (``alter_topic`` on the table). The node picks the new count up with
its next commit (or within an idle tick): keyed records then hash modulo the
new count, as Kafka's producers do once their metadata shows it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx

from logstore.config import load_config
from logstore.log.catalog import Catalog
from logstore.log.partitioner import murmur2, to_positive
from logstore.store import LogStore
from tests.support.helpers import assert_gap_free
from tests.support.server import Server


class KeyedProducer(threading.Thread):
    def __init__(self, url: str, name: str, acks: str, batches: int) -> None:
        super().__init__(daemon=True)
        self.url, self.name, self.acks, self.batches = url, name, acks, batches
        self.statuses: list[int] = []
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.errors: list[str] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as c:
            for b in range(self.batches):
                values = [f"{self.name}-{b}-{i}" for i in range(8)]
                body = {"records": [{"key": f"k{i}-{b}", "value": v} for i, v in enumerate(values)]}
                r = c.post("/v1/topics/t/records", params={"acks": self.acks}, json=body)
                self.statuses.append(r.status_code)
                if r.status_code != 200:
                    self.errors.append(r.text)
                    continue
                for v, o in zip(values, r.json()["offsets"], strict=True):
                    self.acked[v.encode()] = (o["partition"], o["offset"])


def check_every_record_landed_where_answered(url: str, root: object, producers: list[KeyedProducer]) -> None:
    for p in producers:
        assert not p.errors, p.errors[:3]
        assert set(p.statuses) == {200}
    # Commit order is submit order: once this acks=all batch is answered, every acks=1 one is in Delta.
    assert httpx.post(f"{url}/v1/topics/t/records", json={"records": [{"value": "sync"}]}).status_code == 200
    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": str(root)}))
    values = assert_gap_free(catalog, "t")
    stored = {v: (part, off) for part, vs in values.items() for off, v in enumerate(vs)}
    acked = {v: where for p in producers for v, where in p.acked.items()}
    assert len(acked) == sum(8 * p.batches for p in producers)
    assert [v for v, where in acked.items() if stored.get(v) != where] == []


def test_partitions_raised_through_the_node_while_producing(server: Callable[..., Server]) -> None:
    srv = server(**{"linger.ms": 5})
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 3}).status_code == 201
    producers = [KeyedProducer(srv.url, f"p{i}", acks, 60) for i, acks in enumerate(["1", "1", "all"])]
    for p in producers:
        p.start()
    for count in (4, 6, 9):
        while sum(len(p.statuses) for p in producers) < 30 * (count - 3):
            threading.Event().wait(0.005)
        assert c.patch("/v1/topics/t", json={"partitions": count}).status_code == 200
    for p in producers:
        p.join(timeout=120)
    check_every_record_landed_where_answered(srv.url, srv.root, producers)


def test_partitions_raised_by_another_process_are_noticed(server: Callable[..., Server]) -> None:
    srv = server(**{"linger.ms": 5})
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
    producers = [KeyedProducer(srv.url, f"p{i}", acks, 60) for i, acks in enumerate(["1", "all"])]
    for p in producers:
        p.start()
    while sum(len(p.statuses) for p in producers) < 40:
        threading.Event().wait(0.005)
    other = LogStore(load_config(environ={}, overrides={"logstore.root": str(srv.root)}))
    other.alter_topic("t", partitions=5)  # as `logstore topics alter --root` does
    for p in producers:
        p.join(timeout=120)
    check_every_record_landed_where_answered(srv.url, srv.root, producers)

    # Any commit after the change shows it to the node; from then on keys hash modulo 5.
    assert c.post("/v1/topics/t/records", json={"records": [{"value": "x"}]}).status_code == 200
    keys = [f"user-{i}" for i in range(40)]
    r = c.post("/v1/topics/t/records", json={"records": [{"key": k, "value": k} for k in keys]})
    assert r.status_code == 200, r.text
    assert [o["partition"] for o in r.json()["offsets"]] == [to_positive(murmur2(k.encode())) % 5 for k in keys]
