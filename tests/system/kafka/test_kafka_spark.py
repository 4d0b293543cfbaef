"""Spark's ``format("kafka")`` and Kafka's Java producer against a real ``logstore serve``, unchanged.

A job written for Kafka reads and writes a logstore topic with only ``kafka.bootstrap.servers`` changed: the
batch source, the streaming source (``trigger(availableNow=True)``; ``startingOffsets`` earliest, latest or
JSON; ``assign``), ``includeHeaders``, and the sink (batch and streaming). Records written by each client —
confluent-kafka, the Java producer (kafka-clients, driven in the session's JVM), Spark's sink — are the
topic table's rows byte for byte, and read back through the HTTP API, Kafka's Fetch and Spark's source
the same.

Spark's Kafka connector is on the run's one SparkSession (tests/conftest.py, from ``make setup``).
"""

from __future__ import annotations

import base64
import datetime
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

from tests.support.paths import SPARK_KAFKA_JARS
from tests.support.server import Server, free_port

ck = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.skipif(
    not any(SPARK_KAFKA_JARS.glob("spark-sql-kafka-*.jar")),
    reason="Spark's Kafka connector comes from 'make setup' ('make kafka': .cache/spark-kafka)",
)

Headers = list[tuple[str, bytes | None]]
Record = tuple[int, int, bytes | None, bytes | None, Headers, int, int]
"""(partition, offset, key, value, headers, timestamp ms, timestamp type: 0 CreateTime, 1 LogAppendTime)."""

BASE_MS = 1_700_000_000_000
SINK_SCHEMA = StructType(
    [
        StructField("partition", IntegerType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField(
            "headers",
            ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
        ),
    ]
)


def _kafka_server(server: Callable[..., Server]) -> tuple[Server, str]:
    port = free_port()
    return server(listeners=f"PLAINTEXT://127.0.0.1:{port}"), f"127.0.0.1:{port}"


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    client = admin.AdminClient({"bootstrap.servers": bootstrap})
    for future in client.create_topics([admin.NewTopic(topic, partitions)]).values():
        future.result(timeout=30)


def _sent(i: int, partitions: int, tag: str) -> tuple[int, bytes | None, bytes | None, Headers, int]:
    """The ``i``-th record a client sends: (partition, key, value, headers, timestamp ms).

    Keys and values are not UTF-8 (every byte must survive) or null; headers repeat a key and carry a null value.
    """
    key = None if i % 5 == 4 else f"{tag}-key-{i % 3}".encode() + b"\x00\xff"
    value = None if i % 7 == 6 else f"{tag}-value-{i}".encode() + bytes([i % 256, 0x80])
    headers: Headers = [("trace", f"{tag}-{i}".encode()), ("trace", b"\xfe"), ("empty", None)] if i % 2 else []
    return i % partitions, key, value, headers, BASE_MS + 1000 * i


def _confluent_produce(bootstrap: str, topic: str, partitions: int, n: int) -> list[Record]:
    """``n`` records of :func:`_sent` through librdkafka (idempotent); their delivery reports (CreateTime)."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    delivered: list[Record] = []

    def report(err: Any, msg: Any, headers: Headers) -> None:
        assert err is None, err
        _, ts = msg.timestamp()  # CreateTime: a Produce answer's log_append_time_ms is -1 (docs/kafka-protocol.md)
        delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value(), headers, ts, 0))

    for i in range(n):
        p, key, value, headers, ts = _sent(i, partitions, "librdkafka")
        producer.produce(
            topic,
            key=key,
            value=value,
            partition=p,
            headers=headers or None,
            timestamp=ts,
            on_delivery=lambda err, msg, h=headers: report(err, msg, h),
        )
    assert producer.flush(60) == 0
    return sorted(delivered)


def _java_produce(spark: SparkSession, bootstrap: str, topic: str, partitions: int, n: int) -> list[Record]:
    """Kafka's Java producer (kafka-clients, idempotent by default, ``acks=all``) in the session's JVM."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    props = jvm.java.util.Properties()
    serializer = "org.apache.kafka.common.serialization.ByteArraySerializer"
    for k, v in {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": "true",
        "linger.ms": "5",
        "key.serializer": serializer,
        "value.serializer": serializer,
    }.items():
        props.put(k, v)
    producer = jvm.org.apache.kafka.clients.producer.KafkaProducer(props)
    futures = []
    try:
        for i in range(n):
            p, key, value, headers, ts = _sent(i, partitions, "java")
            jheaders = jvm.org.apache.kafka.common.header.internals.RecordHeaders()
            for hk, hv in headers:
                jheaders.add(hk, hv)
            record = jvm.org.apache.kafka.clients.producer.ProducerRecord(topic, p, ts, key, value, jheaders)
            futures.append((producer.send(record), key, value, headers))
        out = []
        for future, key, value, headers in futures:
            meta = future.get()
            out.append((meta.partition(), meta.offset(), key, value, headers, meta.timestamp(), 0))
    finally:
        producer.close()
    return sorted(out)


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
            r["timestamp_type"],
        )
        for r in rows
    )


