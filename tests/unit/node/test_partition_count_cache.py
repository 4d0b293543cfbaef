"""How often a node re-reads a topic's partition count from its Delta table.

In a cluster every request is routed by the topic's partition count
(``Broker.route``), and every node writing a topic moves its Delta log. A
count re-read whenever the log moved meant opening the table for about every
request: the three-node failover tests' nodes spent 35-40% of their CPU in
``DeltaTable.__init__`` at ~40 single-record requests a second.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logstore.config import load_config
from logstore.log.schema import input_table
from logstore.node import broker as broker_module
from logstore.node.broker import Broker
from logstore.store import LogStore
from logstore.structs import ProducerBatch


def _count_reads(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every read of a topic's table properties the broker makes (the real read still runs)."""
    reads: list[str] = []
    real = broker.store.catalog.topic_config

    def counted(name: str, table: object = None) -> object:
        reads.append(name)
        return real(name)

    monkeypatch.setattr(broker.store.catalog, "topic_config", counted)
    return reads


def test_commits_by_other_writers_do_not_make_the_count_be_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(environ={}, overrides={"logstore.root": str(tmp_path / "data")})
    broker = Broker(config)
    other = LogStore(config)  # another process writing the same topic, as other nodes do
    other.create_topic("t", 2)
    reads = _count_reads(broker, monkeypatch)
    # the count's age limit out of the way: 20 commits on a busy machine may take longer than it
    monkeypatch.setattr(broker_module, "PARTITION_COUNT_MAX_AGE_S", 3600.0)
    assert broker.partition_count("t") == 2
    for i in range(20):
        other.append("t", [ProducerBatch(input_table([i % 2], [b"x"]))])
        assert broker.partition_count("t") == 2
    assert reads == ["t"]

    other.alter_topic("t", partitions=5)
    assert broker.partition_count("t", fresh=True) == 5  # a request naming partition 4 asks for this
    assert len(reads) == 2


def test_a_count_changed_elsewhere_is_read_once_the_cached_one_is_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(environ={}, overrides={"logstore.root": str(tmp_path / "data")})
    broker = Broker(config)
    other = LogStore(config)
    other.create_topic("t", 2)
    assert broker.partition_count("t") == 2
    other.alter_topic("t", partitions=3)
    monkeypatch.setattr(broker_module, "PARTITION_COUNT_MAX_AGE_S", 0.0)
    assert broker.partition_count("t") == 3
    reads = _count_reads(broker, monkeypatch)
    assert broker.partition_count("t") == 3  # the log has not moved since: no read, whatever the age
    assert reads == []
