"""Topics: create, list, describe, alter, add partitions, delete; bad input gets Kafka errors."""

from collections.abc import Callable

import pytest
from deltalake import DeltaTable

from logstore.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch


def test_create_describe_list_delete(store: LogStore) -> None:
    info = store.create_topic("orders", 3, {"retention.ms": 60000, "cleanup.policy": "compact"})
    assert [p.partition for p in info.partitions] == [0, 1, 2]
    assert all(p.high_watermark == 0 and p.log_start_offset == 0 for p in info.partitions)
    assert info.config.retention_ms == 60000
    assert info.config.cleanup_policy == "compact"
    assert info.config.message_max_bytes == store.config.topic_defaults.message_max_bytes
    assert info.overrides == {"retention.ms": "60000", "cleanup.policy": "compact"}
    assert store.list_topics() == ["orders"]
    store.delete_topic("orders")
    assert store.list_topics() == []
    with pytest.raises(UnknownTopicOrPartitionError):
        store.describe_topic("orders")


def test_config_lives_in_table_properties(store: LogStore) -> None:
    store.create_topic("t", 2, {"retention.ms": 1000})
    props = DeltaTable(store.catalog.topic_path("t")).metadata().configuration
    assert props["logstore.partitions"] == "2"
    assert props["logstore.retention.ms"] == "1000"


def test_topic_table_uses_only_features_both_engines_write(store: LogStore) -> None:
    store.create_topic("t", 1)
    proto = DeltaTable(store.catalog.topic_path("t")).protocol()
    assert (proto.min_reader_version, proto.min_writer_version) == (1, 2)
    assert not proto.writer_features and not proto.reader_features


def test_describe_reports_offsets_and_sizes(store: LogStore) -> None:
    store.create_topic("t", 2)
    store.append("t", [ProducerBatch(input_table([0, 0, 1], [b"a", b"b", b"c"]))])
    parts = store.describe_topic("t").partitions
    assert [(p.log_start_offset, p.high_watermark) for p in parts] == [(0, 2), (0, 1)]
    assert all(p.size_bytes > 0 and p.num_files == 1 for p in parts)


def test_alter_config_and_add_partitions(store: LogStore) -> None:
    store.create_topic("t", 1)
    store.append("t", [ProducerBatch(input_table([0], [b"a"]))])
    info = store.alter_topic("t", config={"retention.ms": 5}, partitions=3)
    assert len(info.partitions) == 3 and info.config.retention_ms == 5
    # the live writer sees the new partitions
    (res,) = store.append("t", [ProducerBatch(input_table([2, 0], [b"x", b"y"]))])
    assert not isinstance(res, Exception)
    assert res.offsets.to_pylist() == [0, 1]
    info = store.alter_topic("t", config={"retention.ms": None})
    assert info.config.retention_ms == store.config.topic_defaults.retention_ms


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a b", "ümlaut", "x" * 250, "a/b", "semi;colon", "abc\n", "abc\r", "\nabc", "a\x00b", "abc\t"],
)
def test_invalid_topic_names(store: LogStore, name: str) -> None:
    with pytest.raises(InvalidTopicError):
        store.create_topic(name, 1)


def test_longest_legal_name(store: LogStore) -> None:
    store.create_topic("a._-" + "x" * 245, 1)


@pytest.mark.parametrize("partitions", [0, -1, "3", 2.5, True, 10_001, 2**70])
def test_invalid_partition_counts(store: LogStore, partitions: object) -> None:
    with pytest.raises(InvalidPartitionsError):
        store.create_topic("t", partitions)  # type: ignore[arg-type]


def test_partitions_never_decrease(store: LogStore) -> None:
    store.create_topic("t", 3)
    with pytest.raises(InvalidPartitionsError, match="never removed"):
        store.alter_topic("t", partitions=2)
    assert len(store.describe_topic("t").partitions) == 3


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"retention.mss": 1}, "'retention.mss'"),
        ({"retention.ms": "a week"}, "retention.ms must be an integer"),
        ({"cleanup.policy": 3}, "cleanup.policy must be a string"),
        ({"message.timestamp.type": "Now"}, "message.timestamp.type must be one of"),
        ({"linger.ms": 5}, "'linger.ms'"),
    ],
)
def test_invalid_topic_config(store: LogStore, overrides: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidConfigError) as e:
        store.create_topic("t", 1, overrides)
    assert fragment in e.value.message
    assert store.list_topics() == []


def test_duplicate_topic(store: LogStore, make_topic: Callable[..., str]) -> None:
    name = make_topic()
    with pytest.raises(TopicAlreadyExistsError):
        store.create_topic(name, 1)
