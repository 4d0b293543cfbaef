"""Consumer-group offsets: commit, read back the latest, lag = HW - committed."""

from collections.abc import Callable

import pytest

from logstore.errors import GroupIdNotFoundError, InvalidGroupIdError, InvalidRequestError, OffsetOutOfRangeError
from logstore.offsets import OffsetsStore
from logstore.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch


def test_latest_commit_wins_and_lag_follows(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    store.append(t, [ProducerBatch(input_table([0] * 5 + [1] * 3, [b"v"] * 8))])
    store.commit_offsets("g", t, {0: 4, 1: 1})
    store.commit_offsets("g", t, {0: 2}, metadata="rewound")
    rows = {r.partition: r for r in store.describe_group("g")}
    assert (rows[0].committed_offset, rows[0].high_watermark, rows[0].lag, rows[0].metadata) == (2, 5, 3, "rewound")
    assert (rows[1].committed_offset, rows[1].lag) == (1, 2)
    assert store.list_groups() == ["g"]


def test_offsets_survive_a_new_store(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    store.append(t, [ProducerBatch(input_table([0], [b"v"]))])
    store.commit_offsets("g", t, {0: 1})
    assert OffsetsStore(store.config.root).committed("g") == {("g", t, 0): (1, pytest.approx(0, abs=1e13), None)}


def test_bad_commits(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    with pytest.raises(OffsetOutOfRangeError):
        store.commit_offsets("g", t, {0: 1})
    with pytest.raises(InvalidGroupIdError):
        store.commit_offsets("", t, {0: 0})
    with pytest.raises(GroupIdNotFoundError):
        store.describe_group("nobody")


def test_reset_to_earliest_latest_offset_and_timestamp(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    store.append(t, [ProducerBatch(input_table([0, 0, 0, 1], [b"v"] * 4, timestamps_ms=[1000, 2000, 3000, 500]))])
    assert store.reset_offsets("g", t, "latest") == {0: 3, 1: 1}
    assert store.reset_offsets("g", t, "earliest") == {0: 0, 1: 0}
    assert store.reset_offsets("g", t, {"offset": 2}) == {0: 2, 1: 1}  # clamped to the HW
    assert store.reset_offsets("g", t, {"timestamp": 1500}) == {0: 1, 1: 1}
    assert {r.partition: r.committed_offset for r in store.describe_group("g")} == {0: 1, 1: 1}
    with pytest.raises(InvalidRequestError):
        store.reset_offsets("g", t, "yesterday")
