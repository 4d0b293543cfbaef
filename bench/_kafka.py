"""Apache Kafka for the comparisons: a KRaft broker and Kafka's own perf tools, from the project's cache.

``make kafka`` copies Kafka's jars (``jars/kafka/pom.xml``) into ``.cache/kafka`` and
Spark's Kafka connector into ``.cache/spark-kafka``, off every Spark session's
classpath. :class:`KafkaBroker` runs one broker as the distribution's scripts
would; :func:`producer_performance` and :func:`consumer_performance` run
``ProducerPerformance`` and ``ConsumerPerformance`` and return their figures.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from harness import VALUE_BYTES, free_port, stop_child

_ROOT = Path(__file__).resolve().parent.parent
KAFKA_VERSION = "3.9.0"
KAFKA_JARS = _ROOT / ".cache" / "kafka"
SPARK_KAFKA_JARS = _ROOT / ".cache" / "spark-kafka"

# kafka-server-start.sh's and kafka-run-class.sh's JVM options, so the broker runs as it would from the distribution.
_BROKER_JVM = [
    "-Xms1g",
    "-Xmx1g",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]
DEFAULT_PRODUCER: dict[str, str] = {}
"""Kafka 3.9's producer defaults (idempotent, ``linger.ms=0``, ``batch.size=16384``): nothing set."""
TUNED_PRODUCER = {"batch.size": "262144", "linger.ms": "5"}
"""The producer settings a throughput-minded Kafka user sets: 256 KiB batches, 5 ms to fill them."""

_TOOL_JVM = ["-Xmx512m", "-server", "-XX:+UseG1GC", "-Djava.awt.headless=true"]
# slf4j-simple (the only SLF4J backend in .cache/kafka): warnings and errors only, to stderr.
_LOGGING = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.logFile=System.err"]


def _classpath() -> str:
    jars = sorted(KAFKA_JARS.glob("*.jar"))
    if not any(j.name.startswith(f"kafka_2.13-{KAFKA_VERSION}") for j in jars):
        sys.exit(f"no Kafka {KAFKA_VERSION} jars in {KAFKA_JARS}: run 'make kafka' to fetch them from Maven Central")
    return os.pathsep.join(str(j) for j in jars)


def kafka_tool(main: str, *args: str, timeout_s: float = 600) -> str:
    """Run one of Kafka's command-line tools (class ``main``) to completion; its stdout."""
    cmd = ["java", *_TOOL_JVM, *_LOGGING, "-cp", _classpath(), main, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise RuntimeError(f"{main} {' '.join(args)} exited with {out.returncode}:\n{out.stderr[-4000:]}")
    return out.stdout


class KafkaBroker:
    """One KRaft node (broker and controller) on 127.0.0.1, its log in ``work``; ``bootstrap`` is its address."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port = free_port()
        self.controller_port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> KafkaBroker:
        props = self.work / "server.properties"
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                    f"advertised.listeners=PLAINTEXT://{self.bootstrap}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    f"log.dirs={self.work / 'logs'}",
                    "offsets.topic.replication.factor=1",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    # One consumer joins ConsumerPerformance's group: no point waiting 3 s for others.
                    "group.initial.rebalance.delay.ms=0",
                ]
            )
            + "\n"
        )
        cluster_id = kafka_tool("kafka.tools.StorageTool", "random-uuid").strip()
        kafka_tool("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props))
        self.log = self.work / "broker.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                ["java", *_BROKER_JVM, *_LOGGING, "-cp", _classpath(), "kafka.Kafka", str(props)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait for the listener, not for a fixed time
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self.proc.returncode}:\n{self.log.read_text()[-4000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return self
            time.sleep(0.1)
        raise RuntimeError(f"Kafka did not listen on {self.bootstrap} within 120 s")

    def create_topic(self, name: str, partitions: int) -> None:
        kafka_tool(
            "org.apache.kafka.tools.TopicCommand",
            *("--bootstrap-server", self.bootstrap, "--create", "--topic", name),
            *("--partitions", str(partitions), "--replication-factor", "1"),
        )

    def stop(self) -> None:
        """SIGTERM (controlled shutdown); SIGKILL if it has not exited after 60 s."""
        stop_child(self.proc)


_PP_SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec .*?, ([\d.]+) ms avg latency, ([\d.]+) ms max latency, "
    r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


def producer_performance(
    bootstrap: str,
    topic: str,
    records: int,
    rate: float,
    acks: str,
    props: Mapping[str, str] | None = None,
    *,
    timeout_s: float = 1800,
) -> dict[str, float]:
    """Kafka's ProducerPerformance: ``records`` 100-byte values, null keys, at ``rate`` records/s (-1: no limit).

    ``props`` are producer configs beside ``bootstrap.servers`` and ``acks``
    (:data:`TUNED_PRODUCER`); the rest are the Java producer's defaults
    (idempotent, ``linger.ms=0``, ``batch.size=16384``). Latencies are per
    record, ``send()`` to its acknowledgement, in ms.
    """
    out = kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        *_producer_args(bootstrap, topic, records, rate, acks, props),
        timeout_s=timeout_s,
    )
    m = _PP_SUMMARY.search(out.strip().splitlines()[-1])
    if m is None:
        raise RuntimeError(f"ProducerPerformance printed no summary:\n{out[-2000:]}")
    return {
        "records": int(m[1]),
        "records_per_s": float(m[2]),
        "mean_ms": float(m[3]),
        "max_ms": float(m[4]),
        "p50_ms": float(m[5]),
        "p95_ms": float(m[6]),
        "p99_ms": float(m[7]),
        "p999_ms": float(m[8]),
    }


def _producer_args(
    bootstrap: str, topic: str, records: int, rate: float, acks: str, props: Mapping[str, str] | None
) -> list[str]:
    extra = [f"{k}={v}" for k, v in (props or {}).items()]
    return [
        *("--topic", topic, "--num-records", str(records), "--record-size", str(VALUE_BYTES)),
        *("--throughput", str(round(rate)), "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={acks}"),
        *extra,
    ]


def start_producer_performance(
    bootstrap: str, topic: str, acks: str, props: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """ProducerPerformance as :func:`producer_performance` runs it, with no rate limit and no end: it sends until
    stopped (:func:`~harness.stop_child`), for load of a given length rather than a given count."""
    cmd = ["java", *_TOOL_JVM, *_LOGGING, "-cp", _classpath(), "org.apache.kafka.tools.ProducerPerformance"]
    cmd += _producer_args(bootstrap, topic, 10**12, -1, acks, props)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def consumer_performance(bootstrap: str, topic: str, records: int, *, timeout_s: float = 1800) -> dict[str, float]:
    """Kafka's ConsumerPerformance reading ``records`` records from the earliest offset of ``topic``.

    It subscribes (a consumer group of one member: FindCoordinator, JoinGroup,
    SyncGroup, then fetches); ``records_per_s`` counts the group join,
    ``fetch_records_per_s`` does not.
    """
    out = kafka_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        *("--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records), "--timeout", "120000"),
        timeout_s=timeout_s,
    )
    lines = [ln for ln in out.splitlines() if ln.strip()]
    head = next(i for i, ln in enumerate(lines) if ln.startswith("start.time"))
    names, values = (lines[i].split(",") for i in (head, head + 1))
    row = {k.strip(): v.strip() for k, v in zip(names, values, strict=True)}
    return {
        "records": int(row["data.consumed.in.nMsg"]),
        "records_per_s": float(row["nMsg.sec"]),
        "fetch_records_per_s": float(row["fetch.nMsg.sec"]),
        "rebalance_ms": float(row["rebalance.time.ms"]),
    }
