"""The source's planner (``spark_source._planner``), which runs in the Python process Spark starts per query."""

from __future__ import annotations

from pathlib import Path

import pytest

from logstore.config import load_config
from logstore.errors import UnknownTopicOrPartitionError
from logstore.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from spark_source._options import SourceOptions
from spark_source._planner import Planner


def _store(root: Path) -> LogStore:
    return LogStore(load_config(environ={}, overrides={"logstore.root": str(root)}))


def test_a_topic_deleted_and_created_again_is_planned_as_the_new_topic(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.create_topic("t", 2)
    for _ in range(5):
        store.append("t", [ProducerBatch(input_table([0, 1], [b"a", b"b"]))])
    planner = Planner(SourceOptions.parse({"logstore.root": str(tmp_path), "subscribe": "t"}, streaming=True))
    assert {p: v.high_watermark for p, v in planner.views()["t"].items()} == {0: 5, 1: 5}
    store.delete_topic("t")
    with pytest.raises(UnknownTopicOrPartitionError):
        planner.views()
    store.create_topic("t", 3)
    for _ in range(7):  # past the old table's version: read as the old table, these would be commits 6 and 7
        store.append("t", [ProducerBatch(input_table([2], [b"c"]))])
    assert {p: v.high_watermark for p, v in planner.views()["t"].items()} == {0: 0, 1: 0, 2: 7}


def test_a_pattern_skips_a_topic_deleted_between_listing_and_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path)
    for name in ("logs-a", "logs-b"):
        store.create_topic(name, 1)
        store.append(name, [ProducerBatch(input_table([0], [b"x"]))])
    planner = Planner(
        SourceOptions.parse({"logstore.root": str(tmp_path), "subscribePattern": "logs-.*"}, streaming=True)
    )
    assert sorted(planner.views()) == ["logs-a", "logs-b"]
    listed = planner.catalog.list_topics()  # what a listing just before the delete saw
    store.delete_topic("logs-b")
    monkeypatch.setattr(planner.catalog, "list_topics", lambda: listed)
    assert sorted(planner.views()) == ["logs-a"]
