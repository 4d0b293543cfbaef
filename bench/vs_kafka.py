"""logstore beside Apache Kafka on this machine: produce throughput, produce latency, Spark consume.

Prints one JSON document: ``machine``, ``config``, ``kafka``, ``logstore``,
``ratios`` (logstore / Kafka, the figures of issue 11's goals), ``goals_met``
and ``kafka_clients_against_both``. Everything runs on 127.0.0.1, in temporary
directories that are removed at the end, with every child process stopped,
also when a step fails or the run is interrupted.

Every produce figure is shown as the median of ``--runs`` runs at the top
level, every run's own figures under ``runs``, and the smallest and largest
of records/s, p50, p99 and p99.9 under ``spread`` ([min, max]): how stable a
p99 is shows there. The sides being compared alternate run by run, so drift
in the machine falls on both.

Kafka side (Apache Kafka 3.9 from ``.cache/kafka``, ``make kafka``): one KRaft
broker+controller (storage formatted with ``kafka.tools.StorageTool``, then
``kafka.Kafka``), measured with Kafka's own ``ProducerPerformance``, 8
partitions, two ways: with Kafka's producer defaults (``defaults``: idempotent,
``linger.ms=0``, ``batch.size=16384``) and tuned for throughput (``tuned``:
``batch.size=262144``, ``linger.ms=5``):

* ``produce_max.{defaults,tuned}``: ``--records`` records of 100-byte values
  with null keys, acks=all, no rate limit → records/s and per-record latency
  percentiles (send → acknowledgement);
* ``latency_at_half_tuned_max.{defaults,tuned}``: at half of the *tuned*
  producer's max rate (``rate_records_per_s``) for ``--latency-seconds``,
  acks=all and acks=1 → p50/p99/p99.9 in ms.

logstore side (``logstore serve`` on a fresh root, the load generator
of ``bench/_http_load.py``, 1,000-record batches of the same 100-byte values,
null keys, as JSON bodies and as Arrow IPC bodies — what the Python
``Producer`` sends):

* ``produce_max.{json,arrow}``: closed loop, ``--concurrency`` requests in
  flight, acks=all, until ``--records`` records are acknowledged → records/s;
* ``latency_at_half_kafka_tuned_max.{json,arrow}``: open loop at the same rate
  as Kafka's latency runs for ``--latency-seconds``, acks=all and acks=1 →
  per-request p50/p99/p99.9 in ms (send → answer; an acks=all answer means the
  records are committed to Delta).

The same client on both (``kafka_clients_against_both``, unless
``--skip-kafka-clients``): Kafka's ``ProducerPerformance`` (acks=all, tuned,
100-byte records, ``--records``) and ``ConsumerPerformance`` (reading those
records back; it subscribes, so it needs the group protocol) against the Kafka
broker and against logstore's Kafka protocol listener (``listeners``, on a free
port of the same ``logstore serve``) → records/s of each and logstore / Kafka.
A tool that fails against a side (a protocol the listener does not serve yet)
shows its ``error`` there, and the ratio is null. ``--only-kafka-clients``
measures this alone: no HTTP load, no Spark, on a node of its own.

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

    make kafka && .venv/bin/python bench/vs_kafka.py      # 5M records, medians of 3: on an idle machine
    .venv/bin/python bench/vs_kafka.py --records 200000 --runs 1 --latency-seconds 2 --skip-consume   # a smoke run
    .venv/bin/python bench/vs_kafka.py --only-kafka-clients --records 1000000 --runs 1   # the listener alone
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _http_load import LOAD_GENERATOR, RECORDS, closed_loop, open_loop
from _kafka import (
    DEFAULT_PRODUCER,
    KAFKA_VERSION,
    TUNED_PRODUCER,
    KafkaBroker,
    consumer_performance,
    producer_performance,
)
from _vs_kafka_spark import TOPIC, consume
from harness import (
    VALUE_BYTES,
    LogstoreServer,
    emit,
    free_port,
    load_average,
    machine,
    median_of,
    storage,
)

PARTITIONS = 8

# -- the run --------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


SPREAD_OF = ("records_per_s", "p50_ms", "p99_ms", "p999_ms")
"""The figures whose smallest and largest value over the runs :func:`measured` shows beside their median."""


def measured(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every figure's median over ``runs``, each run's figures as measured (``runs``), and ``spread``:
    the smallest and largest value of each of :data:`SPREAD_OF` over the runs ([min, max]).

    The medians stay at the top level, so ``x["p99_ms"]`` is the median p99 and
    ``x["spread"]["p99_ms"]`` shows how stable it was.
    """
    spread = {
        k: [round(min(r[k] for r in runs), 2), round(max(r[k] for r in runs), 2)]
        for k in SPREAD_OF
        if all(r.get(k) is not None for r in runs)
    }
    return median_of(runs) | {"spread": spread, "runs": runs}