def _http_records(s: Server, topic: str, partitions: int) -> list[Record]:
    """Over ``GET .../records`` (JSON: text or ``{"b64": …}``)."""

    def raw(v: Any) -> bytes | None:
        return None if v is None else base64.b64decode(v["b64"]) if isinstance(v, dict) else str(v).encode()

    out: list[Record] = []
    with s.client() as http:
        for p in range(partitions):
            body = http.get(f"/v1/topics/{topic}/partitions/{p}/records", params={"offset": 0, "max_records": 10_000})
            assert body.status_code == 200, body.text
            for r in body.json()["records"]:
                h = r["headers"]
                pairs = (
                    [(x["key"], raw(x["value"])) for x in h]
                    if isinstance(h, list)
                    else [(k, raw(v)) for k, v in h.items()]
                )
                ts, kind = r["timestamp"], r["timestamp_type"]
                out.append((r["partition"], r["offset"], raw(r["key"]), raw(r["value"]), pairs, ts, kind))
    return sorted(out)


def _kafka_fetch(bootstrap: str, topic: str, partitions: int, n: int) -> list[Record]:
    """Over Kafka's Fetch (librdkafka, ``assign()``), timestamp types as the topic table numbers them."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "doors", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    kinds = {ck.TIMESTAMP_CREATE_TIME: 0, ck.TIMESTAMP_LOG_APPEND_TIME: 1}
    out: list[Record] = []
    deadline = time.monotonic() + 60
    while len(out) < n and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        kind, ts = msg.timestamp()
        out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers() or [], ts, kinds[kind]))
    consumer.close()
    return sorted(out)


def _spark_rows(df: DataFrame) -> list[Record]:
    """Rows of Spark's Kafka source (``includeHeaders``) as records."""
    return sorted(
        (
            r.partition,
            r.offset,
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers or []],
            _ms(r.timestamp),
            r.timestampType,
        )
        for r in df.collect()
    )


def _ms(ts: datetime.datetime) -> int:
    """A Spark timestamp (naive, in the session's time zone, UTC) in ms since the epoch."""
    return int(ts.replace(tzinfo=datetime.UTC).timestamp() * 1000)


def _reader(spark: SparkSession, bootstrap: str, topic: str, streaming: bool = False, **options: str) -> DataFrame:
    reader = spark.readStream if streaming else spark.read
    r = reader.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in {"includeHeaders": "true", **options}.items():
        r = r.option(k, v)
    return r.load()  # type: ignore[no-any-return]


def _drain(df: DataFrame, workdir: Path) -> list[Record]:
    """Run the stream ``df`` once with ``availableNow`` into a Delta table; every row that table holds."""
    out = str(workdir / "out")
    q = (
        df.writeStream.format("delta")
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start(out)
    )
    q.awaitTermination()
    return _spark_rows(df.sparkSession.read.format("delta").load(out))


def _sink_frame(spark: SparkSession, partitions: int, n: int) -> tuple[DataFrame, list[tuple[Any, ...]]]:
    rows = [(p, k, v, h) for p, k, v, h, _ in (_sent(i, partitions, "spark") for i in range(n))]
    return spark.createDataFrame(
        [(p, k, v, [{"key": a, "value": b} for a, b in h]) for p, k, v, h in rows], SINK_SCHEMA
    ), rows


