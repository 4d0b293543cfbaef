"""logstore beside Apache Kafka on this machine: produce throughput, produce latency, Spark consume.

Prints one JSON document: ``machine``, ``config``, ``kafka``, ``logstore`` and
``ratios`` (logstore / Kafka, the figures of issue 11's goals). Everything runs
on 127.0.0.1, in temporary directories that are removed at the end, with every
child process stopped, also when a step fails or the run is interrupted.

Kafka side (Apache Kafka 3.9 from ``.cache/kafka``, ``make kafka``): one KRaft
broker+controller (storage formatted with ``kafka.tools.StorageTool``, then
``kafka.Kafka``), measured with Kafka's own tools:

* ``produce_max``: ``ProducerPerformance``, ``--records`` records of 100-byte
  values with null keys, acks=all, no rate limit → records/s and per-record
  latency percentiles (send → acknowledgement);
* ``latency_at_half_max``: ``ProducerPerformance`` at half that rate for
  ``--latency-seconds``, acks=all and acks=1 → p50/p99/p99.9 in ms;
* ``consumer_performance``: ``ConsumerPerformance`` reads the ``produce_max``
  records back → records/s (``records_per_s`` counts the group join,
  ``fetch_records_per_s`` does not).

logstore side (``logstore serve`` on a fresh root, the load generator
of ``bench/_http_load.py``, 1,000-record JSON batches of the same 100-byte
values, null keys):

* ``produce_max``: closed loop, ``--concurrency`` requests in flight, acks=all,
  until ``--records`` records are acknowledged → records/s;
* ``latency_at_half_kafka_max``: open loop at half of *Kafka's* max rate for
  ``--latency-seconds``, acks=all and acks=1 → per-request p50/p99/p99.9 in ms
  (send → answer; an acks=all answer means the records are committed to Delta);
* ``produce_max_arrow``, ``latency_at_half_kafka_max_arrow``: the same with the
  records as Arrow IPC bodies (what the Python ``Producer`` sends).

Consume (unless ``--skip-consume``), one Spark session (``local[2]``), each a
``trigger(availableNow=True)`` query into the ``noop`` sink from the earliest
offset, on the two topics ``produce_max`` filled:

* ``kafka_source``: Spark's Kafka source (``spark-sql-kafka-0-10``, jars from
  ``.cache/spark-kafka``) reading the Kafka topic;
* ``source``: the ``logstore`` source reading the topic produced over HTTP;
* ``native_delta_read``: ``spark.read.format("delta")`` of the same table (a
  batch read: the floor of what reading those files costs);
* ``source_batch_read``: ``spark.read.format("logstore")`` of the same topic
  (the source's read path without a streaming query's start);
* ``native_delta_stream``: ``spark.readStream.format("delta")`` of the same
  table (Delta's own streaming source, query against query);

then the ``compact`` maintenance job (segment compaction, as Spark tasks) runs
on the logstore topic and all of them are measured again (Kafka's topic is
unchanged: the second figure shows the run's drift).

End to end (``--e2e-seconds``, default 20; 0 skips it): records produced at
``--e2e-rate`` records/s (default 10,000) until ``foreachBatch`` of a 100 ms
processing-time query sees them, per record (now - CreateTime), both sides
measured by ``_spark.stream_latency``: Kafka's side produced by
``ProducerPerformance`` (acks=all), read by Spark's Kafka source; logstore's by
100-record acks=all HTTP requests on a fixed schedule, read by the ``logstore``
source; 2 partitions each. Each round measures the ``logstore`` source twice:
as it reads by default (every micro-batch in a Python task) and with
``maxRecordsReadOnDriver`` 10,000 (``end_to_end_read_on_driver``: micro-batches
this small read while Spark plans them, no Python task).

Medians of ``--runs`` runs of every figure. The machine is shared by whatever
else runs on it: read the load averages in ``machine`` before the figures, and
``machine.storage`` and ``machine.storage_end``: what creating a file costs
where the data is kept, at the start and at the end (``bench/harness.py``),
which a commit's cost follows.

    make kafka && .venv/bin/python bench/vs_kafka.py                   # 500k records: ~6 min at load 11 on 2 cores
    .venv/bin/python bench/vs_kafka.py --records 5000000 --runs 3      # on an idle machine
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _http_load import LOAD_GENERATOR, RECORDS, closed_loop, open_loop
from _kafka import KAFKA_VERSION, SPARK_KAFKA_JARS, KafkaBroker, consumer_performance, producer_performance
from _spark import end_to_end, native_reads, source_stream, spark_session, stream_latency, stream_seconds
from harness import (
    VALUE_BYTES,
    LogstoreServer,
    emit,
    load_average,
    machine,
    median_of,
    open_store,
    storage,
)

from logstore.config import load_config
from logstore.log.catalog import Catalog

TOPIC = "bench"
PARTITIONS = 8
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
    from logstore.spark import delta_jars
    from maintenance.job import run_job

    kafka_jars = delta_jars(SPARK_KAFKA_JARS)
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


# -- the run --------------------------------------------------------------------


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def ratios(kafka: dict[str, Any], logstore: dict[str, Any]) -> dict[str, float | None]:
    """logstore / Kafka (and source / native Delta read) for each figure of issue 11's goals table."""
    out: dict[str, float | None] = {
        # goal ≥ 1
        "produce_records_per_s_logstore_over_kafka": _ratio(
            logstore["produce_max"]["records_per_s"], kafka["produce_max"]["records_per_s"]
        ),
    }
    out["produce_records_per_s_logstore_arrow_over_kafka"] = _ratio(
        logstore["produce_max_arrow"]["records_per_s"], kafka["produce_max"]["records_per_s"]
    )
    for acks in ("all", "1"):
        lk, ll = kafka["latency_at_half_max"][f"acks_{acks}"], logstore["latency_at_half_kafka_max"][f"acks_{acks}"]
        la = logstore["latency_at_half_kafka_max_arrow"][f"acks_{acks}"]
        out[f"p50_acks_{acks}_logstore_over_kafka"] = _ratio(ll["p50_ms"], lk["p50_ms"])
        out[f"p99_acks_{acks}_logstore_over_kafka"] = _ratio(ll["p99_ms"], lk["p99_ms"])  # goal ≤ 50 ms / ≤ 20 ms
        out[f"p99_acks_{acks}_logstore_arrow_over_kafka"] = _ratio(la["p99_ms"], lk["p99_ms"])
    if "source" in logstore:
        kafka_src = kafka["spark_kafka_source"]["records_per_s"]
        kafka_again = kafka["spark_kafka_source_again"]["records_per_s"]
        src, src_c = logstore["source"]["records_per_s"], logstore["source_after_compaction"]["records_per_s"]
        out |= {
            "source_over_kafka_source": _ratio(src, kafka_src),
            # goal ≥ 2
            "source_after_compaction_over_kafka_source": _ratio(src_c, kafka_again),
            # goal ≥ 0.9 in every case
            "source_over_native_delta_read": _ratio(src, logstore["native_delta_read"]["records_per_s"]),
            "source_over_native_delta_read_after_compaction": _ratio(
                src_c, logstore["native_delta_read_after_compaction"]["records_per_s"]
            ),
        }
        # The same reads like for like: batch against batch (the read path alone, without a streaming
        # query's start), and query against query (Delta's own streaming source on the same table).
        for suffix in ("", "_after_compaction"):
            out[f"source_batch_read_over_native_delta_read{suffix}"] = _ratio(
                logstore[f"source_batch_read{suffix}"]["records_per_s"],
                logstore[f"native_delta_read{suffix}"]["records_per_s"],
            )
            out[f"source_over_native_delta_stream{suffix}"] = _ratio(
                logstore[f"source{suffix}"]["records_per_s"], logstore[f"native_delta_stream{suffix}"]["records_per_s"]
            )
    if "end_to_end" in logstore:
        ke, le = kafka["end_to_end"], logstore["end_to_end"]
        out["e2e_p50_logstore_over_kafka"] = _ratio(le["p50_ms"], ke["p50_ms"])
        out["e2e_p99_logstore_over_kafka"] = _ratio(le["p99_ms"], ke["p99_ms"])
        ld = logstore["end_to_end_read_on_driver"]
        out["e2e_p50_logstore_read_on_driver_over_kafka"] = _ratio(ld["p50_ms"], ke["p50_ms"])
        out["e2e_p99_logstore_read_on_driver_over_kafka"] = _ratio(ld["p99_ms"], ke["p99_ms"])
    return out


