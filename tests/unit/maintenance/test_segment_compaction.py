"""Segment compaction merges small adjacent files without changing a record or an offset (planned and run
in-process; run with Spark in ``tests/integration/maintenance/test_segment_compaction.py``)."""

from __future__ import annotations

from collections.abc import Callable

from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from maintenance import plan_segments, run_segment_compaction
from maintenance._files import live_files
from tests.support.helpers import assert_gap_free


def small_commits(store: LogStore, topic: str, commits: int, partitions: int) -> TopicWriter:
    w = TopicWriter(store.catalog, topic)
    for c in range(commits):
        parts = [p for p in range(partitions) for _ in range(2)]
        w.append(
            [
                ProducerBatch(
                    input_table(
                        parts,
                        [f"v{c}-{i}".encode() if i % 5 else None for i in range(len(parts))],
                        keys=[f"k{i % 3}".encode() if i % 4 else None for i in range(len(parts))],
                        timestamps_ms=[1_700_000_000_000 + c] * len(parts),
                        headers=[[("h", f"{c}".encode())] if i % 2 else [] for i in range(len(parts))],
                    )
                )
            ]
        )
    return w


def test_plan_merges_runs_of_adjacent_small_files_up_to_the_target(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=1)
    small_commits(store, t, 7, 1)
    files = live_files(store.catalog.table(t))[0]
    size = files[0].size_bytes
    bins = plan_segments(files, int(size * 3.5))
    assert [[f.min_offset for f in b] for b in bins] == [[0, 2, 4], [6, 8, 10]]  # the last file is left alone
    # a file already at the target breaks a run
    big = plan_segments(files, size)
    assert big == []


def test_compaction_in_process_then_again_is_a_no_op(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=1, segment_bytes=1024 * 1024)
    small_commits(store, t, 5, 1)
    (first,) = run_segment_compaction(store.catalog, t, progress=lambda _: None)
    (second,) = run_segment_compaction(store.catalog, t, progress=lambda _: None)
    assert (first.files_removed, first.files_added) == (5, 1)
    assert (second.files_removed, second.files_added, second.version) == (0, 0, None)
    assert len(assert_gap_free(store.catalog, t)[0]) == 10
