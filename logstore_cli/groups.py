"""``logstore groups list | describe | reset``: consumer groups' committed offsets, lag and (through ``--server``)
live members."""

from __future__ import annotations

import argparse
import datetime

from logstore.client import RemoteStore
from logstore.config import LogstoreConfig
from logstore.errors import InvalidRequestError
from logstore_cli._common import Subparsers, backend

__all__ = ["describe", "register"]


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add ``groups`` and its actions; ``common`` holds the options every command takes."""
    groups = sub.add_parser("groups", help="consumer groups", parents=[common])
    gsub = groups.add_subparsers(dest="action", required=True)
    p = gsub.add_parser("list", parents=[common])
    p.set_defaults(func=_list)
    p = gsub.add_parser("describe", parents=[common])
    p.add_argument("group")
    p.set_defaults(func=describe)

    p = gsub.add_parser("reset", parents=[common], help="move a group's offsets on a topic")
    p.add_argument("group")
    p.add_argument("--topic", required=True)
    p.add_argument("--to", required=True, help="earliest | latest | OFFSET | DATETIME (ISO 8601, UTC if no zone)")
    p.add_argument(
        "--force",
        action="store_true",
        help="wait for the group's reader of the topic (a Spark query, members) to be gone instead of refusing",
    )
    p.set_defaults(func=_reset)


def _list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    for g in backend(args, config).list_groups():
        print(g)


def describe(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """``groups describe GROUP``: committed offsets with lag; through a server, also each partition's live owner
    and its generation."""
    store = backend(args, config)
    members = store.group_members(args.group) if isinstance(store, RemoteStore) else []
    rows = store.describe_group(args.group)
    owners = {(tp.topic, tp.partition): m for m in members for tp in m.assignment}
    tail = f"  {'CONSUMER-ID':<39} {'GENERATION':>10}" if members else ""
    print(
        f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':>9} {'CURRENT-OFFSET':>14} {'LOG-END-OFFSET':>14} {'LAG':>8}{tail}"
    )
    for r in rows:
        owner = owners.pop((r.topic, r.partition), None)
        tail = f"  {owner.member_id if owner else '-':<39} {owner.generation if owner else '-':>10}" if members else ""
        print(
            f"{r.group:<20} {r.topic:<20} {r.partition:>9} {r.committed_offset:>14} {r.high_watermark:>14} {r.lag:>8}"
            + tail
        )
    dash = "-"
    for (topic, partition), owner in sorted(owners.items()):  # assigned, nothing committed yet
        print(
            f"{args.group:<20} {topic:<20} {partition:>9} {dash:>14} {dash:>14} {dash:>8}"
            f"  {owner.member_id:<39} {owner.generation:>10}"
        )
    for m in members:
        if not m.assignment:
            print(
                f"{args.group:<20} {dash:<20} {dash:>9} {dash:>14} {dash:>14} {dash:>8}"
                f"  {m.member_id:<39} {m.generation:>10}"
            )


def _reset(args: argparse.Namespace, config: LogstoreConfig) -> None:
    to: str | dict[str, int]
    if args.to in ("earliest", "latest"):
        to = args.to
    elif args.to.lstrip("-").isdigit():
        to = {"offset": int(args.to)}
    else:
        try:
            when = datetime.datetime.fromisoformat(args.to)
        except ValueError:
            raise InvalidRequestError(
                f"--to takes earliest, latest, an offset or an ISO date-time, got '{args.to}'"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        to = {"timestamp": int(when.timestamp() * 1000)}
    new = backend(args, config).reset_offsets(args.group, args.topic, to, force=args.force)
    for p, o in sorted(new.items()):
        print(f"{args.group} {args.topic} {p} {o}")
