"""Kafka's own clients against a real ``logstore serve``: librdkafka (confluent-kafka) and kafka-python.

Records produced through the Kafka listener are read back through the HTTP
API and the Delta table with the same partition, offset, key, value, headers
and timestamp; records produced over HTTP are read by Kafka's consumer the
same way.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tests.support.server import Server, free_port

ck = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")
kafka = pytest.importorskip("kafka")

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
Record = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]], int]
"""(partition, offset, key, value, headers, timestamp ms)."""


def _kafka_server(server: Callable[..., Server], **config: object) -> tuple[Server, str]:
    port = free_port()
    return server(listeners=f"PLAINTEXT://127.0.0.1:{port}", **config), f"127.0.0.1:{port}"


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    client = admin.AdminClient({"bootstrap.servers": bootstrap})
    for future in client.create_topics([admin.NewTopic(topic, partitions)]).values():
        future.result(timeout=30)


def _produce(bootstrap: str, topic: str, codec: str, n: int) -> list[Record]:
    """Produce ``n`` records (idempotent, acks=all, keys, headers on every other one); their delivery reports."""
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 5,
        }
    )
    delivered: list[Record] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any, headers: list[tuple[str, bytes]]) -> None:
        if err is not None:
            errors.append(err)
            return
        _, ts = msg.timestamp()  # a delivery report carries no headers: the ones sent
        delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value(), headers, ts))

    base = 1_700_000_000_000
    for i in range(n):
        headers = [("h", f"{codec}-{i}".encode()), ("h", b"again")] if i % 2 else None
        value = None if i % 10 == 9 else f"{codec}-value-{i}".encode() * 3
        producer.produce(
            topic,
            key=f"key-{i % 7}".encode(),
            value=value,
            headers=headers,
            timestamp=base + i,
            on_delivery=lambda err, msg, h=headers or []: report(err, msg, h),
        )
    assert producer.flush(60) == 0
    assert errors == []
    return sorted(delivered)


def _http_records(s: Server, topic: str, partitions: int) -> list[Record]:
    out: list[Record] = []
    with s.client() as http:
        for p in range(partitions):
            body = http.get(f"/v1/topics/{topic}/partitions/{p}/records", params={"offset": 0, "max_records": 100_000})
            assert body.status_code == 200, body.text
            for r in body.json()["records"]:
                headers = r["headers"]
                pairs = (
                    [(h["key"], _bytes(h["value"])) for h in headers]
                    if isinstance(headers, list)
                    else [(k, _bytes(v)) for k, v in headers.items()]
                )
                out.append((r["partition"], r["offset"], _bytes(r["key"]), _bytes(r["value"]), pairs, r["timestamp"]))
    return sorted(out)


def _bytes(v: Any) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, dict):
        return base64.b64decode(v["b64"])
    return str(v).encode()


def _table_records(s: Server, topic: str) -> list[Record]:
    rows = DeltaTable(str(s.root / "topics" / topic)).to_pyarrow_table().to_pylist()
    return sorted(
        (
            r["partition"],
            r["offset"],
            r["key"],
            r["value"],
            [(h["key"], h["value"]) for h in r["headers"] or []],
            int(r["timestamp"].timestamp() * 1000),
        )
        for r in rows
    )


def _consume(bootstrap: str, topic: str, partitions: int, n: int, **extra: Any) -> list[Record]:
    consumer = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False, **extra}
    )
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[Record] = []
    deadline = time.monotonic() + 60
    while len(out) < n and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        _, ts = msg.timestamp()
        out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers() or [], ts))
    consumer.close()
    return sorted(out)


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_producer_records_are_the_table_rows_and_read_back_by_every_door(
    server: Callable[..., Server], codec: str
) -> None:
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, "orders", 3)
    produced = _produce(bootstrap, "orders", codec, 300)
    assert len(produced) == 300
    assert sorted((p, o) for p, o, *_ in produced) == sorted(
        (p, o) for p in range(3) for o in range(sum(1 for r in produced if r[0] == p))
    )
    assert _http_records(s, "orders", 3) == produced
    assert _table_records(s, "orders") == produced
    assert _consume(bootstrap, "orders", 3, 300) == produced
    # compression.type=producer (the default): the data files keep the codec the client's batches came in
    assert _file_codecs(s, "orders") == {PARQUET_CODECS[codec]}


PARQUET_CODECS = {"none": "UNCOMPRESSED", "gzip": "GZIP", "snappy": "SNAPPY", "lz4": "LZ4", "zstd": "ZSTD"}
"""A Kafka client's codec → the Parquet codec of the files its records land in under ``compression.type=producer``,
as pyarrow's metadata names it (LZ4_RAW, what it writes, is ``LZ4`` there)."""