def goals(kafka: dict[str, Any], logstore: dict[str, Any], r: dict[str, float | None]) -> dict[str, bool | None]:
    """Issue 11's goals that this run measures: met or not."""
    lat, arrow = logstore["latency_at_half_kafka_max"], logstore["latency_at_half_kafka_max_arrow"]

    def at_least(x: float | None, floor: float) -> bool | None:
        return None if x is None else x >= floor

    e2e, e2e_driver = logstore.get("end_to_end"), logstore.get("end_to_end_read_on_driver")
    return {
        "end_to_end_p50_at_most_250_ms": None if e2e is None else e2e["p50_ms"] <= 250,
        "end_to_end_p99_at_most_1_s": None if e2e is None else e2e["p99_ms"] <= 1000,
        "end_to_end_p50_at_most_250_ms_read_on_driver": None if e2e_driver is None else e2e_driver["p50_ms"] <= 250,
        "end_to_end_p99_at_most_1_s_read_on_driver": None if e2e_driver is None else e2e_driver["p99_ms"] <= 1000,
        "produce_throughput_at_least_kafka": at_least(r["produce_records_per_s_logstore_over_kafka"], 1.0),
        "produce_throughput_at_least_kafka_arrow": at_least(r["produce_records_per_s_logstore_arrow_over_kafka"], 1.0),
        "acks_all_p99_at_most_50_ms": lat["acks_all"]["p99_ms"] <= 50,
        "acks_1_p99_at_most_20_ms": lat["acks_1"]["p99_ms"] <= 20,
        "acks_all_p99_at_most_50_ms_arrow": arrow["acks_all"]["p99_ms"] <= 50,
        "acks_1_p99_at_most_20_ms_arrow": arrow["acks_1"]["p99_ms"] <= 20,
        "source_after_compaction_at_least_2x_kafka_source": at_least(
            r.get("source_after_compaction_over_kafka_source"), 2.0
        ),
        "source_at_least_0_9x_native_delta_read": None
        if "source_over_native_delta_read" not in r
        else bool(
            at_least(r["source_over_native_delta_read"], 0.9)
            and at_least(r["source_over_native_delta_read_after_compaction"], 0.9)
        ),
    }


