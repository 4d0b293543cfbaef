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
import os
import shutil
import tempfile
import time
from typing import Any

import numpy as np
from _spark import end_to_end, measured, native_reads, source_stream, spark_session, stream_seconds
from harness import emit, fill, load_average, median_of, open_store

from logstore.log.writer import TopicWriter


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
    return {**median_of(rounds, digits=3), "rounds": rounds}


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
        store = open_store(root)
        store.create_topic("bench", args.partitions)
        writer = TopicWriter(store.catalog, "bench")
        gen_s = fill(
            writer, args.records, args.batch, rotate=True, value_bytes=args.value_bytes, rng=np.random.default_rng(7)
        )
        writer.close()

        from maintenance.job import run_job

        spark = spark_session(args.master)
        scratch = os.path.join(root, "_bench_checkpoints")
        os.makedirs(scratch)
        path = store.catalog.topic_path("bench")
        out: dict[str, Any] = {
            "load_average_start": load_average(),
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
        out["load_average_end"] = load_average()
        emit(out)
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
