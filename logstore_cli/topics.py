"""``logstore topics create | list | describe | alter | delete``: on the root, or through ``--server``."""

from __future__ import annotations

import argparse
from typing import Any

from logstore.config import LogstoreConfig
from logstore_cli._common import Subparsers, backend, parse_kv

__all__ = ["describe", "register"]


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add ``topics`` and its actions; ``common`` holds the options every command takes (``--root``, ``--server``…)."""
    topics = sub.add_parser("topics", help="create, list, describe, alter, delete topics", parents=[common])
    tsub = topics.add_subparsers(dest="action", required=True)
    p = tsub.add_parser("create", parents=[common])
    p.add_argument("name")
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--config", dest="config_kv", action="append", metavar="KEY=VALUE", help="topic config override")
    p.set_defaults(func=_create)
    p = tsub.add_parser("list", parents=[common])
    p.set_defaults(func=_list)
    p = tsub.add_parser("describe", parents=[common])
    p.add_argument("name")
    p.set_defaults(func=describe)
    p = tsub.add_parser("alter", parents=[common])
    p.add_argument("name")
    p.add_argument("--partitions", type=int)
    p.add_argument("--config", dest="config_kv", action="append", metavar="KEY=VALUE")
    p.add_argument("--delete-config", action="append", metavar="KEY")
    p.set_defaults(func=_alter)
    p = tsub.add_parser("delete", parents=[common])
    p.add_argument("name")
    p.set_defaults(func=_delete)


def _create(args: argparse.Namespace, config: LogstoreConfig) -> None:
    info = backend(args, config, creates=True).create_topic(args.name, args.partitions, parse_kv(args.config_kv))
    print(f"Created topic {info.name} with {len(info.partitions)} partitions.")


def _list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    for name in backend(args, config).list_topics():
        print(name)


def describe(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """``topics describe NAME``: one line for the topic and its config overrides, then one per partition."""
    info = backend(args, config).describe_topic(args.name)
    overrides = ",".join(f"{k}={v}" for k, v in sorted(info.overrides.items()))
    print(f"Topic: {info.name}\tTopicId: {info.topic_id}\tPartitionCount: {len(info.partitions)}\tConfigs: {overrides}")
    for p in info.partitions:
        print(
            f"\tTopic: {info.name}\tPartition: {p.partition}\tLogStartOffset: {p.log_start_offset}"
            f"\tHighWatermark: {p.high_watermark}\tSizeBytes: {p.size_bytes}\tFiles: {p.num_files}"
        )


def _alter(args: argparse.Namespace, config: LogstoreConfig) -> None:
    kv: dict[str, Any] = dict(parse_kv(args.config_kv))
    kv |= {k: None for k in args.delete_config or []}
    info = backend(args, config).alter_topic(args.name, config=kv, partitions=args.partitions)
    print(f"Altered topic {info.name}: {len(info.partitions)} partitions.")


def _delete(args: argparse.Namespace, config: LogstoreConfig) -> None:
    backend(args, config).delete_topic(args.name)
    print(f"Deleted topic {args.name}.")