def kafka_produce(bootstrap: str, records: int, runs: int, latency_seconds: float) -> dict[str, Any]:
    """Kafka's ``ProducerPerformance`` with Kafka's producer defaults and tuned (:data:`TUNED_PRODUCER`), acks=all.

    ``produce_max``: ``records`` records with no rate limit, the two producers
    alternating run by run (defaults run ``i`` writes topic ``bench-i``, run 0
    ``bench``, which the consume figures read; tuned run ``i`` writes
    ``tuned-i``). ``latency_at_half_tuned_max``: both producers at half of the
    *tuned* producer's median max rate for ``latency_seconds``, acks=all and
    acks=1; ``rate_records_per_s`` is that rate (logstore is measured at it too).
    """
    producers = {"defaults": DEFAULT_PRODUCER, "tuned": TUNED_PRODUCER}
    maxes: dict[str, list[dict[str, float]]] = {how: [] for how in producers}
    for i in range(runs):
        for how, props in producers.items():
            topic = (TOPIC if i == 0 else f"{TOPIC}-{i}") if how == "defaults" else f"tuned-{i}"
            maxes[how].append(producer_performance(bootstrap, topic, records, -1, "all", props))
    out: dict[str, Any] = {"produce_max": {how: measured(maxes[how]) for how in producers}}
    half = out["produce_max"]["tuned"]["records_per_s"] / 2
    lat: dict[str, dict[str, list[dict[str, float]]]] = {h: {"acks_all": [], "acks_1": []} for h in producers}
    for _ in range(runs):
        for acks in ("all", "1"):
            for how, props in producers.items():
                n = round(half * latency_seconds)
                lat[how][f"acks_{acks}"].append(
                    producer_performance(bootstrap, f"lat-{how}-{acks}", n, half, acks, props)
                )
    out["latency_at_half_tuned_max"] = {"rate_records_per_s": round(half)} | {
        how: {k: measured(v) for k, v in by_acks.items()} for how, by_acks in lat.items()
    }
    return out


BODY_FORMATS = ("json", "arrow")


