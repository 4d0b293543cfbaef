"""Segment compaction merges small adjacent files without changing a record or an offset (planned and run
in-process; run with Spark in ``tests/integration/maintenance/test_segment_compaction.py``)."""

from __future__ import annotations

from collections.abc import Callable

from logstore.log.file_changes import live_files
from logstore.store import LogStore
from maintenance import plan_segments, run_segment_compaction
from tests.support.commits import small_commits
from tests.support.helpers import assert_gap_free


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
