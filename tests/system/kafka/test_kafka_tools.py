"""Kafka's own command-line tools (3.9, from `make kafka`: .cache/kafka) against `logstore serve`, unchanged."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.support.server import Server, free_port

_JARS = Path(__file__).resolve().parents[3] / ".cache" / "kafka"

pytestmark = pytest.mark.skipif(
    shutil.which("java") is None or not any(_JARS.glob("kafka_2.13-*.jar")),
    reason="Kafka's tools need Java and 'make kafka' (Kafka's jars from Maven Central in .cache/kafka)",
)


def _tool(main: str, *args: str, stdin: str = "") -> str:
    classpath = os.pathsep.join(str(j) for j in sorted(_JARS.glob("*.jar")))
    out = subprocess.run(
        ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath, main, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout


def test_console_producer_and_consumer_round_trip(server: Callable[..., Server]) -> None:
    port = free_port()
    s = server(listeners=f"PLAINTEXT://127.0.0.1:{port}")
    bootstrap = f"127.0.0.1:{port}"
    with s.client() as http:
        assert http.post("/v1/topics", json={"name": "console", "partitions": 1}).status_code in (200, 201)
    lines = [f"key-{i}:value-{i}" for i in range(5)]
    _tool(
        "kafka.tools.ConsoleProducer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "console",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--producer-property",
        "acks=all",
        stdin="\n".join(lines) + "\n",
    )
    out = _tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "console",
        "--partition",
        "0",
        "--offset",
        "earliest",
        "--max-messages",
        "5",
        "--property",
        "print.key=true",
        "--property",
        "key.separator=:",
    )
    assert out.splitlines() == lines
    with s.client() as http:
        records = http.get("/v1/topics/console/partitions/0/records", params={"offset": 0}).json()["records"]
    assert [(r["offset"], f"{r['key']}:{r['value']}") for r in records] == list(enumerate(lines))


def test_kafka_topics_creates_and_describes(server: Callable[..., Server]) -> None:
    port = free_port()
    s = server(listeners=f"PLAINTEXT://127.0.0.1:{port}")
    bootstrap = f"127.0.0.1:{port}"
    tool = "org.apache.kafka.tools.TopicCommand"
    created = _tool(tool, "--bootstrap-server", bootstrap, "--create", "--topic", "made", "--partitions", "3")
    assert created.strip() == "Created topic made."
    described = _tool(tool, "--bootstrap-server", bootstrap, "--describe", "--topic", "made")
    with s.client() as http:
        topic_id = http.get("/v1/topics/made").json()["topic_id"]
    lines = described.splitlines()
    assert lines[0].split("\t")[:4] == [
        "Topic: made",
        f"TopicId: {topic_id}",
        "PartitionCount: 3",
        "ReplicationFactor: 1",
    ]
    assert [line.split("\t")[1:4] for line in lines[1:]] == [
        ["Topic: made", f"Partition: {p}", "Leader: 0"] for p in range(3)
    ]


def test_kafka_consumer_groups_lists_and_describes_committed_offsets(server: Callable[..., Server]) -> None:
    port = free_port()
    s = server(listeners=f"PLAINTEXT://127.0.0.1:{port}")
    bootstrap = f"127.0.0.1:{port}"
    with s.client() as http:
        assert http.post("/v1/topics", json={"name": "lagging", "partitions": 2}).status_code in (200, 201)
        records = [{"value": str(i), "partition": i % 2} for i in range(10)]
        assert http.post("/v1/topics/lagging/records", json={"records": records}).status_code == 200
        committed = http.post("/v1/groups/billing/offsets", json={"topic": "lagging", "partitions": {"0": 2, "1": 5}})
        assert committed.status_code in (200, 204), committed.text
    tool = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
    assert _tool(tool, "--bootstrap-server", bootstrap, "--list").split() == ["billing"]
    described = _tool(tool, "--bootstrap-server", bootstrap, "--describe", "--group", "billing")
    rows = [line.split()[:6] for line in described.splitlines() if line.startswith("billing")]
    assert rows == [["billing", "lagging", "0", "2", "5", "3"], ["billing", "lagging", "1", "5", "5", "0"]]


def test_transactional_message_copier_copies_exactly_once_through_aborts(server: Callable[..., Server]) -> None:
    """Kafka's TransactionalMessageCopier (the Java client's transactional producer, its read_committed consumer,
    sendOffsetsToTransaction with group metadata, random aborts): every input record lands in the output once."""
    port = free_port()
    s = server(listeners=f"PLAINTEXT://127.0.0.1:{port}")
    with s.client() as http:
        for name in ("in", "out"):
            assert http.post("/v1/topics", json={"name": name, "partitions": 1}).status_code == 201
        r = http.post("/v1/topics/in/records", json={"records": [{"value": f"m{i}"} for i in range(40)]})
        assert r.status_code == 200, r.text
    _tool(
        "org.apache.kafka.tools.TransactionalMessageCopier",
        *("--broker-list", f"127.0.0.1:{port}", "--transactional-id", "copier", "--consumer-group", "copiers"),
        *("--input-topic", "in", "--input-partition", "0", "--output-topic", "out"),
        *("--max-messages", "40", "--transaction-size", "7", "--enable-random-aborts", "--use-group-metadata"),
    )
    rows = DeltaTable(str(s.root / "topics" / "out")).to_pyarrow_table(columns=["offset", "value"]).to_pylist()
    assert sorted(r["value"] for r in rows) == sorted(f"m{i}".encode() for i in range(40))
    assert sorted(r["offset"] for r in rows) == list(range(40))
    with s.client() as http:
        group = http.get("/v1/groups/copiers")
        assert group.status_code == 200, group.text
        partitions = group.json()["topics"][0]["partitions"]
        assert [(p["partition"], p["committed_offset"]) for p in partitions] == [(0, 40)]
    listed = _tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", f"127.0.0.1:{port}", "list")
    assert "copier" in listed and "CompleteCommit" in listed, listed
    described = _tool(
        "org.apache.kafka.tools.TransactionsCommand",
        *("--bootstrap-server", f"127.0.0.1:{port}", "describe", "--transactional-id", "copier"),
    )
    assert "CompleteCommit" in described, described


def test_console_producer_headers_keys_and_nulls_are_the_table_rows(server: Callable[..., Server]) -> None:
    """Kafka's console producer with ``parse.headers`` and ``null.marker``: each line is one row, byte for byte."""
    port = free_port()
    s = server(listeners=f"PLAINTEXT://127.0.0.1:{port}")
    with s.client() as http:
        assert http.post("/v1/topics", json={"name": "lines", "partitions": 1}).status_code in (200, 201)
    lines = [
        "trace:1,trace:2,empty:NULL|k1|v1",  # a repeated header key, a null header value
        "NULL|k2|v2",  # no headers ("NULL" as the whole header part)
        "only:x|NULL|v3",  # a null key
        "h:y|k4|NULL",  # a null value: a tombstone
    ]
    before = int(time.time() * 1000)
    _tool(
        "kafka.tools.ConsoleProducer",
        "--bootstrap-server",
        f"127.0.0.1:{port}",
        "--topic",
        "lines",
        "--property",
        "parse.key=true",
        "--property",
        "parse.headers=true",
        "--property",
        "key.separator=|",
        "--property",
        "headers.delimiter=|",
        "--property",
        "null.marker=NULL",
        "--producer-property",
        "acks=all",
        stdin="\n".join(lines) + "\n",
    )
    after = int(time.time() * 1000)
    rows = DeltaTable(str(s.root / "topics" / "lines")).to_pyarrow_table().sort_by("offset").to_pylist()
    assert [
        (r["offset"], r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"] or []], r["timestamp_type"])
        for r in rows
    ] == [
        (0, b"k1", b"v1", [("trace", b"1"), ("trace", b"2"), ("empty", None)], 0),
        (1, b"k2", b"v2", [], 0),
        (2, None, b"v3", [("only", b"x")], 0),
        (3, b"k4", None, [("h", b"y")], 0),
    ]
    assert all(before <= int(r["timestamp"].timestamp() * 1000) <= after for r in rows)  # the producer's clock


def test_console_consumer_with_a_group_commits_and_consumer_groups_describes_live_members(
    server: Callable[..., Server],
) -> None:
    ck = pytest.importorskip("confluent_kafka")
    port = free_port()
    s = server(listeners=f"PLAINTEXT://127.0.0.1:{port}", **{"group.initial.rebalance.delay.ms": 0})
    bootstrap = f"127.0.0.1:{port}"
    with s.client() as http:
        assert http.post("/v1/topics", json={"name": "shared", "partitions": 2}).status_code in (200, 201)
        records = [{"value": f"v{i}", "partition": i % 2} for i in range(10)]
        assert http.post("/v1/topics/shared/records", json={"records": records}).status_code == 200
    out = _tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "shared",
        "--group",
        "tools",
        "--from-beginning",
        "--max-messages",
        "10",
    )
    assert sorted(out.split()) == sorted(f"v{i}" for i in range(10))
    with s.client() as http:  # it subscribed, read everything and committed on close
        group = http.get("/v1/groups/tools").json()
    assert [(p["partition"], p["committed_offset"]) for t in group["topics"] for p in t["partitions"]] == [
        (0, 5),
        (1, 5),
    ]

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "tools", "client.id": "py-reader"})
    assigned: list[int] = []
    consumer.subscribe(["shared"], on_assign=lambda c, ps: assigned.extend(p.partition for p in ps))
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            consumer.poll(0.1)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        deadline = time.monotonic() + 60
        while sorted(assigned) != [0, 1]:
            assert time.monotonic() < deadline, "the consumer was never assigned its partitions"
            time.sleep(0.05)
        tool = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
        described = _tool(tool, "--bootstrap-server", bootstrap, "--describe", "--group", "tools")
        rows = sorted(line.split() for line in described.splitlines() if line.startswith("tools"))
        assert [r[:6] for r in rows] == [
            ["tools", "shared", "0", "5", "5", "0"],
            ["tools", "shared", "1", "5", "5", "0"],
        ]
        assert {(r[6].startswith("py-reader-"), r[7], r[8]) for r in rows} == {(True, "/127.0.0.1", "py-reader")}
        state = _tool(tool, "--bootstrap-server", bootstrap, "--describe", "--group", "tools", "--state")
        (line,) = [line.split() for line in state.splitlines() if line.startswith("tools")]
        assert line[-3:] == ["range", "Stable", "1"]
    finally:
        stop.set()
        poller.join()
        consumer.close()
