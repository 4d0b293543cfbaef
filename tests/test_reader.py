"""Fetching slices of a partition, pruned by file statistics, bounded by the high watermark."""

import os
from collections.abc import Callable

import pytest

from logstore.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from logstore.schema import input_table
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
