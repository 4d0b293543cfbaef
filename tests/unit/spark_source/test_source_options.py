"""A Kafka source job's options after swapping the format: its ``kafka.*`` and consumer options are ignored
(logged), ``assign`` reads only the partitions it names."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from logstore.errors import InvalidConfigError
from logstore.store import LogStore
from spark_source._options import SourceOptions
from spark_source._planner import Planner


def test_a_kafka_jobs_client_options_are_ignored_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    options = {
        "kafka.bootstrap.servers": "broker-1:9092,broker-2:9092",
        "kafka.isolation.level": "read_committed",
        "kafka.security.protocol": "SSL",
        "kafkaConsumer.pollTimeoutMs": "512",
        "subscribe": "orders",
        "logstore.root": "/nowhere",
    }
    with caplog.at_level(logging.INFO, logger="spark_source"):
        parsed = SourceOptions.parse(options, streaming=True)
    assert parsed.topics == ("orders",)
    [line] = [r.getMessage() for r in caplog.records]
    assert "kafka.bootstrap.servers" in line and "kafka.isolation.level" in line and "kafkaconsumer" in line


def test_unknown_options_are_still_refused() -> None:
    with pytest.raises(InvalidConfigError, match="startingoffset"):
        SourceOptions.parse({"subscribe": "orders", "startingOffset": "earliest"}, streaming=True)


def test_assign_reads_only_the_partitions_it_names(store: LogStore, make_topic: Callable[..., str]) -> None:
    t, u = make_topic(partitions=3), make_topic(partitions=2)
    options = SourceOptions.parse(
        {"assign": f'{{"{t}": [0, 2], "{u}": [1]}}', "logstore.root": store.config.root}, streaming=False
    )
    assert options.topics == tuple(sorted((t, u)))
    views = Planner(options).views()
    assert {topic: sorted(parts) for topic, parts in views.items()} == {t: [0, 2], u: [1]}


@pytest.mark.parametrize(
    "options",
    [
        {"assign": '{"orders": [0]}', "subscribe": "orders"},
        {"assign": '["orders"]'},
        {"assign": '{"orders": []}'},
        {"assign": '{"orders": [-1]}'},
        {"assign": "orders"},
    ],
)
def test_a_bad_assign_is_refused(options: dict[str, str]) -> None:
    with pytest.raises(InvalidConfigError, match="assign"):
        SourceOptions.parse(options, streaming=True)