def _unordered(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``rows`` in a fixed order that does not compare None with bytes."""
    return sorted(rows, key=repr)


def test_spark_kafka_source_reads_a_topic_in_batch_and_as_a_stream(
    spark: SparkSession, server: Callable[..., Server], tmp_path: Path
) -> None:
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, "clicks", 3)
    produced = _confluent_produce(bootstrap, "clicks", 3, 30)
    table = _table_records(s, "clicks")
    assert table == produced

    assert _spark_rows(_reader(spark, bootstrap, "clicks")) == table  # batch, earliest to latest

    # startingOffsets / endingOffsets as JSON: offsets, earliest (-2), latest (-1); assign instead of subscribe
    starting = json.dumps({"clicks": {"0": 4, "1": -2, "2": 9}})
    ending = json.dumps({"clicks": {"0": 8, "1": -1, "2": -1}})
    sliced = _reader(spark, bootstrap, "clicks", startingOffsets=starting, endingOffsets=ending)
    assert _spark_rows(sliced) == [r for r in table if (r[0] == 0 and 4 <= r[1] < 8) or r[0] == 1 or r[:2] == (2, 9)]
    assigned = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({"clicks": [2]}))
        .option("includeHeaders", "true")
        .load()
    )
    assert _spark_rows(assigned) == [r for r in table if r[0] == 2]

    # startingTimestamp (ListOffsets by time): from the first record stamped at or after it, in each partition
    at = BASE_MS + 1000 * 12
    assert _spark_rows(_reader(spark, bootstrap, "clicks", startingTimestamp=str(at))) == [
        r for r in table if r[5] >= at
    ]
    by_pattern = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", "cl.*s")
        .option("includeHeaders", "true")
        .load()
    )
    assert _spark_rows(by_pattern) == table

    # a stream from earliest, twice on one checkpoint: the second run reads only what came since
    earliest = _reader(spark, bootstrap, "clicks", streaming=True, startingOffsets="earliest")
    assert _drain(earliest, tmp_path / "earliest") == table
    more = _confluent_produce(bootstrap, "clicks", 3, 6)
    table = _table_records(s, "clicks")
    assert _drain(earliest, tmp_path / "earliest") == table  # the sink's rows: nothing read twice, nothing missed

    # from latest: the first run pins the end, the second reads what came after it
    latest = _reader(spark, bootstrap, "clicks", streaming=True, startingOffsets="latest")
    assert _drain(latest, tmp_path / "latest") == []
    newer = _confluent_produce(bootstrap, "clicks", 3, 9)
    assert _drain(latest, tmp_path / "latest") == newer
    # from JSON offsets, several partitions at once
    starting = json.dumps({"clicks": {"0": 10, "1": -2, "2": -1}})
    from_json = _reader(spark, bootstrap, "clicks", streaming=True, startingOffsets=starting)
    table = _table_records(s, "clicks")
    assert _drain(from_json, tmp_path / "json") == [r for r in table if (r[0] == 0 and r[1] >= 10) or r[0] == 1]
    assert more and newer


def test_spark_kafka_sink_writes_a_topic_in_batch_and_as_a_stream(
    spark: SparkSession, server: Callable[..., Server], tmp_path: Path
) -> None:
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, "written", 2)
    _create(bootstrap, "copied", 2)
    frame, rows = _sink_frame(spark, 2, 20)
    before = int(time.time() * 1000)
    frame.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", "written").save()
    after = int(time.time() * 1000)
    table = _table_records(s, "written")
    # Spark's tasks write concurrently: each partition holds every row sent to it, in some order, offsets from 0
    assert _unordered((p, k, v, h) for p, _, k, v, h, _, _ in table) == _unordered(rows)
    assert [(p, o) for p, o, *_ in table] == [(p, o) for p in range(2) for o in range(10)]
    assert all(before <= ts <= after and tt == 0 for *_, ts, tt in table)  # stamped by Spark's producer: CreateTime

    # a Kafka-to-Kafka stream: every record of "written" into "copied", same partition, key, value, headers
    copy = (
        _reader(spark, bootstrap, "written", streaming=True, startingOffsets="earliest")
        .selectExpr("partition", "key", "value", "headers")
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "copied")
        .option("checkpointLocation", str(tmp_path / "copy"))
        .trigger(availableNow=True)
        .start()
    )
    copy.awaitTermination()
    copied = _table_records(s, "copied")
    assert [r[:5] for r in copied] == [r[:5] for r in table]


def test_records_of_every_client_are_the_table_rows_and_read_back_alike_by_every_door(
    spark: SparkSession, server: Callable[..., Server]
) -> None:
    """confluent-kafka, the Java producer and Spark's sink into one topic; the table, HTTP, Fetch and Spark agree."""
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, "doors", 2)
    expected = _confluent_produce(bootstrap, "doors", 2, 14)
    expected += _java_produce(spark, bootstrap, "doors", 2, 14)
    assert _table_records(s, "doors") == sorted(expected)

    frame, rows = _sink_frame(spark, 2, 14)
    before = int(time.time() * 1000)
    frame.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", "doors").save()
    after = int(time.time() * 1000)
    table = _table_records(s, "doors")
    from_spark = [r for r in table if r[1] >= 14]  # each partition held 14 records before the sink wrote
    assert _unordered((p, k, v, h) for p, _, k, v, h, _, _ in from_spark) == _unordered(rows)
    assert all(before <= ts <= after and tt == 0 for *_, ts, tt in from_spark)
    assert [r for r in table if r[1] < 14] == sorted(expected)

    assert _kafka_fetch(bootstrap, "doors", 2, 42) == table
    assert _spark_rows(_reader(spark, bootstrap, "doors")) == table
    assert _http_records(s, "doors", 2) == table


def test_log_append_time_is_the_timestamp_type_every_door_reads(
    spark: SparkSession, server: Callable[..., Server]
) -> None:
    """A LogAppendTime topic: the table, HTTP, Kafka's Fetch and Spark's source all say 1 and the append time."""
    s, bootstrap = _kafka_server(server)
    client = admin.AdminClient({"bootstrap.servers": bootstrap})
    topic = admin.NewTopic("stamped", 2, config={"message.timestamp.type": "LogAppendTime"})
    for future in client.create_topics([topic]).values():
        future.result(timeout=30)
    before = int(time.time() * 1000)
    _confluent_produce(bootstrap, "stamped", 2, 6)
    table = _table_records(s, "stamped")
    assert len(table) == 6
    assert all(tt == 1 and ts >= before for *_, ts, tt in table)  # the producer's BASE_MS stamps were replaced
    assert _http_records(s, "stamped", 2) == table
    assert _kafka_fetch(bootstrap, "stamped", 2, 6) == table
    assert _spark_rows(_reader(spark, bootstrap, "stamped")) == table