def _file_codecs(s: Server, topic: str) -> set[str]:
    """The Parquet codecs of the ``value`` column of every data file of ``topic``."""
    table = DeltaTable(str(s.root / "topics" / topic))
    out = set()
    for uri in table.file_uris():
        meta = pq.ParquetFile(uri.removeprefix("file://")).metadata
        column = meta.schema.to_arrow_schema().get_field_index("value")
        out |= {meta.row_group(g).column(column).compression for g in range(meta.num_row_groups)}
    return out


def test_http_records_read_by_kafka_consumer_identically(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server)
    with s.client() as http:
        assert http.post("/v1/topics", json={"name": "events", "partitions": 2}).status_code in (200, 201)
        records = [
            {"key": f"k{i}", "value": f"v{i}", "partition": i % 2, "timestamp": 1_600_000_000_000 + i}
            | ({"headers": {"trace": f"t{i}"}} if i % 3 == 0 else {})
            for i in range(40)
        ]
        assert http.post("/v1/topics/events/records", json={"records": records}).status_code == 200
    expected = _http_records(s, "events", 2)
    assert len(expected) == 40
    assert _consume(bootstrap, "events", 2, 40) == expected


def test_commit_without_membership_lands_in_offsets_and_is_fetched_back(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, "jobs", 2)
    _produce(bootstrap, "jobs", "none", 20)
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "workers", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition("jobs", 0, 0), ck.TopicPartition("jobs", 1, 0)])
    committed = consumer.commit(
        offsets=[ck.TopicPartition("jobs", 0, 3), ck.TopicPartition("jobs", 1, 5)], asynchronous=False
    )
    assert [(tp.partition, tp.offset, tp.error) for tp in committed] == [(0, 3, None), (1, 5, None)]
    got = consumer.committed([ck.TopicPartition("jobs", 0), ck.TopicPartition("jobs", 1)], timeout=30)
    assert [(tp.partition, tp.offset) for tp in got] == [(0, 3), (1, 5)]
    consumer.close()
    with s.client() as http:
        group = http.get("/v1/groups/workers").json()
    [topic] = group["topics"]
    assert topic["topic"] == "jobs"
    assert [(p["partition"], p["committed_offset"]) for p in topic["partitions"]] == [(0, 3), (1, 5)]


def test_list_offsets_earliest_latest_and_by_timestamp(server: Callable[..., Server]) -> None:
    _, bootstrap = _kafka_server(server)
    _create(bootstrap, "clock", 1)
    produced = _produce(bootstrap, "clock", "none", 10)  # timestamps base + 0 … base + 9
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "c"})
    assert consumer.get_watermark_offsets(ck.TopicPartition("clock", 0), timeout=30) == (0, 10)
    ts = produced[4][5]
    found = consumer.offsets_for_times([ck.TopicPartition("clock", 0, ts)], timeout=30)
    assert [(tp.partition, tp.offset) for tp in found] == [(0, 4)]
    later = consumer.offsets_for_times([ck.TopicPartition("clock", 0, ts + 1000)], timeout=30)
    assert [tp.offset for tp in later] == [-1]
    consumer.close()


def test_kafka_python_admin_creates_and_deletes_a_topic(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server)
    client = kafka.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    client.create_topics([kafka.admin.NewTopic("made-by-kafka", num_partitions=4, replication_factor=1)])
    with s.client() as http:
        described = http.get("/v1/topics/made-by-kafka").json()
        assert [p["partition"] for p in described["partitions"]] == [0, 1, 2, 3]
        assert "made-by-kafka" in client.list_topics()
        client.delete_topics(["made-by-kafka"])
        assert http.get("/v1/topics/made-by-kafka").status_code == 404
    assert "made-by-kafka" not in client.list_topics()
    client.close()


def test_a_retried_idempotent_batch_is_written_once(server: Callable[..., Server]) -> None:
    """The same batch (producer id, epoch, base sequence) sent twice: one write, the retry answers its offset."""
    from tests.system.kafka.raw import produce_frame, produce_response, request

    _, bootstrap = _kafka_server(server)
    _create(bootstrap, "once", 1)
    frame = produce_frame("once", 0, [b"a", b"b"], producer_id=42, base_sequence=0)
    first = produce_response(request(bootstrap, frame))
    again = produce_response(request(bootstrap, frame))
    assert first == again == (0, 0)
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "c"})
    assert consumer.get_watermark_offsets(ck.TopicPartition("once", 0), timeout=30) == (0, 2)
    consumer.close()


