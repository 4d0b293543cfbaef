"""Spark's side of ``bench/vs_kafka.py``: the readers on both sides' topics, compaction, end to end.

:func:`consume` runs every reader (Spark's Kafka source; the ``logstore``
source, Delta's batch and streaming reads of the same table) before and after
segment compaction, then the end-to-end latency of both sides; the module
docstring of ``bench/vs_kafka.py`` says what each figure is.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _kafka import SPARK_KAFKA_JARS, producer_performance
from _spark import end_to_end, native_reads, source_stream, spark_session, stream_latency, stream_seconds
from harness import median_of, open_store

from logstore.config import load_config
from logstore.log.catalog import Catalog

TOPIC = "bench"
"""The topic both sides' first max-rate produce run filled, which the readers read."""
E2E_TRIGGER_MS = 100
E2E_WARMUP_S = 3.0
E2E_READ_ON_DRIVER = 10_000
"""``maxRecordsReadOnDriver`` of the second logstore end-to-end query of every round."""


# -- Spark consume --------------------------------------------------------------


def _figures(rows: int, seconds: float) -> dict[str, float]:
    return {"rows": rows, "seconds": round(seconds, 3), "records_per_s": round(rows / seconds)}


def consume_round(
    spark: Any, bootstrap: str, root: str, catalog: Catalog, topic: str, scratch: Path
) -> dict[str, dict[str, float]]:
    """One measurement of each reader on ``topic``'s current backlog on both sides (fresh checkpoints)."""
    kafka = _figures(
        *stream_seconds(
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", tempfile.mkdtemp(dir=scratch))
        )
    )
    rows, seconds = stream_seconds(source_stream(spark, root, topic, tempfile.mkdtemp(dir=scratch)))
    native = native_reads(spark, root, topic, catalog.topic_path(topic), tempfile.mkdtemp(dir=scratch))
    return {
        "kafka_source": kafka,
        "source": _figures(rows, seconds),
        "native_delta_read": _figures(rows, native["delta_s"]),
        "source_batch_read": _figures(rows, native["source_batch_s"]),
        "native_delta_stream": _figures(rows, native["delta_stream_s"]),
    }


def consume(
    bootstrap: str, root: str, runs: int, warmup: bool, scratch: Path, e2e_seconds: float, e2e_rate: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Spark consume figures before and after segment compaction, then end to end: (Kafka side, logstore side)."""
    from logstore.spark import delta_jars, unbundled_jars
    from maintenance.job import run_job

    kafka_jars = unbundled_jars(SPARK_KAFKA_JARS)
    if not any("spark-sql-kafka" in j for j in kafka_jars):
        sys.exit(f"no Spark Kafka connector in {SPARK_KAFKA_JARS}: run 'make kafka'")
    spark = spark_session(
        **{
            "spark.app.name": "vs-kafka",
            "spark.jars": ",".join(delta_jars(load_config().spark_jars_dir or None) + kafka_jars),
        }
    )
    try:
        catalog = open_store(root).catalog
        if warmup:  # class loading, code generation, first connections: for every reader, on the warm-up topics
            consume_round(spark, bootstrap, root, catalog, "warmup", scratch)
        before = [consume_round(spark, bootstrap, root, catalog, TOPIC, scratch) for _ in range(runs)]
        files_before = len(catalog.table(TOPIC).file_uris())
        t0 = time.perf_counter()
        report = run_job("compact", catalog, topics=[TOPIC], spark=spark, progress=lambda _line: None)
        compact_s = time.perf_counter() - t0
        if report.errors:
            raise RuntimeError(f"segment compaction failed: {report.errors}")
        files_after = len(catalog.table(TOPIC).file_uris())
        after = [consume_round(spark, bootstrap, root, catalog, TOPIC, scratch) for _ in range(runs)]
        e2e: dict[str, list[dict[str, float]]] = {"kafka": [], "logstore": [], "logstore_read_on_driver": []}
        for i in range(runs if e2e_seconds > 0 else 0):
            e2e["kafka"].append(kafka_end_to_end(spark, bootstrap, f"e2e-{i}", scratch, e2e_seconds, e2e_rate))
            for key, on_driver in (("logstore", 0), ("logstore_read_on_driver", E2E_READ_ON_DRIVER)):
                e2e[key].append(
                    end_to_end(
                        spark, root, e2e_seconds, E2E_TRIGGER_MS, e2e_rate, E2E_WARMUP_S, read_on_driver=on_driver
                    )
                )
                shutil.rmtree(os.path.join(root, "_e2e_checkpoint"), ignore_errors=True)
                with contextlib.suppress(FileNotFoundError):  # the next server creates the topic again
                    shutil.rmtree(catalog.topic_path("e2e"))
    finally:
        spark.stop()

    def med(rounds: list[dict[str, dict[str, float]]], key: str) -> dict[str, float]:
        return median_of([r[key] for r in rounds])

    kafka = {
        "spark_kafka_source": med(before, "kafka_source"),
        "spark_kafka_source_again": med(after, "kafka_source"),
    }
    logstore = {
        "source": med(before, "source"),
        "native_delta_read": med(before, "native_delta_read"),
        "source_batch_read": med(before, "source_batch_read"),
        "native_delta_stream": med(before, "native_delta_stream"),
        "segment_compaction": {
            "seconds": round(compact_s, 2),
            "files_before": files_before,
            "files_after": files_after,
        },
        "source_after_compaction": med(after, "source"),
        "native_delta_read_after_compaction": med(after, "native_delta_read"),
        "source_batch_read_after_compaction": med(after, "source_batch_read"),
        "native_delta_stream_after_compaction": med(after, "native_delta_stream"),
    }
    if e2e["kafka"]:
        kafka["end_to_end"] = median_of(e2e["kafka"])
        logstore["end_to_end"] = median_of(e2e["logstore"])
        logstore["end_to_end_read_on_driver"] = median_of(e2e["logstore_read_on_driver"])
    return kafka, logstore


def kafka_end_to_end(
    spark: Any, bootstrap: str, topic: str, scratch: Path, seconds: float, rate: int
) -> dict[str, float]:
    """ProducerPerformance at ``rate`` records/s (acks=all) → row seen in ``foreachBatch`` of Spark's Kafka source.

    The same measurement as the logstore side (:func:`consume.stream_latency`): ``topic``
    has 2 partitions, CreateTime is the producer's send time, an ``E2E_TRIGGER_MS`` ms
    trigger, the first ``E2E_WARMUP_S`` seconds not counted (they also cover the
    producer JVM's start).
    """
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )

    def warm() -> None:
        producer_performance(bootstrap, topic, 1, -1, "all")

    def produce(_start: float) -> int:
        n = round(rate * (E2E_WARMUP_S + seconds))
        producer_performance(bootstrap, topic, n, rate, "all")
        return n

    out = stream_latency(
        stream,
        tempfile.mkdtemp(dir=scratch),
        warm,
        produce,
        trigger_ms=E2E_TRIGGER_MS,
        warmup_s=E2E_WARMUP_S,
    )
    return {"rate_records_per_s": rate, **out}
