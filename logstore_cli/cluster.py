"""``logstore cluster status``: nodes, controller and every partition's leader, from ``GET /v1/metadata``."""

from __future__ import annotations

import argparse

from logstore.config import LogstoreConfig
from logstore_cli._common import Parents, Subparsers, remote

__all__ = ["register"]


def register(sub: Subparsers, parents: Parents) -> None:
    """Add ``cluster`` and its actions: they ask a node (``--server``, else the config's own)."""
    common = [parents.server]
    cluster = sub.add_parser("cluster", help="nodes, controller and partition leaders of a cluster", parents=common)
    csub = cluster.add_subparsers(dest="action", required=True, title="actions")
    p = csub.add_parser(
        "status", parents=common, help="nodes, controller, leaders; exit status 1 when a partition has no live leader"
    )
    p.set_defaults(func=_status)


def _status(args: argparse.Namespace, config: LogstoreConfig) -> int:
    """Print the cluster as a node sees it; exit 1 if a partition is under-led.

    Under-led: the partition's leader is none (-1) or not a live node. Without
    ``--server`` it asks the node this config describes (``advertised.url``,
    else ``server.host``/``server.port``).
    """
    from logstore.node.membership import advertised_url

    server = getattr(args, "server", None) or advertised_url(config)
    md = remote(args, server).metadata()
    live = {n["node_id"] for n in md["nodes"]}
    controller = md["controller"]
    shown = "none (election under way)" if controller is None else controller
    print(f"Controller: {shown}\tControllerEpoch: {md['controller_epoch']}")
    for n in md["nodes"]:
        role = "\t(controller)" if n["node_id"] == controller else ""
        print(f"Node: {n['node_id']}\tUrl: {n['url']}{role}")
    under = []
    for t in md["topics"]:
        for p in t["partitions"]:
            led = p["leader"] in live
            if not led:
                under.append(f"{t['name']}-{p['partition']}")
            flag = "" if led else "\tUNDER-LED"
            print(
                f"\tTopic: {t['name']}\tPartition: {p['partition']}\tLeader: {p['leader']}"
                f"\tLeaderEpoch: {p['leader_epoch']}{flag}"
            )
    print(f"Under-led partitions: {len(under)}{': ' + ', '.join(under) if under else ''}")
    return 1 if under else 0
