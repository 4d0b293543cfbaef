"""The ``logstore`` command line: the parser, and :func:`main`, which runs a command and reports its errors."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from logstore.errors import InvalidConfigError, LogstoreError
from logstore_cli import (
    cluster,
    demo,
    groups,
    maintain,
    records,
    security,
    serve,
    topics,
    transactions,
    zookeeper,
)
from logstore_cli._common import CONNECTION_OPTIONS, Parents, Subparsers, build_parents, config_of, connection_options

__all__ = ["COMMAND_GROUPS", "DESCRIPTION", "build_parser", "main"]

COMMAND_GROUPS: tuple[Callable[[Subparsers, Parents], None], ...] = (
    topics.register,
    records.register,
    groups.register,
    transactions.register,
    serve.register,
    security.register,
    zookeeper.register,
    cluster.register,
    maintain.register,
    demo.register,
)
"""Each command group's ``register``, in the order ``logstore --help`` lists their commands."""

DESCRIPTION = """\
Kafka's model (topics, partitions, offsets, consumer groups) on Delta Lake tables.

Commands work on a store directory (--root, default: the config's logstore.root), or,
where they take --server HOST:PORT, through a running server or cluster (with --api-key
or $LOGSTORE_API_KEY, and --ca-file / --client-cert for TLS).

Keys, ACLs and quotas go through a server (--server: ALTER on the cluster to change,
DESCRIBE to list) or straight to the store (--root, or --zookeeper in cluster mode: how
the first super user's key is made). "logstore COMMAND --help" describes a command.
Errors print as ERROR_NAME: message on stderr, with exit status 1."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI (the ``logstore`` console script, ``python -m logstore_cli``); returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        _refuse_unused_connection_options(args)
        config = config_of(args)
        return int(args.func(args, config) or 0)
    except LogstoreError as e:
        print(f"{e.name}: {e.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``logstore`` parser: ``--config``, ``--root`` and the connection options, then each group's commands.

    The connection options are accepted before the command too (``logstore --server H:P topics list``) and
    refused by :func:`main` for a command that never talks to a server.
    """
    parents = build_parents()
    parser = argparse.ArgumentParser(
        prog="logstore",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[parents.store, connection_options()],
    )
    parser.add_argument(
        "--config", dest="config_file", help="TOML config file (default: $LOGSTORE_CONFIG, else conf/logstore.toml)"
    )
    sub = parser.add_subparsers(dest="command", required=True, title="commands")
    for register in COMMAND_GROUPS:
        register(sub, parents)
    return parser


def _refuse_unused_connection_options(args: argparse.Namespace) -> None:
    """A connection option given to a command that never talks to a server would be ignored: refuse it instead.

    Raises:
        InvalidConfigError: naming the option and the command.
    """
    if getattr(args, "connects", False):
        return
    for dest in CONNECTION_OPTIONS:
        if getattr(args, dest, None) is not None:
            command = " ".join(w for w in (args.command, getattr(args, "action", None)) if w)
            raise InvalidConfigError(
                f"--{dest.replace('_', '-')} is not an option of 'logstore {command}': it works on the store "
                f"(--root) and talks to no server"
            )
