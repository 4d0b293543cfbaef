"""Consume throughput: the `logstore` Spark source against Spark's native Delta read of the same table.

Writes a topic of ``--records`` records with ``--value-bytes`` values through
the `TopicWriter` (``--batch`` records per append, partitions in turn), then in
one Spark session:

* ``source``: ``readStream.format("logstore")`` from earliest with
  ``trigger(availableNow=True)`` into the ``noop`` sink;
* ``delta``: ``read.format("delta")`` of the topic's table into ``noop`` — the limit;
* ``source_batch``: ``read.format("logstore")`` into ``noop``, the same read
  without a streaming query's start (its checkpoint, offset and commit logs and
  the planning process it starts);
* ``delta_stream``: ``readStream.format("delta")`` with ``availableNow`` into
  ``noop``, Delta's own streaming source on the same table;

and prints one JSON object with records/s of each, the CPU each took in Spark's
JVM (``*_jvm_cpu_s``; with the default local master, the executors' too) and in
the Python workers it started (``*_python_cpu_s``), and the ratios: ``ratio``
(source / delta, the issue's figure), ``batch_ratio`` (source_batch / delta:
the read path alone) and ``stream_ratio`` (source / delta_stream: query against
query). Then it
measures end-to-end latency: a `logstore serve` on the same root receives
acks=all produce requests of ``--e2e-batch`` records (CreateTime = send time) at
``--e2e-rate`` records/s for ``--e2e-seconds`` while a streaming query with a
``--trigger-ms`` processing-time trigger reads them; latency = the time
``foreachBatch`` sees a row minus its timestamp.

    .venv/bin/python bench/consume.py                        # 2M records
    .venv/bin/python bench/consume.py --records 20000000     # the target size
    .venv/bin/python bench/consume.py --records 100000 --runs 1 --no-compact --e2e-seconds 20  # end to end
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from logstore.config import load_config
from logstore.log.schema import INPUT_SCHEMA, input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import ProducerBatch


def generate(store: LogStore, topic: str, records: int, partitions: int, value_bytes: int, batch: int) -> float:
    store.create_topic(topic, partitions)
    writer = TopicWriter(store.catalog, topic)
    rng = np.random.default_rng(7)
    t0 = time.perf_counter()
    written = 0
    p = 0
    while written < records:
        n = min(batch, records - written)
        raw = pa.py_buffer(rng.integers(0, 256, n * value_bytes, dtype=np.uint8).tobytes())
        values = pa.FixedSizeBinaryArray.from_buffers(pa.binary(value_bytes), n, [None, raw]).cast(pa.binary())
        t = input_table(pa.array(np.full(n, p, np.int32)), values)
        writer.append([ProducerBatch(t.cast(INPUT_SCHEMA))])
        written += n
        p = (p + 1) % partitions
    return time.perf_counter() - t0


def stream_latency(
    stream: Any,
    checkpoint: str,
    warm: Callable[[], None],
    produce: Callable[[float], int],
    *,
    trigger_ms: int,
    warmup_s: float,
) -> dict[str, Any]:
    """Latency from a record's CreateTime to ``foreachBatch`` seeing it, per record: p50/p99/max in ms.

    ``stream`` is a streaming DataFrame with a ``timestamp`` column; it runs with a
    ``trigger_ms`` processing-time trigger into ``foreachBatch``. ``warm()`` produces
    a record and the query reads it before the clock starts (its first batch starts
    what it needs: Python workers, connections). Then ``produce(start)`` produces
    (CreateTime = send time) and returns the records sent; records created in the
    first ``warmup_s`` seconds after ``start`` (``time.monotonic()``) are not counted.
    Used for both sides of ``bench/vs_kafka.py``, so both are measured alike.
    """
    seen: list[tuple[np.ndarray, float]] = []  # (CreateTime in ms, when foreachBatch saw it in ms)

    def collect(df: Any, _batch_id: int) -> None:
        ts = df.select("timestamp").toArrow().column(0).cast(pa.int64()).to_numpy()  # µs since the epoch
        seen.append((ts / 1000, time.time() * 1000))

    q = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )
    try:
        warm()
        q.processAllAvailable()
        seen.clear()
        start = time.monotonic()
        counted_from_ms = time.time() * 1000 + warmup_s * 1000
        sent = produce(start)
        q.processAllAvailable()
        progress = [p["durationMs"] for p in q.recentProgress if p["numInputRows"] > 0]
    finally:
        q.stop()
    created = np.concatenate([c for c, _ in seen])
    lat = np.concatenate([at - c for c, at in seen])[created >= counted_from_ms]
    return {
        "records_sent": sent,
        "records_seen": len(created),
        "records_counted": len(lat),
        "trigger_ms": trigger_ms,
        "warmup_s": warmup_s,
        "p50_ms": round(float(np.percentile(lat, 50)), 1),
        "p99_ms": round(float(np.percentile(lat, 99)), 1),
        "max_ms": round(float(lat.max()), 1),
        # The last micro-batches (Spark keeps ~100 progress reports) that read records: the median of each phase
        # Spark times (latestOffset, queryPlanning, walCommit, addBatch, commitOffsets, …; triggerExecution is all).
        "micro_batch_ms_p50": {
            k: float(np.median([d.get(k, 0) for d in progress])) for k in sorted({k for d in progress for k in d})
        },
    }


def end_to_end(
    spark: Any,
    root: str,
    seconds: float,
    trigger_ms: int,
    rate: int,
    warmup_s: float,
    per_request: int = 100,
    group: str | None = None,
    partitions: int = 2,
    read_on_driver: int = 0,
) -> dict[str, Any]:
    """Produce over HTTP → row seen in foreachBatch (:func:`stream_latency`), ``rate`` records/s into topic ``e2e``
    of ``partitions`` partitions.

    With ``group`` the query reads as that consumer group (lease and offset commit every micro-batch). With
    ``read_on_driver``, the source's ``maxRecordsReadOnDriver``: micro-batches of at most that many records are
    read while Spark plans them, not in a Python task.

    Open loop (``_http_load.stamped_loop``, in a child process): requests of ``per_request`` records
    (acks=all, CreateTime = send time) leave on a fixed schedule at ``rate`` records/s whatever the
    answers' latency, for ``warmup_s`` + ``seconds``.
    """
    from pathlib import Path

    import httpx
    from _http_load import LogstoreServer, stamped_loop

    srv = LogstoreServer(Path(root), **{"linger.ms": 2}).start()
    try:
        httpx.post(srv.url + "/v1/topics", json={"name": "e2e", "partitions": partitions}).raise_for_status()

        def warm() -> None:
            ms = int(time.time() * 1000)
            httpx.post(srv.url + "/v1/topics/e2e/records", json={"records": [{"value": "x", "timestamp": ms}]})

        acks: dict[str, float] = {}

        def produce(start: float) -> int:
            # From a child process, as Kafka's side produces from ProducerPerformance's JVM: senders in this
            # process would share its GIL with the driver's foreachBatch, which takes the measurement.
            remaining = max(0.0, start + warmup_s + seconds - time.monotonic())
            sent = stamped_loop(srv.url, "e2e", per_request, rate, remaining)
            acks.update(p50_ms=sent["ack_p50_ms"], p99_ms=sent["ack_p99_ms"], failed=sent["failed"])
            return int(sent["records"])

        reader = (
            spark.readStream.format("logstore")
            .option("logstore.root", root)
            .option("subscribe", "e2e")
            .option("startingOffsets", "earliest")
            .option("maxRecordsReadOnDriver", str(read_on_driver))
        )
        stream = (reader.option("group", group) if group else reader).load()
        out = stream_latency(
            stream,
            os.path.join(root, "_e2e_checkpoint"),
            warm,
            produce,
            trigger_ms=trigger_ms,
            warmup_s=warmup_s,
        )
    finally:
        srv.stop()
    named: dict[str, Any] = {"group": group} if group else {}
    if read_on_driver:
        named["max_records_read_on_driver"] = read_on_driver
    return {
        "rate_records_per_s": rate,
        "records_per_request": per_request,
        "partitions": partitions,
        **named,
        **out,
        "produce_ack_ms": acks,  # of the requests: until committed, a record is not there to be read
    }


def stream_seconds(query: Any) -> tuple[int, float]:
    """Run a ``writeStream`` builder with ``availableNow``: rows read, seconds from start() to its end."""
    t0 = time.perf_counter()
    q = query.trigger(availableNow=True).start()
    q.awaitTermination()
    return sum(p["numInputRows"] for p in q.recentProgress), time.perf_counter() - t0


def batch_seconds(frame: Any) -> float:
    """Seconds to read ``frame`` whole into the ``noop`` sink."""
    t0 = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def source_stream(spark: Any, root: str, topic: str, checkpoint: str, max_records: int | None = None) -> Any:
    """``topic`` from earliest through the `logstore` source into ``noop`` (a ``writeStream`` builder)."""
    reader = spark.readStream.format("logstore").option("logstore.root", root).option("subscribe", topic)
    if max_records is not None:
        reader = reader.option("maxRecordsPerPartition", str(max_records))
    return (
        reader.option("startingOffsets", "earliest")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
    )


def spark_cpu_seconds(spark: Any) -> dict[str, float]:
    """CPU (user + system, seconds) used so far by Spark's JVM and by the processes it started, from /proc.

    ``jvm``: the driver's JVM, with a local master its executors too (planning, and
    the tasks' JVM side: a Python data source's Arrow batches made rows, Parquet
    decoded for Delta's reads); ``python``: the processes it started, living or
    ended — its Python workers (a data source's ``read``, a stream's planning
    worker). Only a local master's executors run on this machine.
    """
    jvm = spark.sparkContext._gateway.proc.pid
    parent: dict[int, int] = {}
    times: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):  # ended since it was listed
            fields = stat.read_text().rsplit(")", 1)[1].split()
            pid = int(stat.parent.name)
            parent[pid], times[pid] = int(fields[1]), [int(x) for x in fields[11:15]]  # utime stime cutime cstime

    def started_by_jvm(pid: int) -> bool:
        while pid in parent and pid != jvm:
            pid = parent[pid]
        return pid == jvm

    hz = os.sysconf("SC_CLK_TCK")
    own = times[jvm]
    python = own[2] + own[3] + sum(sum(t) for pid, t in times.items() if pid != jvm and started_by_jvm(pid))
    return {"jvm": (own[0] + own[1]) / hz, "python": python / hz}


def measured(spark: Any, name: str, read: Callable[[], float]) -> dict[str, float]:
    """Run ``read`` (returning its seconds) → ``{name}_s``; its CPU → ``{name}_jvm_cpu_s``, ``{name}_python_cpu_s``.

    CPU is that of every process of :func:`spark_cpu_seconds` over the read, whatever else they did meanwhile.
    """
    before = spark_cpu_seconds(spark)
    seconds = read()
    after = spark_cpu_seconds(spark)
    return {
        f"{name}_s": seconds,
        f"{name}_jvm_cpu_s": round(after["jvm"] - before["jvm"], 2),
        f"{name}_python_cpu_s": round(after["python"] - before["python"], 2),
    }


def native_reads(spark: Any, root: str, topic: str, path: str, checkpoint: str) -> dict[str, float]:
    """Seconds (``{name}_s``) and CPU (:func:`measured`) of the three comparison reads of ``topic``'s table at ``path``.

    Names ``delta``, ``source_batch`` and ``delta_stream``: see the module docstring.
    """
    source_batch = spark.read.format("logstore").option("logstore.root", root).option("subscribe", topic).load()
    delta_stream = spark.readStream.format("delta").load(path).writeStream.format("noop")
    return {
        **measured(spark, "delta", lambda: batch_seconds(spark.read.format("delta").load(path))),
        **measured(spark, "source_batch", lambda: batch_seconds(source_batch)),
        **measured(
            spark, "delta_stream", lambda: stream_seconds(delta_stream.option("checkpointLocation", checkpoint))[1]
        ),
    }


def read_round(spark: Any, root: str, path: str, scratch: str, max_records: int) -> dict[str, float]:
    """One measurement of the source and of the comparison reads of the same table: seconds, records/s, CPU of each."""
    rows = 0

    def source() -> float:
        nonlocal rows
        rows, seconds = stream_seconds(source_stream(spark, root, "bench", tempfile.mkdtemp(dir=scratch), max_records))
        return seconds

    figures = {
        **measured(spark, "source", source),
        **native_reads(spark, root, "bench", path, tempfile.mkdtemp(dir=scratch)),
    }
    out: dict[str, float] = {"rows": rows}
    for name in ("source", "delta", "source_batch", "delta_stream"):
        out[f"{name}_s"] = round(figures[f"{name}_s"], 3)
        out[f"{name}_records_per_s"] = round(rows / figures[f"{name}_s"])
        out[f"{name}_jvm_cpu_s"] = figures[f"{name}_jvm_cpu_s"]
        out[f"{name}_python_cpu_s"] = figures[f"{name}_python_cpu_s"]
    out["ratio"] = round(figures["delta_s"] / figures["source_s"], 3)
    out["batch_ratio"] = round(figures["delta_s"] / figures["source_batch_s"], 3)
    out["stream_ratio"] = round(figures["delta_stream_s"] / figures["source_s"], 3)
    return out


def medians(rounds: list[dict[str, float]]) -> dict[str, Any]:
    """The median of every figure over ``rounds``, and the rounds themselves."""
    out: dict[str, Any] = {k: float(np.median([r[k] for r in rounds])) for k in rounds[0]}
    out["rounds"] = rounds
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--batch", type=int, default=5_000, help="records per TopicWriter.append (one file each)")
    ap.add_argument("--max-records-per-partition", type=int, default=1_000_000, help="records per Spark task")
    ap.add_argument("--runs", type=int, default=3, help="rounds of each read; the JSON shows medians")
    ap.add_argument("--no-compact", action="store_true", help="skip the rounds after segment compaction")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--root", default=None, help="store root (default: a temporary directory, removed after)")
    ap.add_argument("--e2e-seconds", type=float, default=0, help="how long to produce for the latency run (0: none)")
    ap.add_argument("--trigger-ms", type=int, default=100, help="processing-time trigger of the latency query")
    ap.add_argument("--e2e-rate", type=int, default=10_000, help="records/s produced in the latency run")
    ap.add_argument("--e2e-batch", type=int, default=100, help="records per produce request in the latency run")
    ap.add_argument("--e2e-warmup", type=float, default=2, help="seconds at the start of the latency run not counted")
    ap.add_argument("--e2e-partitions", type=int, default=2, help="partitions of the latency run's topic")
    ap.add_argument("--e2e-group", help="read as this consumer group in the latency run (an offset commit per batch)")
    ap.add_argument(
        "--e2e-read-on-driver",
        type=int,
        default=0,
        help="the latency query's maxRecordsReadOnDriver (0: every micro-batch read in Python tasks)",
    )
    args = ap.parse_args()

    root = args.root or tempfile.mkdtemp(prefix="logstore-bench-")
    try:
        store = LogStore(load_config(environ={}, path=None, overrides={"logstore.root": root}))
        gen_s = generate(store, "bench", args.records, args.partitions, args.value_bytes, args.batch)

        from logstore.spark import session
        from maintenance.job import run_job

        spark = session(
            **{
                "spark.master": args.master,
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "2",
                "spark.databricks.delta.snapshotPartitions": "2",
            }
        )
        spark.sparkContext.setLogLevel("ERROR")
        scratch = os.path.join(root, "_bench_checkpoints")
        os.makedirs(scratch)
        path = store.catalog.topic_path("bench")
        out: dict[str, Any] = {
            "load_average_start": [round(x, 2) for x in os.getloadavg()],
            "records": args.records,
            "partitions": args.partitions,
            "value_bytes": args.value_bytes,
            "batch": args.batch,
            "master": args.master,
            "runs": args.runs,
            "generate_s": round(gen_s, 2),
        }
        read_round(spark, root, path, scratch, args.max_records_per_partition)  # warm-up: JIT, Python workers
        out["files"] = len(store.catalog.table("bench").file_uris())
        out["before_compaction"] = medians(
            [read_round(spark, root, path, scratch, args.max_records_per_partition) for _ in range(args.runs)]
        )
        if not args.no_compact:
            t0 = time.perf_counter()
            report = run_job("compact", store.catalog, topics=["bench"], spark=spark, progress=lambda _line: None)
            if report.errors:
                raise RuntimeError(f"segment compaction failed: {report.errors}")
            out["compaction_s"] = round(time.perf_counter() - t0, 2)
            out["files_after_compaction"] = len(store.catalog.table("bench").file_uris())
            out["after_compaction"] = medians(
                [read_round(spark, root, path, scratch, args.max_records_per_partition) for _ in range(args.runs)]
            )
        if args.e2e_seconds > 0:
            out["end_to_end"] = end_to_end(
                spark,
                root,
                args.e2e_seconds,
                args.trigger_ms,
                args.e2e_rate,
                args.e2e_warmup,
                args.e2e_batch,
                args.e2e_group,
                args.e2e_partitions,
                args.e2e_read_on_driver,
            )
        spark.stop()
        out["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(out, indent=2))
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
