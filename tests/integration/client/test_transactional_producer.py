"""The transactional ``Producer`` (confluent-kafka's calls) and ``Consumer(isolation_level=…)`` against a real
server: consume-transform-produce, commit, abort, fencing."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from logstore.client import Consumer, Producer
from logstore.errors import InvalidConfigError, InvalidTxnStateError, ProducerFencedError
from logstore.structs import TopicPartition
from tests.support.server import Server

StartServer = Callable[..., Server]


def values(c: httpx.Client, topic: str) -> list[tuple[int, str]]:
    r = c.get(f"/v1/topics/{topic}/partitions/0/records", params={"offset": 0})
    assert r.status_code == 200, r.text
    return [(m["offset"], m["value"]) for m in r.json()["records"]]


def test_consume_transform_produce_commits_outputs_and_offsets_together(server: StartServer) -> None:
    srv = server()
    c = srv.client()
    for name in ("in", "out"):
        assert c.post("/v1/topics", json={"name": name, "partitions": 1}).status_code == 201
    with Producer(srv.url) as plain:
        for i in range(4):
            plain.produce("in", f"w{i}")
    consumer = Consumer(
        {"bootstrap.servers": srv.url, "group.id": "upper", "auto.offset.reset": "earliest"},
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    consumer.assign([TopicPartition("in", 0, 0)])
    producer = Producer(srv.url, transactional_id="upper-0", linger_ms=1)
    producer.init_transactions()

    for attempt in ("abort", "commit"):
        consumer.seek(TopicPartition("in", 0, 0))
        producer.begin_transaction()
        batch = consumer.consume(4, timeout=10)
        assert [m.value() for m in batch] == [b"w0", b"w1", b"w2", b"w3"]
        for m in batch:
            producer.produce("out", (m.value() or b"").upper())
        producer.send_offsets_to_transaction(
            [TopicPartition("in", 0, batch[-1].offset() + 1)], consumer.consumer_group_metadata()
        )
        producer.flush()
        assert values(c, "out") == []  # sent, staged, and invisible
        if attempt == "abort":
            producer.abort_transaction()
            assert values(c, "out") == []
            assert consumer.committed([TopicPartition("in", 0)])[0].offset < 0
        else:
            assert producer.commit_transaction() == [TopicPartition("out", 0, 0)]
    assert values(c, "out") == [(0, "W0"), (1, "W1"), (2, "W2"), (3, "W3")]
    assert consumer.committed([TopicPartition("in", 0)])[0].offset == 4
    consumer.close()
    producer.close()


def test_a_fenced_producer_cannot_commit_and_its_records_never_show(server: StartServer) -> None:
    srv = server()
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    old = Producer(srv.url, transactional_id="job", linger_ms=1)
    old.init_transactions()
    old.begin_transaction()
    old.produce("t", "zombie")
    old.flush()
    new = Producer(srv.url, transactional_id="job", linger_ms=1)
    new.init_transactions()
    old.produce("t", "zombie-2")
    with pytest.raises(ProducerFencedError):
        old.commit_transaction()
    new.begin_transaction()
    new.produce("t", "live")
    new.commit_transaction()
    assert values(c, "t") == [(0, "live")]
    old.close()
    new.close()


def test_transaction_calls_out_of_order_are_refused(server: StartServer) -> None:
    srv = server()
    p = Producer(srv.url, transactional_id="x")
    with pytest.raises(InvalidTxnStateError):
        p.begin_transaction()  # before init_transactions
    p.init_transactions()
    with pytest.raises(InvalidTxnStateError):
        p.produce("t", "outside a transaction")
    p.begin_transaction()
    assert p.commit_transaction() == []  # nothing sent: nothing to commit
    p.close()
    with pytest.raises(InvalidConfigError, match=r"isolation\.level"):
        Consumer({"bootstrap.servers": srv.url, "group.id": "g", "isolation.level": "dirty"})
