"""``logstore topics create | list | describe | alter | delete``: on the root, or through ``--server``."""

from __future__ import annotations

import argparse
from typing import Any

from logstore.config import LogstoreConfig
from logstore_cli._common import Parents, Subparsers, backend, parse_kv, print_table

__all__ = ["describe", "register"]


def register(sub: Subparsers, parents: Parents) -> None:
    """Add ``topics`` and its actions: on the root, or through ``--server``."""
    common = [parents.server]
    topics = sub.add_parser("topics", help="create, list, describe, alter, delete topics", parents=common)
    tsub = topics.add_subparsers(dest="action", required=True, title="actions")
    p = tsub.add_parser("create", parents=common, help="create a topic (a new store, on a --root that has none)")
    p.add_argument("name", help="the topic's name")
    p.add_argument("--partitions", type=int, required=True, help="how many partitions")
    p.add_argument(
        "--config", dest="config_kv", action="append", metavar="KEY=VALUE", help="a topic config (repeatable)"
    )
    p.set_defaults(func=_create)
    p = tsub.add_parser("list", parents=common, help="every topic's name")
    p.set_defaults(func=_list)
    p = tsub.add_parser("describe", parents=common, help="a topic's configs, and each partition's offsets and files")
    p.add_argument("name", help="the topic's name")
    p.set_defaults(func=describe)
    p = tsub.add_parser("alter", parents=common, help="add partitions, set or delete configs")
    p.add_argument("name", help="the topic's name")
    p.add_argument("--partitions", type=int, help="the new partition count (only ever more)")
    p.add_argument(
        "--config", dest="config_kv", action="append", metavar="KEY=VALUE", help="set a topic config (repeatable)"
    )
    p.add_argument(
        "--delete-config", action="append", metavar="KEY", help="back to the default for this config (repeatable)"
    )
    p.set_defaults(func=_alter)
    p = tsub.add_parser("delete", parents=common, help="delete a topic and its records")
    p.add_argument("name", help="the topic's name")
    p.set_defaults(func=_delete)


def _create(args: argparse.Namespace, config: LogstoreConfig) -> None:
    info = backend(args, config, creates=True).create_topic(args.name, args.partitions, parse_kv(args.config_kv))
    print(f"Created topic {info.name} with {len(info.partitions)} partitions.")


def _list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    print_table(["TOPIC"], [[name] for name in backend(args, config).list_topics()])


def describe(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """``topics describe NAME``: one line for the topic and its config overrides, then a table of its partitions."""
    info = backend(args, config).describe_topic(args.name)
    overrides = ",".join(f"{k}={v}" for k, v in sorted(info.overrides.items()))
    print(f"Topic: {info.name}\tTopicId: {info.topic_id}\tPartitionCount: {len(info.partitions)}\tConfigs: {overrides}")
    print_table(
        ["PARTITION", "LOG-START-OFFSET", "HIGH-WATERMARK", "SIZE-BYTES", "FILES"],
        [[p.partition, p.log_start_offset, p.high_watermark, p.size_bytes, p.num_files] for p in info.partitions],
    )


def _alter(args: argparse.Namespace, config: LogstoreConfig) -> None:
    kv: dict[str, Any] = dict(parse_kv(args.config_kv))
    kv |= {k: None for k in args.delete_config or []}
    info = backend(args, config).alter_topic(args.name, config=kv, partitions=args.partitions)
    print(f"Altered topic {info.name}: {len(info.partitions)} partitions.")


def _delete(args: argparse.Namespace, config: LogstoreConfig) -> None:
    backend(args, config).delete_topic(args.name)
    print(f"Deleted topic {args.name}.")
