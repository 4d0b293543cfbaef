"""Offsets benchmark: reading the latest committed offsets at many commits, before and after compaction.

Builds ``<root>/_offsets`` with ``--commits`` commits in all: most of them
bulk-written (``--bulk-file-rows`` rows per file, one Delta commit per file,
numbered like real commits), then ``--small-commits`` real
``OffsetsStore.commit`` calls (one file each, as a streaming query makes them).
The commits go round-robin over ``--groups`` groups times ``--partitions``
partitions of one topic.

Prints one JSON document: the latency of each real commit (p50, p99) beside
the same commit made by delta-rs's ``write_deltalake`` in the same table
(``--delta-rs-commits``), and their ratio; the latency of ``OffsetsStore.committed()`` from a
new store (a process starting, reading the whole table: median of
``--repeat``), before and after the ``offsets`` maintenance job compacts the
table to ``offsets.history.commits`` (``--keep``) commits per key, their
ratio, the files and rows before and after, and how long compaction took.

Run: ``.venv/bin/python bench/offsets.py`` (about half a minute);
``--commits 1000000`` for the full figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from harness import emit, summary_ms

from logstore.groups.offsets import OFFSETS_SCHEMA, OffsetsStore, app_offsets
from logstore.log.tables import sync_commits
from maintenance.offsets import run_offsets_compaction

TOPIC = "orders"


def bulk_rows(first_commit: int, n: int, groups: int, partitions: int) -> pa.Table:
    """Commits ``first_commit`` … ``first_commit + n - 1``, one row each, round-robin over the keys."""
    i = np.arange(first_commit, first_commit + n, dtype=np.int64)
    key = i % (groups * partitions)
    seq = i // (groups * partitions)  # each group commits once per round of its partitions
    now_us = time.time_ns() // 1000
    return pa.Table.from_arrays(
        [
            pa.array([f"group-{g}" for g in key // partitions], pa.string()),
            pa.array(np.full(n, TOPIC), pa.string()),
            pa.array((key % partitions).astype(np.int32)),
            pa.array(seq * 100),
            pa.array(now_us - (first_commit + n - i)).cast(pa.timestamp("us", tz="UTC")),
            pa.nulls(n, pa.string()),
            pa.array(seq),
        ],
        schema=OFFSETS_SCHEMA,
    )


def build(root: str, args: argparse.Namespace) -> list[float]:
    """Write the table; returns the latency (ms) of each real ``OffsetsStore.commit``."""
    store = OffsetsStore(root)
    bulk = max(0, args.commits - args.small_commits)
    keys = args.groups * args.partitions
    bulk -= bulk % keys  # whole rounds, so every group's last number is the same
    path = store.path
    for start in range(0, bulk, args.bulk_file_rows):
        n = min(args.bulk_file_rows, bulk - start)
        last = start + n == bulk
        # The groups' commit numbers, as real commits record them, so the real commits that follow continue them.
        txns = [Transaction(app_offsets(f"group-{g}"), bulk // keys - 1) for g in range(args.groups)] if last else []
        write_deltalake(
            path,
            bulk_rows(start, n, args.groups, args.partitions),
            mode="append",
            commit_properties=CommitProperties(app_transactions=txns),
        )
    times = []
    for i in range(args.small_commits):
        g, p = divmod(i % keys, args.partitions)
        started = time.perf_counter()
        store.commit(f"group-{g}", TOPIC, {p: (bulk // keys + i // keys) * 100})
        times.append((time.perf_counter() - started) * 1000)
    return times


def delta_rs_commit_ms(root: str, n: int) -> list[float]:
    """The limit a commit is measured against: the same one-row commit with its app transaction, by delta-rs.

    ``write_deltalake`` into the same table (a group of its own, so the real
    groups' numbers are untouched), fsynced as ``OffsetsStore`` makes its
    commits durable.
    """
    path = os.path.join(root, "_offsets")
    dt = DeltaTable(path)
    times = []
    for seq in range(n):
        row = bulk_rows(0, 1, 1, 1).set_column(0, "group", pa.array(["bench-delta-rs"]))
        started = time.perf_counter()
        dt.update_incremental()
        first = dt.version() + 1
        write_deltalake(
            dt,
            row,
            mode="append",
            commit_properties=CommitProperties(app_transactions=[Transaction(app_offsets("bench-delta-rs"), seq)]),
        )
        sync_commits(path, first)
        times.append((time.perf_counter() - started) * 1000)
    return times


def latency_ms(root: str, repeat: int) -> tuple[float, dict[tuple[str, str, int], tuple[int, int, str | None]]]:
    times, latest = [], {}
    for _ in range(repeat):
        started = time.perf_counter()
        latest = OffsetsStore(root).committed()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), latest


def table_shape(root: str) -> dict[str, int]:
    dt = DeltaTable(os.path.join(root, "_offsets"))
    actions = pa.table(dt.get_add_actions(flatten=True))
    return {"files": actions.num_rows, "rows": int(sum(actions["num_records"].to_pylist()))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commits", type=int, default=100_000, help="offset commits in all")
    p.add_argument("--small-commits", type=int, default=500, help="of those, real one-file commits at the end")
    p.add_argument("--bulk-file-rows", type=int, default=250_000, help="rows per bulk-written file")
    p.add_argument("--groups", type=int, default=20)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--keep", type=int, default=10, help="offsets.history.commits for the compaction")
    p.add_argument(
        "--delta-rs-commits", type=int, default=50, help="commits by delta-rs's write_deltalake, the comparison"
    )
    p.add_argument("--repeat", type=int, default=3, help="reads per measurement (median)")
    p.add_argument("--root", help="store directory (default: a temporary one)")
    args = p.parse_args()
    root = args.root or tempfile.mkdtemp(prefix="bench-offsets-")

    started = time.perf_counter()
    commit_times = build(root, args)
    built_s = time.perf_counter() - started
    limit_times = delta_rs_commit_ms(root, args.delta_rs_commits)
    before_shape = table_shape(root)
    before_ms, before = latency_ms(root, args.repeat)

    started = time.perf_counter()
    run_offsets_compaction(root, keep=args.keep, progress=lambda _: None)
    compaction_s = time.perf_counter() - started
    after_shape = table_shape(root)
    after_ms, after = latency_ms(root, args.repeat)
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}, "compaction changed offsets"

    emit(
        {
            "commits": before_shape["rows"],
            "small_commits": args.small_commits,
            "keys": len(after),
            "keep": args.keep,
            "build_s": round(built_s, 2),
            "commit": summary_ms(commit_times) if commit_times else None,
            "delta_rs_commit": summary_ms(limit_times) if limit_times else None,
            "commit_p50_over_delta_rs": (
                round(statistics.median(commit_times) / statistics.median(limit_times), 3)
                if commit_times and limit_times
                else None
            ),
            "before": before_shape | {"committed_ms": round(before_ms, 2)},
            "compaction_s": round(compaction_s, 2),
            "after": after_shape | {"committed_ms": round(after_ms, 2)},
            "speedup": round(before_ms / after_ms, 1) if after_ms else None,
        }
    )


if __name__ == "__main__":
    main()
