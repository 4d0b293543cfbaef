"""Produce, consume and every maintenance job at once: nothing lost, duplicated or skipped (Jepsen-style).

A producer thread commits keyed records through a ``TopicWriter``; a consumer
thread fetches every partition from offset 0 with a ``TopicReader``, jumping
to the log start on ``OFFSET_OUT_OF_RANGE`` (Kafka's ``auto.offset.reset``);
the test thread runs retention, segment compaction, key compaction and vacuum
in rounds, handing the producer commits to make while each job runs. Before
the threads start, ``PRELOAD`` commits are made, enough for every job to have
work in the first round whatever the timing; rounds go on (at most
``MAX_ROUNDS``) until each job has done some. The history is then checked:

* lost — an acknowledged record the consumer never saw that neither
  retention (an offset the consumer jumped over, below the log start) nor key
  compaction (a later record of the same key exists) may have removed;
* duplicate — an offset or a value seen twice, or a value at the wrong offset;
* gaps — offsets skipped between two records the consumer saw that key
  compaction did not remove.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from pyspark.sql import SparkSession

from logstore.errors import OffsetOutOfRangeError
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import AppendResult, ProducerBatch
from maintenance import run_key_compaction, run_retention, run_segment_compaction, run_vacuum

pytestmark = pytest.mark.spark

PARTITIONS = 2
KEYS = 7
COMMITS_PER_JOB = 25
PRELOAD = 40
"""Commits made before the concurrent phase: ~2 KB per partition each, twice retention.bytes, in small files."""
MIN_ROUNDS = 2
MAX_ROUNDS = 5


@dataclass
class History:
    acked: dict[int, dict[int, tuple[bytes, bytes]]] = field(default_factory=lambda: {p: {} for p in range(PARTITIONS)})
    seen: dict[int, list[tuple[int, bytes]]] = field(default_factory=lambda: {p: [] for p in range(PARTITIONS)})
    jumped: dict[int, set[int]] = field(default_factory=lambda: {p: set() for p in range(PARTITIONS)})
    errors: list[BaseException] = field(default_factory=list)


def test_produce_consume_and_maintenance_lose_and_duplicate_nothing(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(
        partitions=PARTITIONS,
        cleanup_policy="compact,delete",
        retention_bytes=40_000,
        segment_bytes=16_384,
        delete_retention_ms=3600_000,
    )
    h = History()
    permits = threading.Semaphore(0)
    producing_done = threading.Event()  # the test thread's word to the producer: make no more commits
    produced = threading.Event()  # the producer's: it has returned, so its last commit is in the log
    writer = TopicWriter(store.catalog, t)

    def commit(i: int) -> None:
        parts = [j % PARTITIONS for j in range(8)]
        keys: list[bytes | None] = [f"k{(i + j) % KEYS}".encode() for j in range(8)]
        values: list[bytes | None] = [f"{i}-{j}".encode() for j in range(8)]
        (res,) = writer.append([ProducerBatch(input_table(parts, values, keys=keys))])
        assert isinstance(res, AppendResult)
        for p, o, k, v in zip(parts, res.offsets.to_pylist(), keys, values, strict=True):
            assert k is not None and v is not None
            h.acked[p][o] = (k, v)

    for i in range(PRELOAD):
        commit(i)

    def produce() -> None:
        i = PRELOAD
        try:
            while True:
                permits.acquire()
                if producing_done.is_set():
                    return
                commit(i)
                i += 1
        except BaseException as e:
            h.errors.append(e)
        finally:
            produced.set()

    def consume() -> None:
        reader = store.reader(t)
        pos = dict.fromkeys(range(PARTITIONS), 0)
        try:
            while True:
                # Not producing_done: the producer may still be inside the commit it took a permit for.
                finished = produced.is_set()
                reader.refresh()
                progressed = False
                for p in range(PARTITIONS):
                    try:
                        recs = reader.fetch(p, pos[p], max_records=40, refresh=False).records
                    except OffsetOutOfRangeError:
                        start = reader.partition_view(p).log_start_offset
                        assert start > pos[p], f"out of range at {pos[p]} but the log starts at {start}"
                        h.jumped[p].update(range(pos[p], start))
                        pos[p] = start
                        progressed = True
                        continue
                    if len(recs):
                        for o, v in zip(recs["offset"].to_pylist(), recs["value"].to_pylist(), strict=True):
                            h.seen[p].append((o, v))
                        pos[p] = h.seen[p][-1][0] + 1
                        progressed = True
                if finished and not progressed:
                    hw = [reader.partition_view(p).high_watermark for p in range(PARTITIONS)]
                    if all(pos[p] == hw[p] for p in range(PARTITIONS)):
                        return
        except BaseException as e:
            h.errors.append(e)

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for th in threads:
        th.start()
    quiet = {"progress": lambda _: None}
    jobs = [
        lambda: run_retention(store.catalog, t, **quiet),
        lambda: run_segment_compaction(store.catalog, t, spark=spark, **quiet),
        lambda: run_key_compaction(store.catalog, t, spark=spark, **quiet),
        lambda: run_vacuum(store.catalog, t, **quiet),
    ]
    removed_by_retention = 0
    compacted = cleaned = 0
    try:
        for rounds in itertools.count(1):
            for job in jobs:
                for _ in range(COMMITS_PER_JOB):
                    permits.release()  # the producer commits while the job runs
                reports = job()
                removed_by_retention += sum(r.files_removed for r in reports if job is jobs[0])
                compacted += sum(r.files_removed for r in reports if job is jobs[1])
                cleaned += sum(r.records_removed for r in reports if job is jobs[2])
            if rounds >= MAX_ROUNDS or (rounds >= MIN_ROUNDS and removed_by_retention and compacted and cleaned):
                break
    finally:
        producing_done.set()
        permits.release()
        for th in threads:
            th.join(timeout=300)
    assert not h.errors, h.errors
    assert removed_by_retention and compacted and cleaned  # every job had work to do

    lost, duplicates, gaps = [], [], []
    for p in range(PARTITIONS):
        acked = h.acked[p]
        assert sorted(acked) == list(range(len(acked)))  # the writer stayed gap-free
        latest = {k: o for o, (k, _) in sorted(acked.items())}

        def superseded(
            o: int, acked: dict[int, tuple[bytes, bytes]] = acked, latest: dict[bytes, int] = latest
        ) -> bool:
            return latest[acked[o][0]] > o

        offsets = [o for o, _ in h.seen[p]]
        duplicates += [(p, o) for o in offsets if offsets.count(o) > 1]
        duplicates += [(p, o) for o, v in h.seen[p] if acked.get(o, (b"", b""))[1] != v]
        seen = set(offsets)
        for o in acked:
            if o not in seen and o not in h.jumped[p] and not superseded(o):
                lost.append((p, o))
        for a, b in itertools.pairwise(offsets):
            gaps += [(p, o) for o in range(a + 1, b) if not superseded(o)]
        info = store.describe_topic(t).partitions[p]
        assert info.high_watermark == len(acked)
        assert all(o < info.log_start_offset or superseded(o) for o in h.jumped[p])
    assert (lost, duplicates, gaps) == ([], [], [])