def run(args: argparse.Namespace, scratch: Path, stack: contextlib.ExitStack) -> dict[str, Any]:
    info = machine() | {"storage": storage(scratch)}
    records = args.records - args.records % RECORDS  # whole HTTP batches on both sides
    kafka: dict[str, Any] = {
        "version": KAFKA_VERSION,
        "producer": "ProducerPerformance, acks as named, else Kafka 3.9's defaults (linger.ms=0, batch.size=16384)",
        "latency_is": "per record: send() to its acknowledgement",
    }
    logstore: dict[str, Any] = {
        "load_generator": LOAD_GENERATOR + ", 1,000-record JSON requests",
        "server": "logstore serve, default config",
        "latency_is": "per request of 1,000 records: POST to answer",
    }

    broker = KafkaBroker(Path(tempfile.mkdtemp(prefix="kafka-", dir=scratch))).start()
    stack.callback(broker.stop)
    topics = [TOPIC, *(f"{TOPIC}-{i}" for i in range(1, args.runs)), "lat-all", "lat-1", "warmup"]
    topics += [*(f"arrow-{i}" for i in range(args.runs)), "lat-arrow-all", "lat-arrow-1"]
    for name in topics:
        broker.create_topic(name, PARTITIONS)
    for i in range(args.runs if args.e2e_seconds > 0 and not args.skip_consume else 0):
        broker.create_topic(f"e2e-{i}", 2)
    warmup = args.warmup_records - args.warmup_records % RECORDS
    if warmup:  # the broker's JIT, not the measured run, pays for the first records
        producer_performance(broker.bootstrap, "warmup", warmup, -1, "all")
    # Run i writes topic bench-i (run 0: bench): the consume figures read bench, `records` records on both sides.
    maxes = [producer_performance(broker.bootstrap, topics[i], records, -1, "all") for i in range(args.runs)]
    kafka["produce_max"] = median_of(maxes)
    half = kafka["produce_max"]["records_per_s"] / 2
    kafka["latency_at_half_max"] = {
        f"acks_{acks}": median_of(
            [
                producer_performance(broker.bootstrap, f"lat-{acks}", round(half * args.latency_seconds), half, acks)
                for _ in range(args.runs)
            ]
        )
        for acks in ("all", "1")
    }
    kafka["consumer_performance"] = median_of(
        [consumer_performance(broker.bootstrap, TOPIC, records) for _ in range(args.runs)]
    )

    root = tempfile.mkdtemp(prefix="logstore-", dir=scratch)
    server = LogstoreServer(Path(root)).start()
    stack.callback(server.stop)
    for name in topics:
        server.create_topic(name, PARTITIONS)
    if warmup:  # the same for the server: first table loads, first commits
        closed_loop(server.url, "warmup", "all", args.concurrency, requests=warmup // RECORDS)
    maxes = [
        closed_loop(server.url, topics[i], "all", args.concurrency, requests=records // RECORDS)
        for i in range(args.runs)
    ]
    logstore["produce_max"] = median_of(maxes)
    logstore["latency_at_half_kafka_max"] = {
        f"acks_{acks}": median_of(
            [open_loop(server.url, f"lat-{acks}", acks, args.latency_seconds, half / RECORDS) for _ in range(args.runs)]
        )
        for acks in ("all", "1")
    }
    # The same records as Arrow IPC bodies (logstore.wire.arrow_produce), what the Python Producer sends.
    logstore["produce_max_arrow"] = median_of(
        [
            closed_loop(
                server.url, f"arrow-{i}", "all", args.concurrency, requests=records // RECORDS, body_format="arrow"
            )
            for i in range(args.runs)
        ]
    )
    logstore["latency_at_half_kafka_max_arrow"] = {
        f"acks_{acks}": median_of(
            [
                open_loop(
                    server.url, f"lat-arrow-{acks}", acks, args.latency_seconds, half / RECORDS, body_format="arrow"
                )
                for _ in range(args.runs)
            ]
        )
        for acks in ("all", "1")
    }
    # Everything is committed (acks=all, and SIGTERM drains the rest); the readers go to the files directly.
    server.stop()

    if not args.skip_consume:
        kafka_c, logstore_c = consume(
            broker.bootstrap, root, args.runs, warmup > 0, scratch, args.e2e_seconds, args.e2e_rate
        )
        kafka |= kafka_c
        logstore |= logstore_c
    r = ratios(kafka, logstore)
    info["load_average_end"] = load_average()
    info["storage_end"] = storage(scratch)  # the run's own deletions raise it
    return {
        "machine": info,
        "config": {
            "records": records,
            "value_bytes": VALUE_BYTES,
            "keys": None,
            "partitions": PARTITIONS,
            "runs": args.runs,
            "concurrency": args.concurrency,
            "latency_seconds": args.latency_seconds,
            "warmup_records": warmup,
            "spark_master": "local[2]",
            "e2e_seconds": args.e2e_seconds,
            "e2e_rate_records_per_s": args.e2e_rate,
        },
        "kafka": kafka,
        "logstore": logstore,
        "ratios": r,
        "goals_met": goals(kafka, logstore, r),
    }


@contextlib.contextmanager
def _terminate_cleanly() -> Iterator[None]:
    """SIGTERM raises SystemExit, so the ``finally`` blocks stop the children and remove the directories."""

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous: Callable[[int, Any], Any] | int | None = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=500_000, help="records per max-rate produce run (both sides)")
    ap.add_argument("--runs", type=int, default=1, help="runs of every figure; the JSON shows medians")
    ap.add_argument("--latency-seconds", type=float, default=5, help="length of each half-rate latency run")
    ap.add_argument("--concurrency", type=int, default=32, help="HTTP requests in flight at max rate")
    ap.add_argument(
        "--warmup-records", type=int, default=200_000, help="records produced on each side before measuring (0: none)"
    )
    ap.add_argument("--skip-consume", action="store_true", help="no Spark: produce figures only")
    ap.add_argument(
        "--e2e-seconds", type=float, default=20, help="counted seconds of each end-to-end run (0: no end to end)"
    )
    ap.add_argument("--e2e-rate", type=int, default=10_000, help="records/s produced in the end-to-end runs")
    args = ap.parse_args()
    if shutil.which("java") is None:
        sys.exit("java is not on PATH: Kafka and Spark need it")
    with _terminate_cleanly(), contextlib.ExitStack() as stack:
        scratch = Path(tempfile.mkdtemp(prefix="vs-kafka-"))
        # Registered first, so it runs last: after the broker and the server have stopped.
        stack.callback(shutil.rmtree, scratch, ignore_errors=True)
        out = run(args, scratch, stack)
    emit(out)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