def test_metadata_sends_each_topic_its_id(server: Callable[..., Server]) -> None:
    from tests.system.kafka.raw import metadata_topic_ids

    s, bootstrap = _kafka_server(server)
    _create(bootstrap, "first", 1)
    with s.client() as http:
        first_id = http.get("/v1/topics/first").json()["topic_id"]
        assert http.delete("/v1/topics/first").status_code == 204
    _create(bootstrap, "first", 1)  # the same name again: a new topic, a new id
    with s.client() as http:
        second_id = http.get("/v1/topics/first").json()["topic_id"]
    assert first_id != second_id
    assert metadata_topic_ids(bootstrap, ["first", "missing"]) == {
        "first": (0, second_id),
        "missing": (3, "AAAAAAAAAAAAAAAAAAAAAA"),
    }


def test_describe_configs_names_a_topics_overrides_and_defaults(server: Callable[..., Server]) -> None:
    _, bootstrap = _kafka_server(server)
    client = admin.AdminClient({"bootstrap.servers": bootstrap})
    created = client.create_topics([admin.NewTopic("tuned", 2, config={"retention.ms": "60000"})])
    created["tuned"].result(timeout=30)
    [future] = client.describe_configs([admin.ConfigResource(admin.ResourceType.TOPIC, "tuned")]).values()
    configs = future.result(timeout=30)
    retention, cleanup = configs["retention.ms"], configs["cleanup.policy"]
    assert (retention.value, retention.source) == ("60000", admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (cleanup.value, cleanup.source) == ("delete", admin.ConfigSource.DEFAULT_CONFIG.value)
    assert set(configs) == {
        "retention.ms",
        "retention.bytes",
        "cleanup.policy",
        "segment.bytes",
        "message.max.bytes",
        "message.timestamp.type",
        "delete.retention.ms",
        "min.compaction.lag.ms",
        "compression.type",
    }


@pytest.mark.crash
def test_kill_9_mid_stream_loses_nothing_acknowledged(server: Callable[..., Server]) -> None:
    """An idempotent acks=all producer streams while the node is SIGKILLed and restarted: every record it was
    told landed is in the table at the offset it was told, once."""
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, "durable", 2)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 2})
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.value()] = (msg.partition(), msg.offset())

    sent = 0

    def send(until: Callable[[], bool]) -> None:
        nonlocal sent
        deadline = time.monotonic() + 60
        while not until() and time.monotonic() < deadline:
            producer.produce("durable", key=str(sent % 5).encode(), value=f"r{sent}".encode(), on_delivery=report)
            sent += 1
            producer.poll(0.001)

    send(lambda: len(acked) >= 500)
    s.kill()
    send(lambda: sent >= len(acked) + 2000)  # queued while the node is down
    s.restart()
    resumed = sent
    send(lambda: sent >= resumed + 500)
    assert producer.flush(120) == 0
    assert errors == []
    assert len(acked) == sent
    table = _table_records(s, "durable")
    assert len(table) == len(acked)  # written once each
    assert {r[3]: (r[0], r[1]) for r in table} == acked


def test_metadata_creates_a_topic_when_auto_create_is_on(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server, **{"auto.create.topics.enable": "true", "num.partitions": 3})
    produced = _produce(bootstrap, "appeared", "none", 30)
    assert {p for p, *_ in produced} <= {0, 1, 2}
    with s.client() as http:
        assert len(http.get("/v1/topics/appeared").json()["partitions"]) == 3
    assert _table_records(s, "appeared") == produced


def test_an_unknown_topic_is_not_created_when_auto_create_is_off(server: Callable[..., Server]) -> None:
    _, bootstrap = _kafka_server(server)
    client = admin.AdminClient({"bootstrap.servers": bootstrap})
    topic = client.list_topics("absent", timeout=30).topics["absent"]
    assert topic.error is not None and topic.error.code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "absent" not in client.list_topics(timeout=30).topics


def test_log_append_time_reaches_the_kafka_consumer_per_record(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server)
    with s.client() as http:
        created = http.post(
            "/v1/topics",
            json={"name": "stamped", "partitions": 1, "config": {"message.timestamp.type": "LogAppendTime"}},
        )
        assert created.status_code in (200, 201), created.text
        for batch in range(3):  # a commit each: three append times
            body = {"records": [{"value": f"{batch}-{i}"} for i in range(4)]}
            assert http.post("/v1/topics/stamped/records", params={"acks": "all"}, json=body).status_code == 200
    expected = _http_records(s, "stamped", 1)
    assert len({r[5] for r in expected}) == 3
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "stamps"})
    consumer.assign([ck.TopicPartition("stamped", 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 12 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.timestamp()))
    consumer.close()
    assert got == [(r[1], (ck.TIMESTAMP_LOG_APPEND_TIME, r[5])) for r in expected]
