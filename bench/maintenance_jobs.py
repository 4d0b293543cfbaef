"""Maintenance benchmark: retention cost vs table size, reads and commits before and after compaction.

Prints one JSON document with three parts:

* ``retention`` — for each table size in ``--retention-files`` (one partition,
  that many live files), the time of one ``run_retention`` that removes the
  same ``--retention-remove`` oldest files. The tables are built directly
  with add actions (and checkpointed) so building 10,000 files takes seconds;
  retention only sees the live files and the log, however they got there.
  The time should follow the files removed, not the table size.
* ``read`` — records/s reading a whole partition with ``TopicReader.fetch``
  from a topic written as ``--small-commits`` ``TopicWriter`` commits of
  ``--records-per-commit`` records, before and after segment compaction, and
  from as many records written in commits of ``--large-batch`` records.
  ``--build bulk`` adds the same small files 1,000 per commit instead (the
  writer's commits slow down as files pile up, which is the point of the
  next figure, and makes 10,000 of them take long).
* ``commit_latency`` — ``TopicWriter.append`` latency (median and p90 over
  ``--latency-commits`` commits of 1,000 records) on the many-file topic,
  then again after segment compaction. delta-rs's commit work grows with the
  live-file count, so compaction is what keeps the ingest path flat.

Segment compaction runs in-process here (``--spark`` runs it as Spark tasks).

Run: ``.venv/bin/python bench/maintenance_jobs.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
from deltalake import CommitProperties, Transaction
from deltalake.transaction import AddAction

from logstore.config import load_config
from logstore.log import tables
from logstore.log.catalog import Catalog
from logstore.log.reader import TopicReader
from logstore.log.schema import TOPIC_SCHEMA, input_table
from logstore.log.writer import TopicWriter
from logstore.structs import ProducerBatch
from maintenance import run_retention, run_segment_compaction
from maintenance._files import write_segment

VALUE_BYTES = 100
HOUR_MS = 3600 * 1000


def records(n: int, rng: np.random.Generator, ts_ms: int | None = None) -> pa.Table:
    values = [bytes(v) for v in rng.integers(0, 256, size=(n, VALUE_BYTES), dtype=np.uint8)]
    return input_table([0] * n, values, timestamps_ms=None if ts_ms is None else [ts_ms] * n)


def bulk_topic(catalog: Catalog, name: str, files: int, old: int, now_ms: int) -> None:
    """A one-partition topic of ``files`` one-record files; the first ``old`` are two hours old."""
    catalog.create_topic(name, 1, {"retention.ms": HOUR_MS})
    dt = catalog.table(name)
    root = tables.table_path(dt)
    chunk: list[AddAction] = []
    for i in range(files):
        ts = now_ms - 2 * HOUR_MS if i < old else now_ms
        t = pa.table(
            {
                "partition": pa.array([0], pa.int32()),
                "offset": pa.array([i], pa.int64()),
                "timestamp": pa.array([ts * 1000], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                "timestamp_type": pa.array([0], pa.int32()),
                "key": pa.array([None], pa.binary()),
                "value": pa.array([b"x" * VALUE_BYTES], pa.binary()),
                "headers": pa.nulls(1, TOPIC_SCHEMA.field("headers").type),
            }
        )
        f = write_segment(root, 0, t)
        chunk.append(AddAction(f.log_path, f.size_bytes, {"partition": "0"}, f.modification_time_ms, True, f.stats))
        if len(chunk) == 1000 or i == files - 1:
            props = CommitProperties(app_transactions=[Transaction(tables.app_hw(0), i + 1)])
            dt.create_write_transaction(chunk, "append", TOPIC_SCHEMA, ["partition"], commit_properties=props)
            dt.update_incremental()  # the next chunk's hw app transaction must see this one's
            chunk = []
    dt.update_incremental()
    dt.create_checkpoint()


def bulk_files(catalog: Catalog, name: str, files: int, per_file: int, rng: np.random.Generator) -> None:
    """``files`` files of ``per_file`` records each on partition 0 of ``name``, added 1,000 files a commit."""
    dt = catalog.table(name)
    root = tables.table_path(dt)
    now_us = time.time_ns() // 1000
    chunk: list[AddAction] = []
    for i in range(files):
        t = records(per_file, rng)
        t = pa.table(
            {
                "offset": pa.array(range(i * per_file, (i + 1) * per_file), pa.int64()),
                "timestamp": pa.array([now_us] * per_file, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                "timestamp_type": pa.array([0] * per_file, pa.int32()),
                "key": t["key"],
                "value": t["value"],
                "headers": t["headers"],
            }
        )
        f = write_segment(root, 0, t)
        chunk.append(AddAction(f.log_path, f.size_bytes, {"partition": "0"}, f.modification_time_ms, True, f.stats))
        if len(chunk) == 1000 or i == files - 1:
            props = CommitProperties(app_transactions=[Transaction(tables.app_hw(0), (i + 1) * per_file)])
            dt.create_write_transaction(chunk, "append", TOPIC_SCHEMA, ["partition"], commit_properties=props)
            dt.update_incremental()  # the next chunk's hw app transaction must see this one's
            chunk = []
    dt.update_incremental()
    dt.create_checkpoint()


def bench_retention(catalog: Catalog, sizes: list[int], remove: int) -> list[dict[str, float]]:
    now_ms = int(time.time() * 1000)
    out = []
    for n in sizes:
        name = f"retention-{n}"
        bulk_topic(catalog, name, n, remove, now_ms)
        started = time.perf_counter()
        (report,) = run_retention(catalog, name, now_ms=now_ms, progress=lambda _: None)
        seconds = time.perf_counter() - started
        assert report.files_removed == remove, report
        out.append({"table_files": n, "files_removed": report.files_removed, "seconds": round(seconds, 3)})
    return out


def read_all(catalog: Catalog, topic: str) -> float:
    """Records/s reading partition 0 from its log start to its high watermark."""
    reader = TopicReader(catalog, topic)
    view = reader.partition_view(0)
    pos, n = view.log_start_offset, 0
    started = time.perf_counter()
    while pos < view.high_watermark:
        recs = reader.fetch(0, pos, max_records=10_000, max_bytes=1 << 30, refresh=False).records
        n += len(recs)
        pos = recs["offset"][-1].as_py() + 1
    seconds = time.perf_counter() - started
    assert n == view.high_watermark - view.log_start_offset
    return n / seconds


def append_latency(writer: TopicWriter, commits: int, rng: np.random.Generator) -> dict[str, float]:
    times = []
    for _ in range(commits):
        batch = [ProducerBatch(records(1000, rng))]
        started = time.perf_counter()
        writer.append(batch)
        times.append(time.perf_counter() - started)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times) * 1000, 2),
        "p90_ms": round(times[int(len(times) * 0.9) - 1] * 1000, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--retention-files", default="1000,10000", help="table sizes (live files), comma-separated")
    ap.add_argument("--retention-remove", type=int, default=100, help="files retention removes in each table")
    ap.add_argument("--small-commits", type=int, default=10_000)
    ap.add_argument("--records-per-commit", type=int, default=10)
    ap.add_argument("--large-batch", type=int, default=100_000, help="records per commit of the baseline topic")
    ap.add_argument("--latency-commits", type=int, default=50)
    ap.add_argument(
        "--build",
        choices=["writer", "bulk"],
        default="writer",
        help="writer: the small files come from TopicWriter commits; bulk: the same files added in 1,000-file commits",
    )
    ap.add_argument("--spark", action="store_true", help="run segment compaction as Spark tasks")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.retention_files, args.retention_remove = "200,1000", 20
        args.small_commits, args.latency_commits = 500, 10

    root = tempfile.mkdtemp(prefix="logstore-bench-")
    catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": root}))
    rng = np.random.default_rng(7)
    result: dict[str, object] = {"root": root}

    result["retention"] = bench_retention(
        catalog, [int(s) for s in args.retention_files.split(",")], args.retention_remove
    )

    catalog.create_topic("small", 1)
    started = time.perf_counter()
    if args.build == "writer":
        w = TopicWriter(catalog, "small")
        for _ in range(args.small_commits):
            w.append([ProducerBatch(records(args.records_per_commit, rng))])
    else:
        bulk_files(catalog, "small", args.small_commits, args.records_per_commit, rng)
    write_seconds = time.perf_counter() - started
    writer = TopicWriter(catalog, "small")
    latency_before = append_latency(writer, args.latency_commits, rng)
    files_before = catalog.describe_topic("small").partitions[0].num_files

    # The baseline holds as many records as "small" now does, written in large commits.
    total = catalog.describe_topic("small").partitions[0].high_watermark
    catalog.create_topic("large", 1)
    large = TopicWriter(catalog, "large")
    for start in range(0, total, args.large_batch):
        large.append([ProducerBatch(records(min(args.large_batch, total - start), rng))])

    read_before = read_all(catalog, "small")

    spark = None
    if args.spark:
        from logstore.spark import session

        spark = session()
    started = time.perf_counter()
    (report,) = run_segment_compaction(catalog, "small", spark=spark, progress=lambda _: None)
    compact_seconds = time.perf_counter() - started
    files_after = catalog.describe_topic("small").partitions[0].num_files
    read_after = max(read_all(catalog, "small") for _ in range(3))
    read_large = max(read_all(catalog, "large") for _ in range(3))
    latency_after = append_latency(writer, args.latency_commits, rng)

    result["read"] = {
        "records": total,
        "small_files_built_by": args.build,
        "small_commits": args.small_commits,
        "records_per_small_commit": args.records_per_commit,
        "build_seconds": round(write_seconds, 1),
        "files_before": files_before,
        "files_after": files_after,
        "compaction_seconds": round(compact_seconds, 2),
        "compaction_files_removed": report.files_removed,
        "records_per_s_before": round(read_before),
        "records_per_s_after": round(read_after),
        "records_per_s_large_batches": round(read_large),
        "speedup_after_compaction": round(read_after / read_before, 1),
        "after_vs_large_batches": round(read_after / read_large, 2),
    }
    result["commit_latency"] = {
        "records_per_commit": 1000,
        "commits": args.latency_commits,
        "many_files": {"live_files": files_before, **latency_before},
        "after_compaction": {"live_files": files_after, **latency_after},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
