"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10) against a secured node's listener.

A job written for a SASL/PLAIN Kafka cluster runs unchanged but for the bootstrap address: the batch source,
the streaming source (``availableNow``) and the sink authenticate with ``kafka.security.protocol``,
``kafka.sasl.mechanism`` and ``kafka.sasl.jaas.config`` and are held to the ACLs the HTTP API checks. The
plaintext connector is tests/system/kafka/test_kafka_spark.py's; both use the run's one SparkSession, which
has the connector on its classpath (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.paths import SPARK_KAFKA_JARS
from tests.support.server import Server, free_port

pytestmark = [pytest.mark.spark]


def _secured_node(server: Callable[..., Server], root: Path, port: int) -> tuple[Server, str, dict[str, str]]:
    """A node with security on and a SASL_PLAINTEXT listener; ``User:spark`` may read and write ``in`` and ``out``
    and read any group. Returns (server, the admin's key, Spark's kafka.* security options)."""
    from logstore.security import (
        AclBinding,
        FileSecurityStore,
        Operation,
        PatternType,
        Permission,
        ResourceType,
        new_key,
    )

    store = FileSecurityStore(str(root))
    record, admin_key = new_key("User:admin")
    store.add_key(record)
    record, spark_key = new_key("User:spark")
    store.add_key(record)
    allow = [(ResourceType.TOPIC, name, op) for name in ("in", "out") for op in (Operation.READ, Operation.WRITE)] + [
        (ResourceType.GROUP, "*", Operation.READ)
    ]
    store.add_acls([AclBinding("User:spark", t, n, PatternType.LITERAL, op, Permission.ALLOW) for t, n, op in allow])
    s = server(
        root,
        listeners=f"SASL_PLAINTEXT://127.0.0.1:{port}",
        **{"security.enabled": "true", "super.users": "User:admin"},
    )
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="spark" password="{spark_key}";'
    options = {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": jaas,
    }
    return s, admin_key, options


@pytest.mark.skipif(
    not any(SPARK_KAFKA_JARS.glob("spark-sql-kafka-*.jar")),
    reason="Spark's Kafka connector comes from 'make setup' ('make kafka': .cache/spark-kafka)",
)
def test_spark_kafka_source_and_sink_read_and_write_a_topic_over_sasl_plain(
    spark: SparkSession, server: Callable[..., Server], tmp_path: Path
) -> None:
    port = free_port()
    s, key, security = _secured_node(server, tmp_path / "data", port)
    with s.client(api_key=key) as http:
        for name in ("in", "out"):
            assert http.post("/v1/topics", json={"name": name, "partitions": 2}).status_code == 201
        records = [{"key": f"key-{i % 9}", "value": f"value-{i}"} for i in range(100)]
        assert http.post("/v1/topics/in/records", params={"acks": "all"}, json={"records": records}).status_code == 200
        stored = [
            [r["partition"], r["offset"], r["key"], r["value"], r["timestamp"]]
            for p in range(2)
            for r in http.get(f"/v1/topics/in/partitions/{p}/records", params={"offset": 0}).json()["records"]
        ]

    def kafka(r):
        return r.format("kafka").option("kafka.bootstrap.servers", f"127.0.0.1:{port}").options(**security)

    columns = ["partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "timestamp"]
    batch = kafka(spark.read).option("subscribe", "in").option("startingOffsets", "earliest").load()
    rows = [
        [r.partition, r.offset, r.key, r.value, int(r.timestamp.timestamp() * 1000)]
        for r in batch.selectExpr(*columns).collect()
    ]
    assert sorted(rows) == sorted(stored)  # same partition, offset, key, value and timestamp
    out = tmp_path / "spark"
    q = (
        kafka(spark.readStream)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr(*columns)
        .writeStream.format("parquet")
        .option("path", str(out / "stream"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    streamed = [[r.partition, r.offset, r.key, r.value] for r in spark.read.parquet(str(out / "stream")).collect()]
    assert sorted(streamed) == sorted(r[:4] for r in stored)
    sent = spark.createDataFrame([(f"k{i}", f"from-spark-{i}") for i in range(50)], "key STRING, value STRING")
    kafka(sent.write).option("topic", "out").save()
    with s.client(api_key=key) as http:
        written = [
            (r["key"], r["value"])
            for p in range(2)
            for r in http.get(f"/v1/topics/out/partitions/{p}/records", params={"offset": 0}).json()["records"]
        ]
    assert sorted(written) == sorted((f"k{i}", f"from-spark-{i}") for i in range(50))
