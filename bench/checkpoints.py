"""Checkpoint cost: CPU per small commit into a topic table that holds many data files.

A Delta checkpoint rewrites the table's whole state, one action per data file,
and delta-rs first replays the commits since the previous one. A topic fed by
small requests gathers files until the ``compact`` job runs (at 10,000
records/s in 100-record requests over 4 partitions: 400 files a second), so a
checkpoint every ``checkpoint.interval`` commits would cost more CPU per commit
as the table grows. The core writer spaces checkpoints of ``n`` actions at
least ``n / 100`` commits apart (``logstore/log/_append.py``).

For each ``--files`` size, one table is filled with that many files (4
partitions, checkpointed once), then ``--commits`` commits of 100 records are
timed three ways, alternating, ``--runs`` times each, each on a copy of the
filled table:

* ``no_checkpoints``: checkpoints off (``checkpoint.interval`` past the run) —
  the floor;
* ``logstore``: the default policy;
* ``every_interval``: a checkpoint every 100 commits whatever the table's size
  (the policy without the spacing).

CPU is the process's (the committing thread, fsync and checkpoint threads and
delta-rs's own); the ratios are over the floor. Prints one JSON document.

Run: ``.venv/bin/python bench/checkpoints.py`` (``--files 4000,40000``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from unittest import mock

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from logstore.config import load_config
from logstore.log import _append as _log_append
from logstore.log.catalog import Catalog
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.structs import ProducerBatch

PARTITIONS = 4
RECORDS = 100
INTERVAL = 100


def _batch() -> list[ProducerBatch]:
    parts = pa.array(np.arange(RECORDS) % PARTITIONS, pa.int32())
    return [ProducerBatch(input_table(parts, pa.array([b"x" * 100] * RECORDS, pa.binary())))]


def fill(root: str, files: int) -> None:
    """A topic ``t`` of ``files`` data files under ``root``, checkpointed at its newest version."""
    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": root, "checkpoint.interval": 10**9}))
    catalog.create_topic("t", PARTITIONS)
    writer = TopicWriter(catalog, "t")
    batch = _batch()
    for _ in range(files // PARTITIONS):
        writer.append(batch)
    writer.close()
    DeltaTable(catalog.topic_path("t")).create_checkpoint()


def timed(root: str, commits: int, mode: str) -> dict[str, float]:
    """CPU and wall milliseconds per commit of ``commits`` commits into ``root``'s topic, and checkpoints written."""
    interval = 10**9 if mode == "no_checkpoints" else INTERVAL
    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": root, "checkpoint.interval": interval}))
    log = os.path.join(catalog.topic_path("t"), "_delta_log")
    before = sum(n.endswith(".checkpoint.parquet") for n in os.listdir(log))
    spacing = 10**12 if mode == "every_interval" else _log_append._CHECKPOINT_ACTIONS_PER_COMMIT
    batch = _batch()
    with mock.patch.object(_log_append, "_CHECKPOINT_ACTIONS_PER_COMMIT", spacing):
        writer = TopicWriter(catalog, "t")
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(commits):
            writer.append(batch)
        writer.close()  # waits for the checkpoint being written
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "cpu_ms_per_commit": cpu / commits * 1000,
        "wall_ms_per_commit": wall / commits * 1000,
        "checkpoints": sum(n.endswith(".checkpoint.parquet") for n in os.listdir(log)) - before,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", default="4000,40000", help="table sizes in data files, comma-separated")
    ap.add_argument("--commits", type=int, default=600, help="100-record commits per timed run")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    modes = ("no_checkpoints", "logstore", "every_interval")
    out: dict[str, object] = {
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "partitions": PARTITIONS,
        "records_per_commit": RECORDS,
        "checkpoint_interval": INTERVAL,
        "commits": args.commits,
        "runs": args.runs,
        "sizes": [],
    }
    with tempfile.TemporaryDirectory() as scratch:
        for files in (int(f) for f in args.files.split(",")):
            filled = os.path.join(scratch, f"filled-{files}")
            fill(filled, files)
            rounds: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
            for _ in range(args.runs):
                for mode in modes:
                    root = os.path.join(scratch, "run")
                    shutil.copytree(filled, root)
                    rounds[mode].append(timed(root, args.commits, mode))
                    shutil.rmtree(root)
            shutil.rmtree(filled)
            size: dict[str, object] = {"files": files}
            for mode in modes:
                size[mode] = {k: round(statistics.median(r[k] for r in rounds[mode]), 2) for k in rounds[mode][0]}
            floor = size["no_checkpoints"]["cpu_ms_per_commit"]  # type: ignore[index]
            for mode in ("logstore", "every_interval"):
                size[f"{mode}_cpu_over_no_checkpoints"] = round(
                    size[mode]["cpu_ms_per_commit"] / floor,  # type: ignore[index]
                    3,
                )
            out["sizes"].append(size)  # type: ignore[attr-defined]
    out["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
