"""``logstore cluster status`` and ``logstore cluster elect-leaders``: a cluster's leaders, seen and moved.

``status`` prints nodes, controller and every partition's leader from
``GET /v1/metadata``; ``elect-leaders`` is ``kafka-leader-election
--election-type preferred`` over ``POST /v1/cluster/elect-leaders``.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from logstore.client import RemoteStore
from logstore.config import LogstoreConfig
from logstore.errors import InvalidRequestError
from logstore_cli._common import Parents, Subparsers, remote

__all__ = ["register"]

PROBE_TIMEOUT_S = 2.0
"""How long ``cluster status`` waits for a registered node's ``/healthz`` before it calls the node unreachable."""


def register(sub: Subparsers, parents: Parents) -> None:
    """Add ``cluster`` and its actions: they ask a node (``--server``, else the config's own)."""
    common = [parents.server]
    cluster = sub.add_parser("cluster", help="nodes, controller and partition leaders of a cluster", parents=common)
    csub = cluster.add_subparsers(dest="action", required=True, title="actions")
    p = csub.add_parser(
        "status", parents=common, help="nodes, controller, leaders; exit status 1 when a partition has no live leader"
    )
    p.set_defaults(func=_status)
    e = csub.add_parser(
        "elect-leaders",
        parents=common,
        help="move partitions to their preferred leaders (kafka-leader-election --election-type preferred)",
    )
    e.add_argument(
        "--topic", metavar="T", help="only this topic's partitions (default: every partition of every topic)"
    )
    e.add_argument("--partition", type=int, metavar="P", help="only this partition of --topic")
    e.add_argument(
        "--timeout-ms", type=int, default=30_000, metavar="MS", help="how long the node waits for the hand-overs"
    )
    e.set_defaults(func=_elect_leaders)


def _remote(args: argparse.Namespace, config: LogstoreConfig) -> RemoteStore:
    """``--server``, else the node this config describes (``advertised.url``, else ``server.host``/``server.port``)."""
    from logstore.node.membership import advertised_url

    return remote(args, getattr(args, "server", None) or advertised_url(config))


def _status(args: argparse.Namespace, config: LogstoreConfig) -> int:
    """Print the cluster as a node sees it; exit 1 if a partition is under-led.

    Under-led: the partition has no leader (-1), its leader is not a live
    node (no ``/brokers/ids/<id>`` registration: dead, its session expired),
    or its leader is registered but does not answer ``GET /healthz`` within
    ``PROBE_TIMEOUT_S`` — a node killed without warning stays registered
    until ZooKeeper expires its session (``zookeeper.session.timeout.ms``),
    but it serves nothing meanwhile. A partition being handed over to its
    preferred leader says so; it is led.
    """
    remote = _remote(args, config)
    md = remote.metadata()
    reachable = _probe(remote, md["nodes"])
    live = {n["node_id"] for n in md["nodes"]}
    controller = md["controller"]
    shown = "none (election under way)" if controller is None else controller
    print(f"Controller: {shown}\tControllerEpoch: {md['controller_epoch']}")
    for n in md["nodes"]:
        role = "\t(controller)" if n["node_id"] == controller else ""
        down = "" if reachable[n["node_id"]] else "\tUNREACHABLE"
        print(f"Node: {n['node_id']}\tUrl: {n['url']}{role}{down}")
    under = []
    for t in md["topics"]:
        for p in t["partitions"]:
            flag = _leader_flag(p["leader"], live, reachable)
            if flag:
                under.append(f"{t['name']}-{p['partition']} ({flag})")
            handover = p.get("handover_to")
            moving = "" if handover is None else f"\tHandingOverTo: {handover}"
            print(
                f"\tTopic: {t['name']}\tPartition: {p['partition']}\tLeader: {p['leader']}"
                f"\tLeaderEpoch: {p['leader_epoch']}{moving}{f'{chr(9)}UNDER-LED ({flag})' if flag else ''}"
            )
    print(f"Under-led partitions: {len(under)}{': ' + ', '.join(under) if under else ''}")
    return 1 if under else 0


def _leader_flag(leader: int, live: set[int], reachable: dict[int, bool]) -> str:
    """Why a partition is under-led (``no leader``, ``leader N not registered``, ``leader N unreachable``) or ""."""
    if leader < 0:
        return "no leader"
    if leader not in live:
        return f"leader {leader} not registered"
    if not reachable.get(leader, False):
        return f"leader {leader} unreachable"
    return ""


def _probe(remote: RemoteStore, nodes: list[dict[str, Any]]) -> dict[int, bool]:
    """node id → whether it answers ``GET /healthz`` within ``PROBE_TIMEOUT_S`` (all nodes at once)."""
    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
        results = pool.map(lambda url: remote.node_answers(url, timeout_s=PROBE_TIMEOUT_S), [n["url"] for n in nodes])
        return {n["node_id"]: ok for n, ok in zip(nodes, results, strict=True)}


def _elect_leaders(args: argparse.Namespace, config: LogstoreConfig) -> int:
    """Ask for a preferred-leader election and print Kafka's summary; exit 1 when a partition could not move.

    Raises:
        InvalidRequestError: ``--partition`` without ``--topic``.
    """
    if args.partition is not None and not args.topic:
        raise InvalidRequestError("--partition needs --topic (the partition of which topic?)")
    wanted = None if not args.topic else [{"topic": args.topic, "partition": args.partition}]
    answer = _remote(args, config).request(
        "POST", "/v1/cluster/elect-leaders", json={"partitions": wanted}, params={"timeout_ms": args.timeout_ms}
    )
    elected, not_needed, failed = [], [], []
    for r in answer["partitions"]:
        name = f"{r['topic']}-{r['partition']}"
        if r["error"] is None:
            elected.append(name)
        elif r["error"] == "ELECTION_NOT_NEEDED":
            not_needed.append(name)
        else:
            failed.append(f"{name}: {r['error']} (leader {r['leader']}, preferred {r['preferred']})")
    if elected:
        print(f"Successfully completed leader election (PREFERRED) for partitions {', '.join(elected)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    for line in failed:
        print(f"Error completing leader election (PREFERRED) for partition {line}")
    if not (elected or not_needed or failed):
        print("No partition to elect a leader for")
    return 1 if failed else 0
