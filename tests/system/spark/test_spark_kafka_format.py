"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10) against a logstore node's listener.

Only the bootstrap address changes: the batch source, the streaming source
(``availableNow``) and the sink run unchanged. The connector's jars come from
``.cache/spark-kafka`` (``make kafka``), as ``bench/vs_kafka.py`` takes them; the
run's one SparkSession was started without them, so the query runs in its own
driver process (as ``spark-submit --jars`` would run it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.server import Server, free_port

pytestmark = [pytest.mark.spark]

_KAFKA_JARS = REPO / ".cache" / "spark-kafka"

CHILD = """
import json, sys
from logstore.spark import session

bootstrap, jars, out, security = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
spark = session(**{"spark.master": "local[1]", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1",
                   "spark.jars": jars})
spark.sparkContext.setLogLevel("ERROR")
kafka = lambda r: r.format("kafka").option("kafka.bootstrap.servers", bootstrap).options(**security)
source = lambda r: kafka(r).option("subscribe", "in")
columns = "partition, offset, CAST(key AS STRING) AS key, CAST(value AS STRING) AS value, timestamp"
batch = source(spark.read).option("startingOffsets", "earliest").load().selectExpr(*columns.split(", "))
rows = [[r.partition, r.offset, r.key, r.value, int(r.timestamp.timestamp() * 1000)] for r in batch.collect()]
q = (source(spark.readStream).option("startingOffsets", "earliest").load().selectExpr(*columns.split(", "))
     .writeStream.format("parquet").option("path", out + "/stream").option("checkpointLocation", out + "/checkpoint")
     .trigger(availableNow=True).start())
q.awaitTermination()
streamed = [[r.partition, r.offset, r.key, r.value] for r in spark.read.parquet(out + "/stream").collect()]
(spark.createDataFrame([(f"k{i}", f"from-spark-{i}") for i in range(50)], "key STRING, value STRING")
 .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).options(**security).option("topic", "out")
 .save())
print(json.dumps({"batch": rows, "stream": streamed}), flush=True)
"""


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
    not any(_KAFKA_JARS.glob("spark-sql-kafka-*.jar")),
    reason="Spark's Kafka connector comes from 'make kafka' (.cache/spark-kafka)",
)
@pytest.mark.parametrize("secured", [False, True], ids=["plaintext", "sasl-plain"])
def test_spark_kafka_source_and_sink_read_and_write_a_logstore_topic(
    server: Callable[..., Server], tmp_path: Path, secured: bool
) -> None:
    from logstore.spark import delta_jars, unbundled_jars

    port = free_port()
    if secured:  # the kafka.* security options of a secured Kafka cluster, and the ACLs the HTTP API checks
        s, key, security = _secured_node(server, tmp_path / "data", port)
    else:
        s, key, security = server(listeners=f"PLAINTEXT://127.0.0.1:{port}"), None, {}
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
    jars = ",".join(delta_jars() + unbundled_jars(_KAFKA_JARS))
    child = subprocess.run(
        [sys.executable, "-c", CHILD, f"127.0.0.1:{port}", jars, str(tmp_path / "spark"), json.dumps(security)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert child.returncode == 0, child.stderr[-6000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert sorted(result["batch"]) == sorted(stored)  # same partition, offset, key, value and timestamp
    assert sorted(result["stream"]) == sorted(r[:4] for r in stored)
    with s.client(api_key=key) as http:
        written = [
            (r["key"], r["value"])
            for p in range(2)
            for r in http.get(f"/v1/topics/out/partitions/{p}/records", params={"offset": 0}).json()["records"]
        ]
    assert sorted(written) == sorted((f"k{i}", f"from-spark-{i}") for i in range(50))
