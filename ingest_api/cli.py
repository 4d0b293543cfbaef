"""The ``logstore`` console script: the core's CLI plus ``logstore serve``.

``serve`` lives here because it runs the HTTP tier; ``logstore.cli`` stays
free of the web framework and takes the command as a parameter.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from logstore import cli
from logstore.config import LogstoreConfig

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``logstore`` console script; returns the exit status."""
    return cli.main(argv, serve=serve)


def serve(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """Run the HTTP API until SIGTERM/SIGINT; shutdown commits everything pending first.

    Raises:
        KafkaStorageError: another live process holds this node's WAL directory.
    """
    overrides: dict[str, Any] = {}
    if args.host:
        overrides["server.host"] = args.host
    if args.port is not None:
        overrides["server.port"] = args.port
    config = config.with_overrides(overrides)
    import uvicorn

    from ingest_api.app import create_app
    from ingest_api.broker import wal_dir_of
    from logstore.wal import DirectoryLock

    # Refuse early, with the holder's name, when another node runs on this WAL directory
    # (the node takes the lock for good when it starts; this only makes the message plain).
    wal_dir = wal_dir_of(config)
    os.makedirs(wal_dir, exist_ok=True)
    DirectoryLock(wal_dir, "the write-ahead log directory").release()

    print(f"logstore serving {config.root} on http://{config.server_host}:{config.server_port}", flush=True)
    uvicorn.run(
        create_app(config),
        host=config.server_host,
        port=config.server_port,
        log_level="warning",
        loop="uvloop",
        http="httptools",
        timeout_graceful_shutdown=30,
    )


if __name__ == "__main__":
    sys.exit(main())
