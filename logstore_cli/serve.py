"""``logstore serve``: run the HTTP API (``ingest_api``) and the Kafka listener (``kafka_api``) in the foreground."""

from __future__ import annotations

import argparse
from typing import Any

from logstore.config import LogstoreConfig
from logstore_cli._common import Parents, Subparsers

__all__ = ["register"]


def register(sub: Subparsers, parents: Parents) -> None:
    """Add ``serve``: it serves the root (``--root``)."""
    p = sub.add_parser(
        "serve", help="run the HTTP API over the store (until SIGTERM or Ctrl-C)", parents=[parents.store]
    )
    p.add_argument("--host", help="address to listen on (default: the config's server.host)")
    p.add_argument("--port", type=int, help="port to listen on (default: the config's server.port)")
    p.add_argument(
        "--listeners",
        help="Kafka protocol listener, PLAINTEXT|SASL_PLAINTEXT|SASL_SSL://host:port, '' = off "
        "(default: the config's listeners)",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="serve on a non-loopback address with security.enabled=false (anyone reachable gets full access)",
    )
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """Run the HTTP API (``ingest_api``) until SIGTERM/SIGINT, with ``--host``/``--port``/``--insecure`` applied."""
    # Imported here: the other commands do not pay for FastAPI and uvicorn at start-up.
    from ingest_api.serve import serve

    overrides: dict[str, Any] = {}
    if args.host:
        overrides["server.host"] = args.host
    if args.port is not None:
        overrides["server.port"] = args.port
    if args.listeners is not None:
        overrides["listeners"] = args.listeners
    config = config.with_overrides(overrides)
    doors = []
    if config.listeners.strip():  # the Kafka protocol's modules (~0.3 s to import) only for a node that serves it
        from kafka_api.server import bind_listener, kafka_door

        # Bound before the node starts: a configured listener that cannot bind stops the start here.
        sock = bind_listener(config, insecure=args.insecure)
        if sock is not None:
            doors.append(lambda broker, guard, txns: kafka_door(broker, config, sock, guard, txns))
    if not doors:  # off, or the default port was taken: in cluster mode the node registers no Kafka listener
        config = config.with_overrides({"listeners": ""})
    serve(config, insecure=args.insecure, doors=doors)
