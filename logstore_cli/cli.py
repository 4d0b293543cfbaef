"""The ``logstore`` command line: topics, produce, consume, groups, keys, acls, quotas, serve, maintain, zookeeper.

Every command works on a root directory directly (``--root``, default: the
config's ``logstore.root``); topics, produce, consume and groups can go through
a running server instead (``--server URL``, with ``--api-key`` /
``LOGSTORE_API_KEY`` and ``--ca-file`` when it is secured). Keys, ACLs and
quotas are managed on the store itself, never through a server: the root, or
ZooKeeper in cluster mode (``zookeeper.connect`` or ``--zookeeper``); whoever
can write it is the administrator. Errors print as ``ERROR_NAME: message`` on stderr with exit
status 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from logstore.errors import LogstoreError
from logstore_cli import cluster, demo, groups, maintain, records, security, serve, topics, zookeeper
from logstore_cli._common import Subparsers, config_of

__all__ = ["COMMAND_GROUPS", "build_parser", "main"]

COMMAND_GROUPS: tuple[Callable[[Subparsers, argparse.ArgumentParser], None], ...] = (
    topics.register,
    records.register,
    groups.register,
    serve.register,
    security.register,
    zookeeper.register,
    cluster.register,
    maintain.register,
    demo.register,
)
"""Each command group's ``register``, in the order ``logstore --help`` lists their commands."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI (the ``logstore`` console script, ``python -m logstore_cli``); returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        config = config_of(args)
        return int(args.func(args, config) or 0)
    except LogstoreError as e:
        print(f"{e.name}: {e.message}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``logstore`` parser: the options every command takes, then each command group's commands."""
    # The options every command takes, given both before and after the command's name (`--root` here and on
    # each subcommand: SUPPRESS keeps a later parser's default from overwriting an earlier value).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--root", default=argparse.SUPPRESS, help="store directory (default: the config's logstore.root)"
    )
    common.add_argument(
        "--server",
        default=argparse.SUPPRESS,
        metavar="URL[,URL…]",
        help="work through a running server (or a cluster: any of its nodes, comma-separated) instead of --root",
    )
    common.add_argument(
        "--api-key", default=argparse.SUPPRESS, help="with --server: the API key (default: $LOGSTORE_API_KEY)"
    )
    common.add_argument(
        "--ca-file", default=argparse.SUPPRESS, help="with --server https://…: CA bundle to verify the server with"
    )
    common.add_argument(
        "--client-cert",
        default=argparse.SUPPRESS,
        metavar="PEM",
        help="with --server https://…: a client certificate to present (names the principal when no API key is sent)",
    )
    common.add_argument(
        "--client-key", default=argparse.SUPPRESS, metavar="PEM", help="the private key of --client-cert"
    )

    parser = argparse.ArgumentParser(prog="logstore", description=__doc__, parents=[common])
    parser.add_argument(
        "--config", dest="config_file", help="TOML config file (default: $LOGSTORE_CONFIG, else conf/logstore.toml)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for register in COMMAND_GROUPS:
        register(sub, common)
    return parser
