"""Kafka's transactional producer (librdkafka, through confluent-kafka) against a real ``logstore serve``.

One coordinator behind both doors: a transaction committed through the Kafka
listener lands in the Delta tables exactly as one committed over HTTP; an
aborted or fenced one leaves nothing; a ``read_committed`` consumer reads the
committed records.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from deltalake import DeltaTable

from tests.support.server import Server, free_port
from tests.system.kafka.raw import produce_frame, produce_response, request

ck = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")


def _kafka_server(server: Callable[..., Server], **config: object) -> tuple[Server, str]:
    port = free_port()
    return server(listeners=f"PLAINTEXT://127.0.0.1:{port}", **config), f"127.0.0.1:{port}"


def _create(bootstrap: str, *topics: tuple[str, int]) -> None:
    client = admin.AdminClient({"bootstrap.servers": bootstrap})
    for future in client.create_topics([admin.NewTopic(t, n) for t, n in topics]).values():
        future.result(timeout=30)


def _producer(bootstrap: str, tid: str) -> Any:
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5})
    p.init_transactions(30)
    return p


def _rows(s: Server, topic: str) -> list[dict[str, Any]]:
    table = DeltaTable(str(s.root / "topics" / topic)).to_pyarrow_table()
    return sorted(table.to_pylist(), key=lambda r: (r["partition"], r["offset"]))


def _consumer(bootstrap: str, group: str, **extra: Any) -> Any:
    return ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **extra})


def test_a_transaction_over_two_topics_and_a_groups_offsets_commits_all_at_once(
    server: Callable[..., Server],
) -> None:
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, ("in", 1), ("out", 2), ("audit", 1))
    with s.client() as http:  # what the consumer read: offsets 0..2 of "in"
        r = http.post("/v1/topics/in/records", json={"records": [{"value": f"in-{i}"} for i in range(3)]})
        assert r.status_code == 200, r.text

    consumer = _consumer(bootstrap, "copier")
    consumer.assign([ck.TopicPartition("in", 0, 0)])
    producer = _producer(bootstrap, "copier-1")
    producer.begin_transaction()
    for i in range(6):
        producer.produce("out", key=f"k{i}".encode(), value=f"out-{i}".encode(), partition=i % 2)
    producer.produce("audit", value=b"copied 3")
    producer.flush(30)
    assert _rows(s, "out") == [] and _rows(s, "audit") == []  # staged, not in the tables
    producer.send_offsets_to_transaction([ck.TopicPartition("in", 0, 3)], consumer.consumer_group_metadata(), 30)
    with s.client() as http:
        r = http.get("/v1/transactions/copier-1")
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "Ongoing"
    producer.commit_transaction(30)

    out = _rows(s, "out")
    assert [(r["partition"], r["offset"], r["value"]) for r in out] == [
        (0, 0, b"out-0"),
        (0, 1, b"out-2"),
        (0, 2, b"out-4"),
        (1, 0, b"out-1"),
        (1, 1, b"out-3"),
        (1, 2, b"out-5"),
    ]
    assert [r["key"] for r in out] == [b"k0", b"k2", b"k4", b"k1", b"k3", b"k5"]
    assert [(r["offset"], r["value"]) for r in _rows(s, "audit")] == [(0, b"copied 3")]
    committed = consumer.committed([ck.TopicPartition("in", 0)], 30)
    assert committed[0].offset == 3
    consumer.close()

    # the next transaction continues the offsets, and read_committed consumers see it all
    producer.begin_transaction()
    producer.produce("audit", value=b"second")
    producer.commit_transaction(30)
    reader = _consumer(bootstrap, "readers", **{"isolation.level": "read_committed"})
    reader.assign([ck.TopicPartition("audit", 0, 0)])
    seen: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(seen) < 2 and time.monotonic() < deadline:
        msg = reader.poll(1)
        if msg is not None:
            assert msg.error() is None, msg.error()
            seen.append((msg.offset(), msg.value()))
    reader.close()
    assert seen == [(0, b"copied 3"), (1, b"second")]


def test_an_aborted_transaction_leaves_nothing_in_the_tables(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, ("out", 1), ("in", 1))
    consumer = _consumer(bootstrap, "g")
    producer = _producer(bootstrap, "t")
    producer.begin_transaction()
    for i in range(5):
        producer.produce("out", value=f"v{i}".encode())
    producer.flush(30)
    producer.send_offsets_to_transaction([ck.TopicPartition("in", 0, 7)], consumer.consumer_group_metadata(), 30)
    producer.abort_transaction(30)
    assert _rows(s, "out") == []
    assert consumer.committed([ck.TopicPartition("in", 0)], 30)[0].offset < 0
    with s.client() as http:
        assert http.get("/v1/transactions/t").json()["state"] == "CompleteAbort"
    # the producer carries on: its next transaction commits, from offset 0
    producer.begin_transaction()
    producer.produce("out", value=b"kept")
    producer.commit_transaction(30)
    assert [(r["offset"], r["value"]) for r in _rows(s, "out")] == [(0, b"kept")]
    consumer.close()


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    server: Callable[..., Server],
) -> None:
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, ("out", 1))
    zombie = _producer(bootstrap, "job")
    zombie.begin_transaction()
    zombie.produce("out", value=b"zombie")
    zombie.flush(30)

    successor = _producer(bootstrap, "job")  # its init aborts the zombie's transaction and bumps the epoch
    with pytest.raises(ck.KafkaException) as failed:
        zombie.commit_transaction(30)
    error = failed.value.args[0]
    assert error.fatal() or error.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED), error
    assert error.code() in (
        ck.KafkaError._FENCED,
        ck.KafkaError.PRODUCER_FENCED,
        ck.KafkaError.INVALID_PRODUCER_EPOCH,
    ), error

    successor.begin_transaction()
    successor.produce("out", value=b"successor")
    successor.commit_transaction(30)
    assert [(r["offset"], r["value"]) for r in _rows(s, "out")] == [(0, b"successor")]


def test_http_and_kafka_transactions_write_indistinguishable_rows(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, ("out", 1))
    ts = 1_700_000_000_000
    producer = _producer(bootstrap, "kafka-side")
    producer.begin_transaction()
    producer.produce("out", key=b"k", value=b"v", headers=[("h", b"1")], timestamp=ts)
    producer.commit_transaction(30)
    with s.client() as http:
        epoch = http.post("/v1/transactions/http-side/init", json={}).json()["producer_epoch"]
        r = http.post(
            "/v1/topics/out/records",
            params={"transactional_id": "http-side", "producer_epoch": epoch},
            json={"records": [{"key": "k", "value": "v", "headers": [{"key": "h", "value": "1"}], "timestamp": ts}]},
        )
        assert r.status_code == 200, r.text
        r = http.post("/v1/transactions/http-side/commit", json={"producer_epoch": epoch})
        assert r.status_code == 200, r.text
    first, second = _rows(s, "out")
    assert (first["offset"], second["offset"]) == (0, 1)
    differing = {k for k in first if first[k] != second[k]}
    assert differing <= {"offset", "producer_id", "sequence"}, (first, second)


def test_a_transactional_batch_retried_is_staged_once_and_an_old_epoch_is_refused(
    server: Callable[..., Server],
) -> None:
    """Raw frames over one coordinator: ``init`` over HTTP, transactional batches over Kafka, commit over HTTP."""
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, ("out", 1))
    with s.client() as http:
        ids = http.post("/v1/transactions/raw/init", json={}).json()
    pid, epoch = ids["producer_id"], ids["producer_epoch"]

    def send(values: list[bytes], seq: int, producer_epoch: int = epoch) -> tuple[int, int]:
        frame = produce_frame(
            "out", 0, values, producer_id=pid, base_sequence=seq, producer_epoch=producer_epoch, transactional=True
        )
        return produce_response(request(bootstrap, frame))

    assert send([b"a", b"b"], 0) == (0, -1)  # staged: no offset until the commit
    assert send([b"a", b"b"], 0) == (0, -1)  # the producer's retry: answered, not staged again
    assert send([b"c"], 2) == (0, -1)
    assert send([b"e"], 5)[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER: a gap
    assert send([b"x"], 3, producer_epoch=epoch - 1 if epoch else 7)[0] == 47  # INVALID_PRODUCER_EPOCH
    assert _rows(s, "out") == []
    with s.client() as http:
        r = http.post("/v1/transactions/raw/commit", json={"producer_epoch": epoch})
        assert r.status_code == 200, r.text
    assert [(r["offset"], r["value"]) for r in _rows(s, "out")] == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_an_init_over_http_fences_a_kafka_producer_of_the_same_id(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, ("out", 1))
    producer = _producer(bootstrap, "shared")
    producer.begin_transaction()
    producer.produce("out", value=b"from kafka")
    producer.flush(30)
    with s.client() as http:
        r = http.post("/v1/transactions/shared/init", json={})
        assert r.status_code == 200, r.text
        epoch = r.json()["producer_epoch"]
    with pytest.raises(ck.KafkaException) as failed:
        producer.commit_transaction(30)
    assert failed.value.args[0].code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED), failed.value
    with s.client() as http:
        r = http.post(
            "/v1/topics/out/records",
            params={"transactional_id": "shared", "producer_epoch": epoch},
            json={"records": [{"value": "from http"}]},
        )
        assert r.status_code == 200, r.text
        assert http.post("/v1/transactions/shared/commit", json={"producer_epoch": epoch}).status_code == 200
    assert [(r["offset"], r["value"]) for r in _rows(s, "out")] == [(0, b"from http")]


def test_a_subscribed_consumers_position_commits_with_the_transaction(server: Callable[..., Server]) -> None:
    """Consume, transform, produce with a group member (the classic protocol): its offsets commit with the
    transaction, under the member's group metadata."""
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, ("words", 1), ("upper", 1))
    with s.client() as http:
        r = http.post("/v1/topics/words/records", json={"records": [{"value": w} for w in ("a", "b", "c")]})
        assert r.status_code == 200, r.text
    consumer = _consumer(bootstrap, "upper-job", **{"auto.offset.reset": "earliest"})
    consumer.subscribe(["words"])
    batch: list[Any] = []
    deadline = time.monotonic() + 60
    while len(batch) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None:
            assert msg.error() is None, msg.error()
            batch.append(msg)
    producer = _producer(bootstrap, "upper-job-0")
    producer.begin_transaction()
    for m in batch:
        producer.produce("upper", value=m.value().upper())
    producer.send_offsets_to_transaction(
        [ck.TopicPartition("words", 0, batch[-1].offset() + 1)], consumer.consumer_group_metadata(), 30
    )
    producer.commit_transaction(30)
    assert consumer.committed([ck.TopicPartition("words", 0)], 30)[0].offset == 3
    consumer.close()
    assert [(r["offset"], r["value"]) for r in _rows(s, "upper")] == [(0, b"A"), (1, b"B"), (2, b"C")]
