"""``logstore topics describe`` shows the topic's ID, as ``kafka-topics --describe`` does (``TopicId:``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from logstore.config import load_config
from logstore.log.catalog import Catalog
from logstore_cli.cli import main


def test_topics_describe_shows_the_topic_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(tmp_path / "data")
    assert main(["--root", root, "topics", "create", "t", "--partitions", "2"]) == 0
    capsys.readouterr()
    assert main(["--root", root, "topics", "describe", "t"]) == 0
    topic_id = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": root})).topic_id("t")
    assert topic_id is not None
    assert f"Topic: t\tTopicId: {topic_id}\tPartitionCount: 2" in capsys.readouterr().out
