"""Checkpoint cost: CPU per small commit into a topic table that holds many data files.

A Delta checkpoint rewrites the table's whole state, one action per data file,
and delta-rs first replays the commits since the previous one. A topic fed by
small requests gathers files until the ``compact`` job runs (at 10,000
records/s in 100-record requests over 4 partitions: 400 files a second), so a
checkpoint every ``checkpoint.interval`` commits would cost more CPU per commit
as the table grows. The core writer spaces checkpoints of ``n`` actions at
least ``n / 100`` commits apart (see ``checkpoint.interval``).

For each ``--files`` size, one table is filled with that many files (4
partitions, checkpointed once), then ``--commits`` commits of 100 records are
timed three ways, alternating, ``--runs`` times each, each on a copy of the
filled table:

* ``no_checkpoints``: checkpoints off (``checkpoint.interval`` past the run) —
  the floor;
* ``logstore``: the default policy;
* ``every_interval``: a checkpoint every 100 commits whatever the table's size
  (the policy without the spacing). The core has no public switch for its
  spacing, so here the writer's checkpoints are off and this benchmark writes
  them as the writer does: with delta-rs, on a thread of its own, one at a
  time (requests made meanwhile merged into the next), fsynced.

CPU is the process's (the committing thread, fsync and checkpoint threads and
delta-rs's own); the ratios are over the floor. Prints one JSON document.

Run: ``.venv/bin/python bench/checkpoints.py`` (``--files 4000,40000``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time

from deltalake import DeltaTable
from harness import emit, fill, load_average, median_of, open_store, records

from logstore.common.fsync import fsync_path
from logstore.log import tables
from logstore.log.writer import TopicWriter
from logstore.structs import ProducerBatch

PARTITIONS = 4
RECORDS = 100
INTERVAL = 100
NEVER = 10**9
"""A ``checkpoint.interval`` no run reaches."""


class Checkpointer:
    """Checkpoints of one table on a thread of its own, one at a time; requests made meanwhile merge into the next.

    What the core writer does at every ``checkpoint.interval``-th commit, without its spacing.
    """

    def __init__(self, root: str) -> None:
        self._root = root
        self._table: DeltaTable | None = None
        self._cond = threading.Condition()
        self._requested = 0
        self._served = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="bench-checkpoint", daemon=True)
        self._thread.start()

    def request(self) -> None:
        with self._cond:
            self._requested += 1
            self._cond.notify_all()

    def close(self) -> None:
        """Wait for the checkpoints requested so far, then stop."""
        with self._cond:
            self._cond.wait_for(lambda: self._served == self._requested)
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._requested > self._served)
                if self._closed:
                    return
                serving = self._requested  # a checkpoint serves every request made before it starts
            try:
                self._checkpoint()
            finally:
                with self._cond:
                    self._served = serving
                    self._cond.notify_all()

    def _checkpoint(self) -> None:
        if self._table is None:
            self._table = tables.open_table(self._root)
        else:
            tables.refresh(self._table)
        self._table.create_checkpoint()
        log = os.path.join(self._root, "_delta_log")
        prefix = f"{self._table.version():020d}.checkpoint."
        for name in [*(n for n in os.listdir(log) if n.startswith(prefix)), "_last_checkpoint"]:
            fsync_path(os.path.join(log, name))
        fsync_path(log)


def filled(root: str, files: int) -> None:
    """A topic ``t`` of ``files`` data files under ``root``, checkpointed at its newest version."""
    store = open_store(root, {"checkpoint.interval": NEVER})
    store.create_topic("t", PARTITIONS)
    writer = TopicWriter(store.catalog, "t")
    fill(writer, files // PARTITIONS * RECORDS, RECORDS)
    writer.close()
    DeltaTable(store.catalog.topic_path("t")).create_checkpoint()


def timed(root: str, commits: int, mode: str) -> dict[str, float]:
    """CPU and wall milliseconds per commit of ``commits`` commits into ``root``'s topic, and checkpoints written."""
    store = open_store(root, {"checkpoint.interval": INTERVAL if mode == "logstore" else NEVER})
    path = store.catalog.topic_path("t")
    log = os.path.join(path, "_delta_log")
    before = sum(n.endswith(".checkpoint.parquet") for n in os.listdir(log))
    batch = [ProducerBatch(records(RECORDS, partitions=PARTITIONS))]
    checkpointer = Checkpointer(path) if mode == "every_interval" else None
    writer = TopicWriter(store.catalog, "t")
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(commits):
        writer.append(batch)
        if checkpointer is not None and writer.table_version % INTERVAL == 0:
            checkpointer.request()
    if checkpointer is not None:
        checkpointer.close()
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
        "load_average_start": load_average(),
        "partitions": PARTITIONS,
        "records_per_commit": RECORDS,
        "checkpoint_interval": INTERVAL,
        "commits": args.commits,
        "runs": args.runs,
        "sizes": [],
    }
    with tempfile.TemporaryDirectory() as scratch:
        for files in (int(f) for f in args.files.split(",")):
            full = os.path.join(scratch, f"filled-{files}")
            filled(full, files)
            rounds: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
            for _ in range(args.runs):
                for mode in modes:
                    root = os.path.join(scratch, "run")
                    shutil.copytree(full, root)
                    rounds[mode].append(timed(root, args.commits, mode))
                    shutil.rmtree(root)
            shutil.rmtree(full)
            size: dict[str, object] = {"files": files, **{mode: median_of(rounds[mode]) for mode in modes}}
            floor = size["no_checkpoints"]["cpu_ms_per_commit"]  # type: ignore[index]
            for mode in ("logstore", "every_interval"):
                size[f"{mode}_cpu_over_no_checkpoints"] = round(
                    size[mode]["cpu_ms_per_commit"] / floor,  # type: ignore[index]
                    3,
                )
            out["sizes"].append(size)  # type: ignore[attr-defined]
    out["load_average_end"] = load_average()
    emit(out)


if __name__ == "__main__":
    main()
