"""Idempotent producer state: per (producer, partition), read back from the log, bounded in memory.

A sequence is checked on each partition its batch touches: new above that
partition's last, a retry (original offsets, nothing written) if the
partition remembers it, else out of order — so one request may be a retry on
some partitions and new on others, and one producer id may write partitions
led by different writers. A node keeps each producer's state in an LRU of
``producer.state.max.entries`` entries per topic; a producer that was dropped
is re-read from the log when it sends again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from logstore.common.lru import LruDict
from logstore.config import load_config
from logstore.errors import InvalidRequestError, OutOfOrderSequenceNumberError
from logstore.log import _delta
from logstore.log.producer_state import PRODUCER_WINDOW
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import AppendResult, ProducerBatch
from tests.support.helpers import assert_gap_free, read_topic

LIMIT = 3


def batch(pid: str, seq: int, parts: tuple[int, ...] = (0, 1)) -> ProducerBatch:
    values = [f"{pid}-{seq}-{i}".encode() for i in range(len(parts))]
    return ProducerBatch(input_table(list(parts), values), pid, seq)


def ok(result: object) -> AppendResult:
    assert isinstance(result, AppendResult), result
    return result


def test_lru_dict_drops_the_least_recently_used() -> None:
    d: LruDict[str, int] = LruDict(2)
    d["a"], d["b"] = 1, 2
    assert d.get("a") == 1  # a read makes "a" the most recent
    d["c"] = 3
    assert dict(d.items()) == {"a": 1, "c": 3}
    for key in list(d):
        del d[key]
    assert len(d) == 0


def test_writer_keeps_at_most_the_configured_producers(tmp_path: Path) -> None:
    store = LogStore(
        load_config(
            environ={},
            path=None,
            overrides={"logstore.root": str(tmp_path / "data"), "producer.state.max.entries": LIMIT},
        )
    )
    store.create_topic("t", 2)
    w = TopicWriter(store.catalog, "t")
    first = {pid: ok(w.append([batch(pid, 0)])[0]) for pid in (f"p{i}" for i in range(50))}
    assert len(w._producers) <= LIMIT  # the bound itself: nothing public shows the cache's size

    # p0 was dropped long ago: its retry still gets its original offsets, nothing is appended twice
    again = ok(w.append([batch("p0", 0)])[0])
    assert again.duplicate and again.offsets.equals(first["p0"].offsets)
    assert not ok(w.append([batch("p1", 2)])[0]).duplicate  # sequences may skip: the ones between went elsewhere
    with pytest.raises(OutOfOrderSequenceNumberError, match="committed sequence 2"):
        raise w.append([batch("p1", 1)])[0]  # type: ignore[misc]
    assert len(w._producers) <= LIMIT
    assert len(read_topic(store.catalog, "t")) == 2 * 50 + 2
    assert_gap_free(store.catalog, "t")


def test_a_request_retried_after_landing_on_some_partitions_writes_only_the_others(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    # A request split between two leaders: leader a committed its share of sequence 1, leader b failed
    # its share. The producer retries the whole request; by then a leads every partition.
    t = make_topic(partitions=2)
    a = TopicWriter(store.catalog, t, leader_epochs={})
    b = TopicWriter(store.catalog, t, leader_epochs={})
    a.claim({0: 0})
    b.claim({1: 0})
    ok(a.append_held([batch("p", 0, (0,))])[0])
    ok(b.append_held([batch("p", 0, (1,))])[0])  # sequence 0 is new on b's partition too
    share = ok(a.append_held([batch("p", 1, (0, 0))])[0])  # a's share of sequence 1; b's share failed
    b.resign([1])
    a.claim({1: 1})
    whole = ProducerBatch(input_table([0, 1, 0], [b"p-1-0", b"p-1-b", b"p-1-1"]), "p", 1)
    retried = ok(a.append_held([whole])[0])
    assert not retried.duplicate
    assert retried.offsets.to_pylist() == [share.offsets[0].as_py(), 1, share.offsets[1].as_py()]
    again = ok(a.append_held([whole])[0])  # the retry's answer got lost too: now a retry everywhere
    assert again.duplicate and again.offsets.equals(retried.offsets)
    values = assert_gap_free(store.catalog, t)
    assert values == {0: [b"p-0-0", b"p-1-0", b"p-1-1"], 1: [b"p-0-0", b"p-1-b"]}


def test_a_new_leader_answers_retries_from_the_log(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    old = TopicWriter(store.catalog, t, leader_epochs={})
    other = TopicWriter(store.catalog, t, leader_epochs={})
    old.claim({0: 0})
    other.claim({1: 0})
    firsts = {}
    for seq in range(6):  # the producer alternates between the two leaders' partitions
        writer = old if seq % 2 == 0 else other
        firsts[seq] = ok(writer.append_held([batch("p", seq, (seq % 2,))])[0])
    new = TopicWriter(store.catalog, t, leader_epochs={})
    new.claim({0: 1})
    for seq in (0, 2, 4):
        again = ok(new.append_held([batch("p", seq, (0,))])[0])
        assert again.duplicate and again.offsets.equals(firsts[seq].offsets)
    with pytest.raises(OutOfOrderSequenceNumberError, match="committed sequence 4"):
        raise new.append_held([batch("p", 3, (0,))])[0]  # type: ignore[misc]
    assert not ok(new.append_held([batch("p", 7, (0,))])[0]).duplicate
    assert new.producer_sequence("p") == 7
    assert_gap_free(store.catalog, t)


def test_each_partition_remembers_its_own_window(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    w = TopicWriter(store.catalog, t)
    on_1 = ok(w.append([batch("p", 0, (1,))])[0])
    for seq in range(1, PRODUCER_WINDOW + 3):  # partition 0 moves on; partition 1's batch stays its newest
        ok(w.append([batch("p", seq, (0,))])[0])
    for make in (lambda: w, lambda: TopicWriter(store.catalog, t)):  # in memory, then read back from the log
        writer = make()
        again = ok(writer.append([batch("p", 0, (1,))])[0])
        assert again.duplicate and again.offsets.equals(on_1.offsets)
        with pytest.raises(OutOfOrderSequenceNumberError, match="older than those"):
            raise writer.append([batch("p", 1, (0,))])[0]  # type: ignore[misc]
        with pytest.raises(InvalidRequestError, match="different records"):
            raise writer.append([batch("p", 0, (1, 1))])[0]  # type: ignore[misc]


def test_a_table_written_before_per_partition_state_is_the_floor(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    # An older writer kept one sequence per producer and topic: logstore.producer.<id>, and each batch's
    # offsets in commitInfo. That sequence is the last one of every partition the producer has no state on.
    t = make_topic(partitions=2)
    legacy = TopicWriter(store.catalog, t)
    first = ok(legacy.append([batch("other", 0, (0,))])[0])
    legacy._appender.commit(
        legacy.table_version + 1,
        [],
        [(_delta.app_producer("p"), 7)],
        {_delta.PRODUCERS_METADATA: [{"id": "p", "seq": 7, "first": {"0": [first.offsets[0].as_py(), 1]}}]},
    )
    w = TopicWriter(store.catalog, t)
    again = ok(w.append([batch("p", 7, (0,))])[0])  # a retry of the old batch: its original offset
    assert again.duplicate and again.offsets.to_pylist() == first.offsets.to_pylist()
    with pytest.raises(OutOfOrderSequenceNumberError):
        raise w.append([batch("p", 6, (1,))])[0]  # type: ignore[misc]
    assert not ok(w.append([batch("p", 8, (0, 1))])[0]).duplicate
    assert w.producer_sequence("p") == 8


def test_a_logged_batch_has_landed_only_where_its_partitions_hold_its_sequence(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    # A write-ahead log frame replayed after a crash is skipped only if each of its partitions holds its
    # sequence: the producer's higher sequence on another partition says nothing of this one.
    t = make_topic(partitions=2)
    w = TopicWriter(store.catalog, t)
    ok(w.append([batch("p", 7, (0,))])[0])
    assert w.landed(batch("p", 5, (0,)))
    assert not w.landed(batch("p", 5, (1,))) and not w.landed(batch("p", 5, (0, 1)))
    assert not w.landed_everywhere("p", 5)
    ok(w.append([batch("p", 8, (1,))])[0])
    assert w.landed(batch("p", 5, (0, 1))) and w.landed_everywhere("p", 7)
    assert not w.landed_everywhere("p", 8) and not w.landed(batch("q", 0, (0,)))


def test_a_sequence_repeated_in_one_call_is_decided_after_the_first_commits(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    # Two attempts of one request meet in one group commit: the first share, then the whole request
    # (leadership moved between them). The second waits for the first, then writes only what is new.
    t = make_topic(partitions=2)
    w = TopicWriter(store.catalog, t)
    share = ProducerBatch(input_table([0], [b"s-0"]), "p", 3)
    whole = ProducerBatch(input_table([0, 1], [b"s-0", b"s-1"]), "p", 3)
    first, second, third = (ok(r) for r in w.append([share, whole, whole]))
    assert not second.duplicate and second.offsets.to_pylist() == [first.offsets[0].as_py(), 0]
    assert third.duplicate and third.offsets.equals(second.offsets)
    assert assert_gap_free(store.catalog, t) == {0: [b"s-0"], 1: [b"s-1"]}