def logstore_produce(
    url: str, records: int, runs: int, concurrency: int, latency_seconds: float, rate: float
) -> dict[str, Any]:
    """logstore serve over HTTP: JSON and Arrow bodies (alternating run by run), acks=all.

    ``produce_max``: closed loop, ``concurrency`` 1,000-record requests in
    flight until ``records`` are acknowledged (JSON run ``i`` writes ``bench-i``,
    run 0 ``bench``, which the consume figures read; Arrow ``arrow-i``).
    ``latency_at_half_kafka_tuned_max``: open loop at ``rate`` records/s (half
    of tuned Kafka's max) for ``latency_seconds``, acks=all and acks=1.
    """
    maxes: dict[str, list[dict[str, Any]]] = {f: [] for f in BODY_FORMATS}
    for i in range(runs):
        for fmt in BODY_FORMATS:
            topic = (TOPIC if i == 0 else f"{TOPIC}-{i}") if fmt == "json" else f"arrow-{i}"
            maxes[fmt].append(closed_loop(url, topic, "all", concurrency, requests=records // RECORDS, body_format=fmt))
    lat: dict[str, dict[str, list[dict[str, Any]]]] = {f: {"acks_all": [], "acks_1": []} for f in BODY_FORMATS}
    for _ in range(runs):
        for acks in ("all", "1"):
            for fmt in BODY_FORMATS:
                lat[fmt][f"acks_{acks}"].append(
                    open_loop(url, f"lat-{fmt}-{acks}", acks, latency_seconds, rate / RECORDS, body_format=fmt)
                )
    return {
        "produce_max": {fmt: measured(v) for fmt, v in maxes.items()},
        "latency_at_half_kafka_tuned_max": {"rate_records_per_s": round(rate)}
        | {fmt: {k: measured(v) for k, v in by_acks.items()} for fmt, by_acks in lat.items()},
    }


def _attempt(measure: Callable[[], dict[str, float]]) -> dict[str, Any]:
    """``measure()``, or ``{"error": …}`` when the tool failed or timed out (a door that does not serve it yet)."""
    try:
        return measure()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        text = str(e).strip()
        return {"error": text if len(text) <= 1500 else text[:300] + " … " + text[-1200:]}


def same_client(kafka: str, listener: str, records: int, runs: int, consumer_timeout_s: float) -> dict[str, Any]:
    """Kafka's own clients against Kafka and against logstore's Kafka protocol listener, alternating run by run.

    ``producer_performance``: ``ProducerPerformance``, acks=all, :data:`TUNED_PRODUCER`,
    ``records`` 100-byte records into topic ``kc-i`` (8 partitions) of each side.
    ``consumer_performance``: ``ConsumerPerformance`` reading ``kc-0`` whole on
    each side (it subscribes, so it needs the group protocol: a side that does
    not serve it shows ``error``, and its ratio is null). ``ratios``: logstore's
    records/s over Kafka's.
    """
    sides = {"kafka": kafka, "logstore": listener}
    prod: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    cons: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    for i in range(runs):
        for side, bootstrap in sides.items():
            topic = f"kc-{i}"
            prod[side].append(
                _attempt(lambda b=bootstrap, t=topic: producer_performance(b, t, records, -1, "all", TUNED_PRODUCER))
            )
    for _ in range(runs):
        for side, bootstrap in sides.items():
            if cons[side] and "error" in cons[side][-1]:
                continue  # it failed once: it fails again, and each try may cost the timeout
            cons[side].append(
                _attempt(lambda b=bootstrap: consumer_performance(b, "kc-0", records, timeout_s=consumer_timeout_s))
            )

    def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
        ok = [r for r in results if "error" not in r]
        return measured(ok) if len(ok) == len(results) else {"error": results[-1]["error"], "runs": results}

    out: dict[str, Any] = {
        "producer": "ProducerPerformance, acks=all, " + ", ".join(f"{k}={v}" for k, v in TUNED_PRODUCER.items()),
        "producer_performance": {s: summary(r) for s, r in prod.items()},
        "consumer_performance": {s: summary(r) for s, r in cons.items()},
    }
    out["ratios"] = {
        f"{tool}_records_per_s_logstore_over_kafka": _ratio(
            out[tool]["logstore"].get("records_per_s"), out[tool]["kafka"].get("records_per_s")
        )
        for tool in ("producer_performance", "consumer_performance")
    }
    return out


def ratios(kafka: dict[str, Any], logstore: dict[str, Any]) -> dict[str, float | None]:
    """logstore / Kafka (defaults and tuned), and source / native Delta read, for each figure of the goals."""
    out: dict[str, float | None] = {}
    for fmt in BODY_FORMATS:
        for how in ("defaults", "tuned"):  # goal ≥ 1
            out[f"produce_records_per_s_logstore_{fmt}_over_kafka_{how}"] = _ratio(
                logstore["produce_max"][fmt]["records_per_s"], kafka["produce_max"][how]["records_per_s"]
            )
    for acks in ("all", "1"):
        for fmt in BODY_FORMATS:
            ll = logstore["latency_at_half_kafka_tuned_max"][fmt][f"acks_{acks}"]
            for how in ("defaults", "tuned"):
                lk = kafka["latency_at_half_tuned_max"][how][f"acks_{acks}"]
                for q in ("p50", "p99"):
                    key = f"{q}_acks_{acks}_logstore_{fmt}_over_kafka_{how}"
                    out[key] = _ratio(ll[f"{q}_ms"], lk[f"{q}_ms"])
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


def goals(logstore: dict[str, Any], r: dict[str, float | None]) -> dict[str, bool | None]:
    """Issue 11's goals that this run measures: met or not (throughput against Kafka tuned and with its defaults)."""
    lat = logstore["latency_at_half_kafka_tuned_max"]

    def at_least(x: float | None, floor: float) -> bool | None:
        return None if x is None else x >= floor

    e2e, e2e_driver = logstore.get("end_to_end"), logstore.get("end_to_end_read_on_driver")
    out: dict[str, bool | None] = {
        "end_to_end_p50_at_most_250_ms": None if e2e is None else e2e["p50_ms"] <= 250,
        "end_to_end_p99_at_most_1_s": None if e2e is None else e2e["p99_ms"] <= 1000,
        "end_to_end_p50_at_most_250_ms_read_on_driver": None if e2e_driver is None else e2e_driver["p50_ms"] <= 250,
        "end_to_end_p99_at_most_1_s_read_on_driver": None if e2e_driver is None else e2e_driver["p99_ms"] <= 1000,
    }
    for fmt in BODY_FORMATS:
        for how in ("defaults", "tuned"):
            key = f"produce_records_per_s_logstore_{fmt}_over_kafka_{how}"
            out[f"produce_throughput_{fmt}_at_least_kafka_{how}"] = at_least(r[key], 1.0)
        p99_all, p99_1 = lat[fmt]["acks_all"]["p99_ms"], lat[fmt]["acks_1"]["p99_ms"]
        out[f"acks_all_p99_at_most_50_ms_{fmt}"] = None if p99_all is None else p99_all <= 50
        out[f"acks_1_p99_at_most_20_ms_{fmt}"] = None if p99_1 is None else p99_1 <= 20
    out["source_after_compaction_at_least_2x_kafka_source"] = at_least(
        r.get("source_after_compaction_over_kafka_source"), 2.0
    )
    out["source_at_least_0_9x_native_delta_read"] = (
        None
        if "source_over_native_delta_read" not in r
        else bool(
            at_least(r["source_over_native_delta_read"], 0.9)
            and at_least(r["source_over_native_delta_read_after_compaction"], 0.9)
        )
    )
    return out


def run(args: argparse.Namespace, scratch: Path, stack: contextlib.ExitStack) -> dict[str, Any]:
    info = machine() | {"storage": storage(scratch)}
    records = args.records - args.records % RECORDS  # whole HTTP batches on both sides
    kafka: dict[str, Any] = {
        "version": KAFKA_VERSION,
        "producers": {
            "defaults": "ProducerPerformance, acks as named, else Kafka 3.9's producer defaults "
            "(idempotent, linger.ms=0, batch.size=16384)",
            "tuned": "the same with " + ", ".join(f"{k}={v}" for k, v in TUNED_PRODUCER.items()),
        },
        "latency_is": "per record: send() to its acknowledgement",
    }
    logstore: dict[str, Any] = {
        "load_generator": LOAD_GENERATOR + ", 1,000-record JSON or Arrow requests",
        "server": "logstore serve, default config",
        "latency_is": "per request of 1,000 records: POST to answer",
    }

    broker = KafkaBroker(Path(tempfile.mkdtemp(prefix="kafka-", dir=scratch))).start()
    stack.callback(broker.stop)
    topics = [TOPIC, *(f"{TOPIC}-{i}" for i in range(1, args.runs)), "warmup"]
    topics += [*(f"{p}-{i}" for p in ("tuned", "arrow", "kc") for i in range(args.runs))]
    topics += [f"lat-{how}-{acks}" for how in ("defaults", "tuned", *BODY_FORMATS) for acks in ("all", "1")]
    if args.only_kafka_clients:
        topics = ["warmup", *(f"kc-{i}" for i in range(args.runs))]
    for name in topics:
        broker.create_topic(name, PARTITIONS)
    for i in range(args.runs if args.e2e_seconds > 0 and not (args.skip_consume or args.only_kafka_clients) else 0):
        broker.create_topic(f"e2e-{i}", 2)
    warmup = args.warmup_records - args.warmup_records % RECORDS
    if warmup:  # the broker's JIT, not the measured run, pays for the first records
        producer_performance(broker.bootstrap, "warmup", warmup, -1, "all", TUNED_PRODUCER)
    if args.only_kafka_clients:
        return _kafka_clients_only(args, info, broker, scratch, stack, topics, records, warmup)
    kafka |= kafka_produce(broker.bootstrap, records, args.runs, args.latency_seconds)
    half = kafka["latency_at_half_tuned_max"]["rate_records_per_s"]

    root = tempfile.mkdtemp(prefix="logstore-", dir=scratch)
    listener = f"127.0.0.1:{free_port()}"
    # The broker's setting (bench/_kafka.py): ConsumerPerformance's first join is not held back 3 s on either side.
    no_join_delay = {"group.initial.rebalance.delay.ms": 0}
    server = LogstoreServer(Path(root), listeners=f"PLAINTEXT://{listener}", **no_join_delay).start()
    stack.callback(server.stop)
    for name in topics:
        server.create_topic(name, PARTITIONS)
    if warmup:  # the same for the server: first table loads, first commits
        closed_loop(server.url, "warmup", "all", args.concurrency, requests=warmup // RECORDS)
    logstore |= logstore_produce(server.url, records, args.runs, args.concurrency, args.latency_seconds, half)
    kafka_clients = None
    if not args.skip_kafka_clients:
        if warmup:  # the listener's first batches, on the warm-up topic
            producer_performance(listener, "warmup", warmup, -1, "all", TUNED_PRODUCER)
        kafka_clients = same_client(broker.bootstrap, listener, records, args.runs, args.consumer_timeout_seconds)
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
        "goals_met": goals(logstore, r),
        "kafka_clients_against_both": kafka_clients,
    }


def _kafka_clients_only(
    args: argparse.Namespace,
    info: dict[str, Any],
    broker: KafkaBroker,
    scratch: Path,
    stack: contextlib.ExitStack,
    topics: list[str],
    records: int,
    warmup: int,
) -> dict[str, Any]:
    """``--only-kafka-clients``: the same-client section alone (no HTTP load, no Spark)."""
    listener = f"127.0.0.1:{free_port()}"
    root = tempfile.mkdtemp(prefix="logstore-", dir=scratch)
    server = LogstoreServer(
        Path(root), listeners=f"PLAINTEXT://{listener}", **{"group.initial.rebalance.delay.ms": 0}
    ).start()
    stack.callback(server.stop)
    for name in topics:
        server.create_topic(name, PARTITIONS)
    if warmup:  # the listener's first batches and commits, on the warm-up topic
        producer_performance(listener, "warmup", warmup, -1, "all", TUNED_PRODUCER)
    kafka_clients = same_client(broker.bootstrap, listener, records, args.runs, args.consumer_timeout_seconds)
    info["load_average_end"] = load_average()
    return {
        "machine": info,
        "config": {"records": records, "value_bytes": VALUE_BYTES, "keys": None, "partitions": PARTITIONS}
        | {"runs": args.runs, "warmup_records": warmup},
        "kafka_clients_against_both": kafka_clients,
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
    ap.add_argument("--records", type=int, default=5_000_000, help="records per max-rate produce run (both sides)")
    ap.add_argument(
        "--runs", type=int, default=3, help="runs of every figure; the JSON shows medians (and every run's produce)"
    )
    ap.add_argument("--latency-seconds", type=float, default=5, help="length of each half-rate latency run")
    ap.add_argument("--concurrency", type=int, default=32, help="HTTP requests in flight at max rate")
    ap.add_argument(
        "--warmup-records", type=int, default=200_000, help="records produced on each side before measuring (0: none)"
    )
    ap.add_argument("--skip-consume", action="store_true", help="no Spark: produce figures only")
    ap.add_argument(
        "--skip-kafka-clients",
        action="store_true",
        help="no ProducerPerformance/ConsumerPerformance against logstore's Kafka listener",
    )
    ap.add_argument(
        "--only-kafka-clients",
        action="store_true",
        help="only ProducerPerformance/ConsumerPerformance against both (no HTTP load, no Spark)",
    )
    ap.add_argument(
        "--consumer-timeout-seconds",
        type=float,
        default=300,
        help="how long one ConsumerPerformance may take before it counts as failed",
    )
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
