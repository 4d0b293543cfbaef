"""Files whose offset ranges overlap, as Delta's OPTIMIZE leaves them: nothing is skipped, repeated or lost.

OPTIMIZE bins files by size, not by offset: it can rewrite the files holding
[0, 9], [20, 29] and [50, 59] into one file holding all three while [10, 19],
[30, 39] and [40, 49] stay as they were. Every part that plans by files —
the reader, retention, segment and key compaction, the Spark source's
slices — must treat that as an ordinary layout.

Here the layout is built by a commit shaped exactly like OPTIMIZE's (remove
actions and one add of the rewritten file, all ``dataChange=false``); key
compaction and Spark's own OPTIMIZE are in
``tests/integration/spark/test_overlapping_files.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest

from logstore.errors import OffsetOutOfRangeError
from logstore.log import file_changes
from logstore.log.reader import offset_for_timestamp
from logstore.store import LogStore
from maintenance import run_retention, run_segment_compaction
from spark_source._slices import plan_slices, read_slice
from tests.support.overlapping import (
    HOUR_MS,
    MERGED,
    NOW_MS,
    PER_FILE,
    N,
    assert_disjoint,
    fetch_all,
    optimize_like,
    value_of,
    write_files,
)


@pytest.fixture
def interleaved(store: LogStore, make_topic: Callable[..., str]) -> Iterator[str]:
    """A one-partition topic of offsets 0..99 in ten files, three of them merged by an OPTIMIZE-shaped commit."""
    t = make_topic(partitions=1)
    write_files(store, t, lambda o: NOW_MS + o)
    optimize_like(store, t, MERGED)
    yield t


def test_reader_fetches_every_offset_and_finds_every_timestamp(store: LogStore, interleaved: str) -> None:
    for o in range(N + 1):
        recs = store.fetch(interleaved, 0, o, max_records=7).records
        assert recs["offset"].to_pylist() == list(range(o, min(o + 7, N)))
        assert recs["value"].to_pylist() == [value_of(x) for x in range(o, min(o + 7, N))]
    reader = store.reader(interleaved)
    reader.refresh()
    view = reader.partition_view(0)
    assert [offset_for_timestamp(view, NOW_MS + o) for o in range(N + 1)] == list(range(N + 1))


@pytest.mark.parametrize("max_records", [1, 4, 10, 25, 1000])
@pytest.mark.parametrize("start", [0, 15, 55])
def test_source_slices_read_every_record_once(store: LogStore, interleaved: str, start: int, max_records: int) -> None:
    reader = store.reader(interleaved)
    reader.refresh()
    view = reader.partition_view(0)
    slices = plan_slices(interleaved, 0, start, N, view.files, max_records=max_records, include_headers=False)
    assert all(a.end == b.start for a, b in itertools.pairwise(slices))  # contiguous
    offsets = []
    for s in slices:
        got = pa.Table.from_batches(list(read_slice(s)))["offset"].to_pylist() if s.files else []
        assert got == sorted(got) and all(s.start <= o < s.end for o in got)
        offsets += got
    assert offsets == list(range(start, N))


def test_retention_by_time_waits_for_the_whole_interleaved_run(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=1, retention_ms=3 * HOUR_MS)
    # The merged file's records and [10, 19] are old; [30, 49] ages later; the rest is young.
    old = {o for f in [*MERGED, 1] for o in range(f * PER_FILE, (f + 1) * PER_FILE)}
    write_files(store, t, lambda o: NOW_MS - 5 * HOUR_MS if o in old else NOW_MS - (2 * HOUR_MS if o < 50 else 0))
    optimize_like(store, t, MERGED)

    (first,) = run_retention(store.catalog, t, now_ms=NOW_MS, progress=lambda _: None)
    # [0, 59] and [10, 19] are old, but [30, 49] is not: deleting them would drop 50..59 and keep 30..49
    assert (first.files_removed, first.log_start_offset) == (0, 0)
    assert fetch_all(store, t, 0) == list(range(N))

    (second,) = run_retention(store.catalog, t, now_ms=NOW_MS + 2 * HOUR_MS, progress=lambda _: None)
    assert (second.files_removed, second.records_removed, second.log_start_offset) == (4, 60, 60)
    assert store.describe_topic(t).partitions[0].log_start_offset == 60
    with pytest.raises(OffsetOutOfRangeError):
        store.fetch(t, 0, 59)
    assert fetch_all(store, t, 60) == list(range(60, N))


@pytest.mark.parametrize(("kept_files", "log_start"), [(4, 60), (5, 0)])
def test_retention_by_size_never_cuts_into_an_interleaved_run(
    store: LogStore, make_topic: Callable[..., str], kept_files: int, log_start: int
) -> None:
    t = make_topic(partitions=1)
    write_files(store, t, lambda o: NOW_MS)
    optimize_like(store, t, MERGED)
    files = file_changes.live_files(store.catalog.table(t))[0]  # [0,59] [10,19] [30,39] [40,49] [60,69] … [90,99]
    store.alter_topic(t, config={"retention.bytes": sum(f.size_bytes for f in files[-kept_files:])})

    (report,) = run_retention(store.catalog, t, now_ms=NOW_MS, progress=lambda _: None)

    assert report.log_start_offset == log_start
    assert store.describe_topic(t).partitions[0].log_start_offset == log_start
    assert fetch_all(store, t, log_start) == list(range(log_start, N))


def test_segment_compaction_repairs_the_layout(store: LogStore, interleaved: str) -> None:
    size = file_changes.live_files(store.catalog.table(interleaved))[0][1].size_bytes
    run_segment_compaction(store.catalog, interleaved, segment_bytes=int(size * 2.5), progress=lambda _: None)
    assert_disjoint(store, interleaved)
    assert fetch_all(store, interleaved, 0) == list(range(N))
    info = store.describe_topic(interleaved).partitions[0]
    assert (info.log_start_offset, info.high_watermark) == (0, N)
