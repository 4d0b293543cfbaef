"""Idempotent producer state in memory is bounded, and stays correct for a producer dropped from it.

A node keeps each producer's last sequence and its last few batches in memory
to answer retries; that state is derivable from the topic's Delta log, so it is
an LRU of ``producer.state.max.entries`` entries per topic, and a producer that
was dropped is re-read from the log when it sends again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logstore.common.lru import LruDict
from logstore.config import load_config
from logstore.errors import OutOfOrderSequenceNumberError
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
    with pytest.raises(OutOfOrderSequenceNumberError, match="next expected is 1"):
        raise w.append([batch("p1", 2)])[0]  # type: ignore[misc]
    assert not ok(w.append([batch("p1", 1)])[0]).duplicate
    assert len(w._producers) <= LIMIT
    assert len(read_topic(store.catalog, "t")) == 2 * 50 + 2
    assert_gap_free(store.catalog, "t")
