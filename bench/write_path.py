"""Write-path benchmark: TopicWriter vs raw delta-rs appends of the same records.

Prints one JSON document. For each batch size (records per commit) it writes
the same 100-byte-value records twice, into fresh tables:

* ``logstore``: through :class:`logstore.log.writer.TopicWriter` (offset
  assignment, fencing and high-watermark app transactions, group commit);
* ``raw``: ``write_deltalake(..., mode="append")`` of the same Arrow table with
  offsets precomputed — the limit the writer is measured against. delta-rs
  does not fsync; the writer does by default (``commit.fsync``), so the writer
  is measured both ways.

Each figure is the median of ``--runs`` runs. Commit latency is measured over
``--commits`` commits of 1,000 records, with the first and last 100 compared
to show it stays flat as the log grows (checkpoints every 100 commits).

Run: ``.venv/bin/python bench/write_path.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from logstore.config import load_config
from logstore.log.catalog import Catalog
from logstore.log.schema import TOPIC_SCHEMA, input_table
from logstore.log.writer import TopicWriter
from logstore.structs import ProducerBatch

VALUE_BYTES = 100
PARTITIONS = 8


def make_batch(n: int, rng: np.random.Generator) -> pa.Table:
    values = rng.integers(0, 256, size=(n, VALUE_BYTES), dtype=np.uint8)
    value_arr = pa.array([bytes(v) for v in values], pa.binary())
    parts = pa.array(np.arange(n, dtype=np.int32) % PARTITIONS, pa.int32())
    return input_table(parts, value_arr)


def raw_table(batch: pa.Table, base: np.ndarray) -> pa.Table:
    parts = batch["partition"].to_numpy()
    order = np.argsort(parts, kind="stable")
    counts = np.bincount(parts, minlength=PARTITIONS)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sp = parts[order]
    offsets = base[sp] + np.arange(len(parts)) - starts[sp]
    sorted_batch = batch.take(pa.array(order))
    now = pa.scalar(time.time_ns() // 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return pa.Table.from_arrays(
        [
            sorted_batch["partition"],
            pa.array(offsets, pa.int64()),
            pa.repeat(now, len(parts)),
            pa.repeat(pa.scalar(0, pa.int32()), len(parts)),
            sorted_batch["key"],
            sorted_batch["value"],
            sorted_batch["headers"],
        ],
        schema=TOPIC_SCHEMA,
    )


def run_logstore(root: str, batch: pa.Table, commits: int, fsync: bool = True) -> tuple[float, list[float]]:
    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": root, "commit.fsync": fsync}))
    catalog.create_topic("bench", PARTITIONS)
    w = TopicWriter(catalog, "bench")
    lat = []
    start = time.perf_counter()
    for _ in range(commits):
        t0 = time.perf_counter()
        w.append([ProducerBatch(batch)])
        lat.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    w.close()
    return elapsed, lat


def run_raw(root: str, batch: pa.Table, commits: int) -> float:
    path = os.path.join(root, "raw")
    from deltalake import DeltaTable

    DeltaTable.create(path, TOPIC_SCHEMA, partition_by=["partition"])
    dt = DeltaTable(path)
    base = np.zeros(PARTITIONS, np.int64)
    counts = np.bincount(batch["partition"].to_numpy(), minlength=PARTITIONS)
    start = time.perf_counter()
    for _ in range(commits):
        write_deltalake(dt, raw_table(batch, base), partition_by=["partition"], mode="append")
        base += counts
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--commits", type=int, default=1000, help="commits for the latency series")
    ap.add_argument("--records", type=int, default=2_000_000, help="records per throughput run")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.commits, args.records = 1, 200, 200_000
    rng = np.random.default_rng(1)
    out: dict[str, object] = {"value_bytes": VALUE_BYTES, "partitions": PARTITIONS, "runs": args.runs, "throughput": []}
    for size in (1_000, 10_000, 100_000):
        batch = make_batch(size, rng)
        commits = max(5, min(args.records // size, 2000))
        ls_rates, nofsync_rates, raw_rates = [], [], []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as d:
                elapsed, _lat = run_logstore(d, batch, commits)
                ls_rates.append(size * commits / elapsed)
            with tempfile.TemporaryDirectory() as d:
                elapsed, _lat = run_logstore(d, batch, commits, fsync=False)
                nofsync_rates.append(size * commits / elapsed)
            with tempfile.TemporaryDirectory() as d:
                raw_rates.append(size * commits / run_raw(d, batch, commits))
        ls, raw = statistics.median(ls_rates), statistics.median(raw_rates)
        nofsync = statistics.median(nofsync_rates)
        out["throughput"].append(  # type: ignore[union-attr]
            {
                "batch_records": size,
                "commits": commits,
                "logstore_records_per_s": round(ls),
                "logstore_mb_per_s": round(ls * VALUE_BYTES / 1e6, 1),
                "raw_records_per_s": round(raw),
                "raw_mb_per_s": round(raw * VALUE_BYTES / 1e6, 1),
                "ratio_to_raw": round(ls / raw, 3),
                "logstore_no_fsync_records_per_s": round(nofsync),
                "no_fsync_ratio_to_raw": round(nofsync / raw, 3),
            }
        )
    batch = make_batch(1_000, rng)
    with tempfile.TemporaryDirectory() as d:
        _, lat = run_logstore(d, batch, args.commits)
    ms = np.array(lat) * 1000
    first, last = ms[:100], ms[-100:]
    out["commit_latency_ms"] = {
        "commits": args.commits,
        "batch_records": 1_000,
        "p50": round(float(np.percentile(ms, 50)), 2),
        "p99": round(float(np.percentile(ms, 99)), 2),
        "first_100_p50": round(float(np.percentile(first, 50)), 2),
        "last_100_p50": round(float(np.percentile(last, 50)), 2),
        "last_over_first_p50": round(float(np.percentile(last, 50) / np.percentile(first, 50)), 2),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
