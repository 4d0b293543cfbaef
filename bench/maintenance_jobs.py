"""Maintenance benchmark: retention cost vs table size, reads and commits before and after compaction.

Prints one JSON document with three parts:

* ``retention`` — for each table size in ``--retention-files`` (one partition,
  that many live files), the time of one ``run_retention`` that removes the
  same ``--retention-remove`` oldest files. The tables are built directly
  with add actions (and checkpointed) so building 10,000 files takes seconds;
  retention only sees the live files and the log, however they got there
  (each file written with pyarrow and the core's ``file_stats``).
  The time should follow the files removed, not the table size.
* ``read`` — records/s reading a whole partition with ``TopicReader.fetch``
  from a topic written as ``--small-commits`` ``TopicWriter`` commits of
  ``--records-per-commit`` records, before and after segment compaction, and
  from as many records written in commits of ``--large-batch`` records.
  ``--build bulk`` adds the same small files 1,000 per commit instead (the
  writer's commits slow down as files pile up, which is the point of the
  next figure, and makes 10,000 of them take long).
* ``commit_latency`` — ``TopicWriter.append`` latency (p50, p90, max and mean over
  ``--latency-commits`` commits of 1,000 records) on the many-file topic,
  then again after segment compaction. delta-rs's commit work grows with the
  live-file count, so compaction is what keeps the ingest path flat.

Segment compaction runs in-process here (``--spark`` runs it as Spark tasks).

Run: ``.venv/bin/python bench/maintenance_jobs.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _spark import spark_session
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.transaction import AddAction
from harness import emit, fill, open_store, records, summary_ms, timed_appends

from logstore.log import tables
from logstore.log.catalog import Catalog
from logstore.log.files import file_stats
from logstore.log.reader import TopicReader
from logstore.log.schema import TOPIC_SCHEMA
from logstore.log.writer import TopicWriter
from maintenance import run_retention, run_segment_compaction

HOUR_MS = 3600 * 1000
FILE_SCHEMA = pa.schema([f for f in TOPIC_SCHEMA if f.name != "partition"])
"""Columns inside a data file (``partition`` lives in the directory name)."""


def bulk_add(catalog: Catalog, name: str, files: Iterator[pa.Table]) -> None:
    """Each of ``files`` (partition 0's records, offsets in order from 0) as one data file, 1,000 files a commit.

    Each commit records partition 0's high watermark, as the writer's do.
    """
    dt = catalog.table(name)
    root = tables.table_path(dt)
    os.makedirs(os.path.join(root, "partition=0"), exist_ok=True)
    chunk: list[AddAction] = []
    hw = 0
    for data in files:
        rel = f"partition=0/part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        data = data.cast(FILE_SCHEMA)
        pq.write_table(data, os.path.join(root, rel), compression="snappy")
        st = os.stat(os.path.join(root, rel))
        chunk.append(AddAction(rel, st.st_size, {"partition": "0"}, int(st.st_mtime * 1000), True, file_stats(data)))
        hw += len(data)
        if len(chunk) == 1000:
            _commit(dt, chunk, hw)
            chunk = []
    if chunk:
        _commit(dt, chunk, hw)
    dt.create_checkpoint()


def _commit(dt: DeltaTable, adds: list[AddAction], hw: int) -> None:
    props = CommitProperties(app_transactions=[Transaction(tables.app_hw(0), hw)])
    dt.create_write_transaction(adds, "append", TOPIC_SCHEMA, ["partition"], commit_properties=props)
    dt.update_incremental()  # the next chunk's hw app transaction must see this one's


def stamped(data: pa.Table, first_offset: int) -> pa.Table:
    """Records from :func:`harness.records` (timestamps set) as a data file holds them, from ``first_offset`` on."""
    n = len(data)
    return pa.table(
        {
            "offset": pa.array(range(first_offset, first_offset + n), pa.int64()),
            "timestamp": data["timestamp"],
            "timestamp_type": pa.array([0] * n, pa.int32()),
            "key": data["key"],
            "value": data["value"],
            "headers": data["headers"],
        }
    )


def bulk_topic(catalog: Catalog, name: str, files: int, old: int, now_ms: int) -> None:
    """A one-partition topic of ``files`` one-record files; the first ``old`` are two hours old."""
    catalog.create_topic(name, 1, {"retention.ms": HOUR_MS})
    bulk_add(
        catalog,
        name,
        (stamped(records(1, timestamp_ms=now_ms - 2 * HOUR_MS if i < old else now_ms), i) for i in range(files)),
    )


def bulk_files(catalog: Catalog, name: str, files: int, per_file: int, rng: np.random.Generator) -> None:
    """``files`` files of ``per_file`` records each on partition 0 of ``name``, added 1,000 files a commit."""
    now_ms = time.time_ns() // 1_000_000
    made = (stamped(records(per_file, rng=rng, timestamp_ms=now_ms), i * per_file) for i in range(files))
    bulk_add(catalog, name, made)


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


def append_latency(writer: TopicWriter, commits: int, rng: np.random.Generator) -> dict[str, float | None]:
    ms = timed_appends(writer, commits, lambda _i: records(1000, rng=rng))
    return summary_ms(ms, percentiles=(50, 90))


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
    catalog = open_store(root).catalog
    rng = np.random.default_rng(7)
    result: dict[str, object] = {"root": root}

    result["retention"] = bench_retention(
        catalog, [int(s) for s in args.retention_files.split(",")], args.retention_remove
    )

    catalog.create_topic("small", 1)
    started = time.perf_counter()
    if args.build == "writer":
        fill(
            TopicWriter(catalog, "small"),
            args.small_commits * args.records_per_commit,
            args.records_per_commit,
            rng=rng,
        )
    else:
        bulk_files(catalog, "small", args.small_commits, args.records_per_commit, rng)
    write_seconds = time.perf_counter() - started
    writer = TopicWriter(catalog, "small")
    latency_before = append_latency(writer, args.latency_commits, rng)
    files_before = catalog.describe_topic("small").partitions[0].num_files

    # The baseline holds as many records as "small" now does, written in large commits.
    total = catalog.describe_topic("small").partitions[0].high_watermark
    catalog.create_topic("large", 1)
    fill(TopicWriter(catalog, "large"), total, args.large_batch, rng=rng)

    read_before = read_all(catalog, "small")

    spark = spark_session() if args.spark else None
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
    emit(result)


if __name__ == "__main__":
    main()
