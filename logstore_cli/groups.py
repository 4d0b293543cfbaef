"""``logstore groups list | describe | reset | delete``: consumer groups' committed offsets, lag and (through
``--server``) live members; a reset is a dry run unless ``--execute``, as with ``kafka-consumer-groups
--reset-offsets``."""

from __future__ import annotations

import argparse
import datetime
import sys

from logstore.client import RemoteStore
from logstore.config import LogstoreConfig
from logstore.errors import InvalidRequestError
from logstore_cli._common import Parents, Subparsers, backend, print_table

__all__ = ["describe", "register"]


def register(sub: Subparsers, parents: Parents) -> None:
    """Add ``groups`` and its actions: on the root, or through ``--server``."""
    common = [parents.server]
    groups = sub.add_parser(
        "groups",
        help="list, describe and reset consumer groups (a reset is a dry run without --execute)",
        parents=common,
    )
    gsub = groups.add_subparsers(dest="action", required=True, title="actions")
    p = gsub.add_parser("list", parents=common, help="every group with committed offsets (or, by server, live members)")
    p.set_defaults(func=_list)
    p = gsub.add_parser(
        "describe", parents=common, help="committed offsets and lag per partition; by server, also live members"
    )
    p.add_argument("group", help="the group id")
    p.set_defaults(func=describe)

    p = gsub.add_parser(
        "reset",
        parents=common,
        help="move a group's offsets: prints the plan, and applies it only with --execute",
        description="Move a group's committed offsets, as kafka-consumer-groups --reset-offsets: without --execute "
        "it only prints GROUP TOPIC PARTITION CURRENT-OFFSET NEW-OFFSET. The group must be inactive (no live "
        "member, no Spark query reading the topic for it). Every new offset is clamped into the partition's "
        "[log start, high watermark].",
    )
    p.add_argument("group", help="the group id")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", help="reset the group's offsets on this topic (repeatable)")
    which.add_argument("--all-topics", action="store_true", help="every topic the group has committed offsets on")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset of each partition")
    to.add_argument("--to-latest", action="store_true", help="the high watermark of each partition")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N on every partition")
    to.add_argument(
        "--shift-by", type=int, metavar="N", help="the committed offset plus N (negative: back); needs a commit"
    )
    to.add_argument(
        "--to-datetime",
        metavar="ISO",
        help="the first record at or after this time, e.g. 2024-05-01T12:00:00.000 (UTC unless a zone is given)",
    )
    to.add_argument(
        "--to", metavar="TARGET", help="earliest | latest | OFFSET | DATETIME: the older spelling of the options above"
    )
    run = p.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="apply the new offsets (without it: a dry run)")
    run.add_argument("--dry-run", action="store_true", help="only print the new offsets (the default)")
    p.add_argument(
        "--force",
        action="store_true",
        help="wait for the group's reader of the topic (a Spark query, members) to be gone instead of refusing",
    )
    p.set_defaults(func=_reset)

    p = gsub.add_parser(
        "delete",
        parents=common,
        help="delete groups' committed offsets; refused (NON_EMPTY_GROUP) while a group has live readers",
    )
    p.add_argument("group", nargs="+", help="the group ids")
    p.set_defaults(func=_delete)


def _list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    print_table(["GROUP"], [[g] for g in backend(args, config).list_groups()])


def describe(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """``groups describe GROUP``: committed offsets with lag; through a server, also each partition's live owner
    and its generation, and members with no partition."""
    store = backend(args, config)
    members = store.group_members(args.group) if isinstance(store, RemoteStore) else []
    rows = store.describe_group(args.group)
    owners = {(tp.topic, tp.partition): m for m in members for tp in m.assignment}
    headers = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    table: list[list[object]] = []
    for r in rows:
        owner = owners.pop((r.topic, r.partition), None)
        live = [owner.member_id, owner.generation] if owner else [None, None]
        table.append([r.group, r.topic, r.partition, r.committed_offset, r.high_watermark, r.lag, *live])
    for (topic, partition), owner in sorted(owners.items()):  # assigned, nothing committed yet
        table.append([args.group, topic, partition, None, None, None, owner.member_id, owner.generation])
    for m in members:
        if not m.assignment:
            table.append([args.group, None, None, None, None, None, m.member_id, m.generation])
    if members:
        headers += ["CONSUMER-ID", "GENERATION"]
    else:
        table = [row[:6] for row in table]
    print_table(headers, table)


def _reset(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """Print GROUP TOPIC PARTITION CURRENT-OFFSET NEW-OFFSET for every partition; commit them with ``--execute``."""
    store = backend(args, config)
    target = _target(args)
    topics = args.topic or sorted({r.topic for r in store.describe_group(args.group)})
    rows = []
    for topic in topics:
        current = {k.partition: c.offset for k, c in store.committed(args.group, topic).items()}
        new = store.reset_offsets(args.group, topic, target, force=args.force, dry_run=not args.execute)
        rows += [[args.group, topic, p, current.get(p), o] for p, o in sorted(new.items())]
    print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], rows)
    if not args.execute:
        print("Dry run: no offset changed. Add --execute to apply these.", file=sys.stderr)


def _delete(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """Delete each group in turn, as ``kafka-consumer-groups --delete``; the first refusal stops the command."""
    store = backend(args, config)
    for group in args.group:
        store.delete_group(group)
        print(f"Deleted consumer group '{group}'.")


def _target(args: argparse.Namespace) -> str | dict[str, int]:
    """The reset target the options name, as :meth:`~logstore.protocols.Store.reset_offsets` takes it.

    Raises:
        InvalidRequestError: ``--to`` or ``--to-datetime`` is no target or no ISO date-time.
    """
    if args.to_earliest:
        return "earliest"
    if args.to_latest:
        return "latest"
    if args.to_offset is not None:
        return {"offset": args.to_offset}
    if args.shift_by is not None:
        return {"shift_by": args.shift_by}
    if args.to_datetime is not None:
        return {"timestamp": _timestamp_ms(args.to_datetime, "--to-datetime")}
    if args.to in ("earliest", "latest"):
        return str(args.to)
    if args.to.lstrip("-").isdigit():
        return {"offset": int(args.to)}
    return {"timestamp": _timestamp_ms(args.to, "--to")}


def _timestamp_ms(text: str, option: str) -> int:
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        hint = "earliest, latest, an offset or " if option == "--to" else ""
        raise InvalidRequestError(
            f"{option} takes {hint}an ISO date-time (2024-05-01T12:00:00.000, UTC unless a zone is given), got '{text}'"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)
