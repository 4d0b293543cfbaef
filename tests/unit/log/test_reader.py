"""Fetching slices of a partition, pruned by file statistics, bounded by the high watermark."""

import os
import random
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logstore.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from logstore.log import file_changes, reader, tables
from logstore.log.files import DataFile
from logstore.log.reader import _read_bounded
from logstore.log.schema import TOPIC_SCHEMA, input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch


def produce(store: LogStore, topic: str, partition: int, n: int, tag: str) -> None:
    store.append(topic, [ProducerBatch(input_table([partition] * n, [f"{tag}{i}".encode() for i in range(n)]))])


def test_fetch_slices_in_offset_order(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    for i in range(4):
        produce(store, t, 0, 10, f"c{i}-")
    r = store.fetch(t, 0, 15, max_records=12)
    assert r.records["offset"].to_pylist() == list(range(15, 27))
    assert r.records["value"][0].as_py() == b"c1-5"
    assert (r.high_watermark, r.log_start_offset) == (40, 0)
    assert r.records["partition"].to_pylist() == [0] * 12


def test_fetch_at_high_watermark_is_empty_and_beyond_is_out_of_range(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic()
    produce(store, t, 0, 3, "v")
    assert len(store.fetch(t, 0, 3).records) == 0
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 4 .* outside \[0, 3\]"):
        store.fetch(t, 0, 4)
    with pytest.raises(OffsetOutOfRangeError):
        store.fetch(t, 0, -1)
    with pytest.raises(UnknownTopicOrPartitionError):
        store.fetch(t, 1, 0)


def test_max_bytes_bounds_the_slice_but_returns_at_least_one(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    store.append(t, [ProducerBatch(input_table([0] * 5, [b"x" * 100] * 5))])
    assert len(store.fetch(t, 0, 0, max_bytes=250).records) == 2
    assert len(store.fetch(t, 0, 0, max_bytes=10).records) == 1


def test_only_files_covering_the_slice_are_opened(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    for i in range(3):
        produce(store, t, 0, 10, f"c{i}-")
    reader = store.reader(t)
    files = reader.partition_view(0).files
    assert [(f.min_offset, f.max_offset) for f in files] == [(0, 9), (10, 19), (20, 29)]
    os.remove(files[0].path)  # a reader that opened it would fail now
    r = reader.fetch(0, 12, max_records=5)
    assert r.records["offset"].to_pylist() == [12, 13, 14, 15, 16]


def test_reader_sees_new_commits(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    reader = store.reader(t)
    assert reader.fetch(0, 0).high_watermark == 0
    produce(store, t, 0, 2, "v")
    assert reader.fetch(0, 0).records["offset"].to_pylist() == [0, 1]


def test_a_refreshed_view_builds_only_the_new_files(store: LogStore, make_topic: Callable[..., str]) -> None:
    # A streaming query plans again after every commit of a busy topic: the files it already knew are taken
    # as they were, so planning costs the new add actions, not the whole log's, each time.
    t = make_topic(partitions=2)
    produce(store, t, 0, 2, "a")
    produce(store, t, 1, 2, "b")
    reader = store.reader(t)
    reader.refresh()
    before = reader.partition_view(0).files + reader.partition_view(1).files
    produce(store, t, 0, 1, "c")
    reader.refresh()
    after = reader.partition_view(0)

    assert [f.min_offset for f in after.files] == [0, 2]
    assert after.files[0] is before[0]
    assert reader.partition_view(1).files == before[1:]
    assert reader.partition_view(1).files[0] is before[1]
    assert after.high_watermark == 3


def _file(path: Path, offsets: list[int], row_group_size: int = 4) -> DataFile:
    """A data file holding ``offsets`` in the order given, in row groups of ``row_group_size`` rows, values
    ``v<offset>``."""
    n = len(offsets)
    table = pa.table(
        {
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            "timestamp_type": pa.array([0] * n, pa.int32()),
            "key": pa.nulls(n, pa.binary()),
            "value": pa.array([b"v%d" % o for o in offsets], pa.binary()),
        }
    )
    pq.write_table(table, path, row_group_size=row_group_size)
    return DataFile(
        path=str(path),
        partition=0,
        min_offset=min(offsets),
        max_offset=max(offsets),
        num_records=n,
        size_bytes=path.stat().st_size,
        modification_time_ms=0,
        log_path=path.name,
        max_timestamp_ms=None,
    )


@pytest.mark.parametrize("whole", [True, False], ids=["row-groups-whole", "row-groups-in-batches"])
@pytest.mark.parametrize("max_bytes", [1, 5, 12, 40, 1000, 0])
def test_bounded_read_merges_files_with_overlapping_offsets(
    tmp_path: Path, max_bytes: int, whole: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not whole:  # every row group read offsets first, then a batch at a time, as a compacted file's are
        monkeypatch.setattr(reader, "_WHOLE_ROW_GROUP_BYTES", 0)
    # Shaped like Spark OPTIMIZE's output beside a file it left alone: one file holds [0, 39] minus
    # [10, 19], in no particular order, the other holds [10, 19]; offsets 30-31 were compacted away.
    big = list(range(20, 30)) + list(range(32, 40)) + list(range(10))
    files = (_file(tmp_path / "a.parquet", big), _file(tmp_path / "b.parquet", list(range(10, 20))))
    kept = sorted(big + list(range(10, 20)))
    for start, end in [(0, 40), (5, 25), (12, 33), (30, 40), (39, 40)]:
        got = _read_bounded(files, 0, start, end, max_bytes)["offset"].to_pylist()
        want = [o for o in kept if start <= o < end]
        sizes = np.cumsum([len(b"v%d" % o) for o in want])
        count = len(want) if max_bytes <= 0 else max(1, int(np.sum(sizes <= max_bytes)))
        assert got == want[:count], (start, end)


def test_fetch_steps_over_gaps_that_compaction_left(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    for i in range(3):
        produce(store, t, 0, 10, f"c{i}-")
    # What key compaction commits: files [0, 9] and [10, 19] rewritten to hold only offsets 17 and 18.
    dt = store.catalog.table(t)
    old = file_changes.live_files(dt)[0][:2]
    kept = pq.read_table(old[1].path, schema=file_changes.FILE_SCHEMA).slice(7, 2)
    file_changes.commit(
        dt, old, [file_changes.write_segment(tables.table_path(dt), 0, kept)], data_change=True, operation="clean"
    )

    assert store.fetch(t, 0, 0, max_records=3).records["offset"].to_pylist() == [17, 18, 20]
    assert store.fetch(t, 0, 0, max_records=1).records["value"].to_pylist() == [b"c1-7"]
    assert store.fetch(t, 0, 5, max_records=100).records["offset"].to_pylist() == [17, 18, *range(20, 30)]
    assert store.fetch(t, 0, 19, max_records=2).records["offset"].to_pylist() == [20, 21]
    assert store.fetch(t, 0, 0).log_start_offset == 0


_KINDS = ["in-order", "shuffled", "with-gaps", "row-groups"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    segments=st.lists(st.tuples(st.integers(1, 12), st.sampled_from(_KINDS), st.randoms()), min_size=1, max_size=6),
    cut=st.tuples(st.integers(0, 80), st.integers(0, 80)),
    max_bytes=st.sampled_from([0, 1, 3, 7, 20, 1000]),
)
def test_a_bounded_read_of_any_file_layout_returns_the_records_in_order_up_to_max_bytes(
    tmp_path: Path, segments: list[tuple[int, str, random.Random]], cut: tuple[int, int], max_bytes: int
) -> None:
    # Files as commits write them (in order, one row group) read by position; any other file — rows out of
    # order, offsets compaction removed, several row groups — is merged by offset from there on.
    files, kept, offset = [], [], 0
    for n, kind, rng in segments:
        offsets = list(range(offset, offset + n))
        offset += n
        if kind == "with-gaps" and n > 2:
            offsets = [o for o in offsets if o in (offsets[0], offsets[-1]) or rng.random() < 0.5]
        if kind == "shuffled":
            rng.shuffle(offsets)
        kept += offsets
        path = tmp_path / f"{uuid.uuid4().hex}.parquet"
        files.append(_file(path, offsets, row_group_size=3 if kind == "row-groups" else len(offsets)))
    start, end = min(cut), max(cut)
    want = sorted(o for o in kept if start <= o < end)
    sizes = np.cumsum([len(b"v%d" % o) for o in want])
    count = len(want) if max_bytes <= 0 else max(1, int(np.sum(sizes <= max_bytes)))
    got = _read_bounded(tuple(files), 0, start, end, max_bytes)
    assert got["offset"].to_pylist() == want[:count]
    assert got["value"].to_pylist() == [b"v%d" % o for o in want[:count]]
    assert got.schema.equals(TOPIC_SCHEMA, check_metadata=True)
