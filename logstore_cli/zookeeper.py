"""``logstore zookeeper start``: run Apache ZooKeeper, cluster mode's coordinator, in the foreground."""

from __future__ import annotations

import argparse
import os

from logstore.config import LogstoreConfig
from logstore.errors import InvalidConfigError
from logstore_cli._common import Parents, Subparsers

__all__ = ["register"]


def register(sub: Subparsers, parents: Parents) -> None:
    """Add ``zookeeper`` and its actions (``--root`` only: the default data directory is under it)."""
    common = [parents.store]
    zk = sub.add_parser("zookeeper", help="run Apache ZooKeeper, the cluster's coordinator", parents=common)
    zsub = zk.add_subparsers(dest="action", required=True, title="actions")
    p = zsub.add_parser("start", parents=common, help="run a ZooKeeper server in the foreground")
    p.add_argument("--port", type=int, default=2181, help="client port")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--data-dir", help="snapshots and logs (default: <root>/_zookeeper)")
    p.add_argument("--id", type=int, default=1, help="this server's id in the ensemble (with --peer)")
    p.add_argument(
        "--peer",
        action="append",
        metavar="HOST:QUORUM_PORT:ELECTION_PORT",
        help="an ensemble member, in id order (1, 2, …), this server included; none = standalone",
    )
    p.set_defaults(func=_start)


def _start(args: argparse.Namespace, config: LogstoreConfig) -> int:
    """Run a standalone ZooKeeper server (or one ensemble member) in the foreground."""
    from logstore.cluster.zookeeper_server import ZooKeeperServer

    peers: tuple[tuple[int, str, int, int], ...] = ()
    for i, spec in enumerate(args.peer or [], start=1):
        host, _, ports = spec.rpartition(":")
        host, _, quorum = host.rpartition(":")
        if not (host and quorum.isdigit() and ports.isdigit()):
            raise InvalidConfigError(f"--peer takes HOST:QUORUM_PORT:ELECTION_PORT, got '{spec}'")
        peers += ((i, host, int(quorum), int(ports)),)
    server = ZooKeeperServer(
        args.data_dir or os.path.join(config.root, "_zookeeper"),
        port=args.port,
        host=args.host,
        server_id=args.id if peers else None,
        peers=peers,
    )
    print(f"ZooKeeper on {server.connect}, data in {server.data_dir}", flush=True)
    server.exec()
    return 0
