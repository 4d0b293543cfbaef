"""``logstore transactions list | describe | abort``: Kafka's ``kafka-transactions.sh`` over a running node.

The transaction coordinator lives in the node (docs/transactions.md), so these ask it: ``--server``, else
the node the config describes. ``abort`` is for a transaction whose producer is gone: it is aborted at once
(nothing of it ever shows) and its producer fenced, instead of waiting for its ``transaction_timeout_ms``.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from logstore.client import RemoteStore
from logstore.config import LogstoreConfig
from logstore_cli._common import Parents, Subparsers, remote

__all__ = ["register"]


def register(sub: Subparsers, parents: Parents) -> None:
    """Add ``transactions`` and its actions."""
    common = [parents.server]
    txns = sub.add_parser(
        "transactions", help="transactional producers: list, describe, abort (kafka-transactions.sh)", parents=common
    )
    tsub = txns.add_subparsers(dest="action", required=True, title="actions")
    p = tsub.add_parser("list", parents=common, help="every transactional id, its producer id and state")
    p.set_defaults(func=_list)
    for action, what in (
        ("describe", "a transactional id's state, epoch, timeout and the partitions of its transaction"),
        ("abort", "abort a transactional id's open transaction and fence its producer"),
    ):
        p = tsub.add_parser(action, parents=common, help=what)
        p.add_argument("--transactional-id", required=True, metavar="T", help="the producer's transactional.id")
        p.set_defaults(func=_describe if action == "describe" else _abort)


def _remote(args: argparse.Namespace, config: LogstoreConfig) -> RemoteStore:
    from logstore.node.membership import advertised_url

    return remote(args, getattr(args, "server", None) or advertised_url(config))


def _list(args: argparse.Namespace, config: LogstoreConfig) -> int:
    answer = _remote(args, config).request("GET", "/v1/transactions")
    print("TransactionalId\tProducerId\tProducerEpoch\tTransactionState")
    for t in answer["transactions"]:
        print(f"{t['transactional_id']}\t{t['producer_id']}\t{t['producer_epoch']}\t{t['state']}")
    return 0


def _describe(args: argparse.Namespace, config: LogstoreConfig) -> int:
    t = _remote(args, config).request("GET", f"/v1/transactions/{quote(args.transactional_id, safe='')}")
    partitions = ",".join(f"{x['topic']}-{p}" for x in t["topics"] for p in x["partitions"])
    print(
        "TransactionalId\tProducerId\tProducerEpoch\tTransactionState\tTransactionTimeoutMs"
        "\tTransactionStartTime\tTopicPartitions"
    )
    print(
        f"{t['transactional_id']}\t{t['producer_id']}\t{t['producer_epoch']}\t{t['state']}"
        f"\t{t['transaction_timeout_ms']}\t{_time(t['transaction_start_ms'])}\t{partitions or 'None'}"
    )
    return 0


def _abort(args: argparse.Namespace, config: LogstoreConfig) -> int:
    path = f"/v1/transactions/{quote(args.transactional_id, safe='')}"
    server = _remote(args, config)
    server.request("POST", f"{path}/abort", json={"producer_epoch": None})
    t: dict[str, Any] = server.request("GET", path)
    print(f"Transactional id {args.transactional_id}: {t['state']}, producer epoch {t['producer_epoch']}")
    return 0


def _time(ms: int | None) -> str:
    return "None" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
