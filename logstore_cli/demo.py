"""``logstore demo``: the store end to end on the root (create a topic, produce, consume with a group, describe)."""

from __future__ import annotations

import argparse

from logstore.config import LogstoreConfig
from logstore.log.partitioner import Partitioner
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import AppendResult, ProducerBatch
from logstore_cli import groups, topics
from logstore_cli._common import Parents, Subparsers

__all__ = ["register"]


def register(sub: Subparsers, parents: Parents) -> None:
    """Add ``demo``: it works on the root (``--root``) only."""
    p = sub.add_parser(
        "demo", help="create a topic, produce, consume with a group, describe (on --root)", parents=[parents.store]
    )
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """Create a topic, produce, consume with a group, describe: the store end to end."""
    store = LogStore(config)
    name = "demo"
    if name not in store.list_topics():
        store.create_topic(name, 3)
    partitioner = Partitioner()
    keys: list[bytes | None] = [f"user-{i % 5}".encode() for i in range(30)]
    values: list[bytes | None] = [f"event {i}".encode() for i in range(30)]
    parts = partitioner.assign(name, keys, [None] * 30, 3)
    (result,) = store.append(name, [ProducerBatch(input_table(parts, values, keys))])
    assert isinstance(result, AppendResult)
    print(f"produced 30 records to '{name}' in Delta version {result.table_version}")
    topics.describe(argparse.Namespace(name=name), config)
    info = store.describe_topic(name)
    for p in info.partitions:
        recs = store.fetch(name, p.partition, max(p.log_start_offset, p.high_watermark - 3)).records
        for off, key, value in zip(
            recs["offset"].to_pylist(), recs["key"].to_pylist(), recs["value"].to_pylist(), strict=True
        ):
            print(f"  partition {p.partition} offset {off}: {key!r} -> {value!r}")
    store.commit_offsets("demo-group", name, {p.partition: p.high_watermark for p in info.partitions})
    groups.describe(argparse.Namespace(group="demo-group"), config)
    print(f"topic table: {store.catalog.topic_path(name)} (a Delta table: query it with Spark SQL)")
