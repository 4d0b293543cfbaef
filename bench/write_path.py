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
import os
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from harness import VALUE_BYTES, emit, open_store, records, summary_ms, timed_appends

from logstore.log.schema import TOPIC_SCHEMA
from logstore.log.writer import TopicWriter

PARTITIONS = 8


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


def run_logstore(root: str, batch: pa.Table, commits: int, fsync: bool = True) -> list[float]:
    """Milliseconds of each of ``commits`` appends of ``batch`` into a fresh topic."""
    store = open_store(root, {"commit.fsync": fsync})
    store.create_topic("bench", PARTITIONS)
    w = TopicWriter(store.catalog, "bench")
    ms = timed_appends(w, commits, lambda _i: batch)
    w.close()
    return ms


def run_raw(root: str, batch: pa.Table, commits: int) -> float:
    path = os.path.join(root, "raw")
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
        batch = records(size, partitions=PARTITIONS, rng=rng)
        commits = max(5, min(args.records // size, 2000))
        ls_rates, nofsync_rates, raw_rates = [], [], []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as d:
                ls_rates.append(size * commits / (sum(run_logstore(d, batch, commits)) / 1000))
            with tempfile.TemporaryDirectory() as d:
                nofsync_rates.append(size * commits / (sum(run_logstore(d, batch, commits, fsync=False)) / 1000))
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
    with tempfile.TemporaryDirectory() as d:
        ms = run_logstore(d, records(1_000, partitions=PARTITIONS, rng=rng), args.commits)
    first, last = summary_ms(ms[:100], percentiles=(50,)), summary_ms(ms[-100:], percentiles=(50,))
    out["commit_latency"] = {
        "commits": args.commits,
        "batch_records": 1_000,
        **summary_ms(ms),
        "first_100": first,
        "last_100": last,
        "last_over_first_p50": round(statistics.median(ms[-100:]) / statistics.median(ms[:100]), 2),
    }
    emit(out)


if __name__ == "__main__":
    main()
