"""A topic's (or ``_offsets``') Delta table as logstore keeps it: opening, refreshing, syncing, app transactions.

The public face of the core's Delta conventions for the layers above it
(``maintenance``, ``spark_sink``); the core's own modules use the private
``logstore.log._delta`` these names come from. What each ``txn`` app id holds:

* :data:`APP_EPOCH` — the committer's leader epoch (fences a stale committer);
* :func:`app_hw` — a partition's high watermark after the commit;
* :func:`app_producer_max` — the highest sequence an idempotent producer
  committed on the topic (its sequences per partition are
  ``logstore.seq.<p>.<id>``, read by the writer);
* :func:`app_producer` — a producer's last sequence on the topic as tables
  written before per-partition sequences hold it (read, no longer written).

A commit made with delta-rs directly is durable only after :func:`sync_commits`.
"""

from __future__ import annotations

from logstore.log._delta import (
    APP_EPOCH,
    app_hw,
    app_producer,
    app_producer_max,
    open_table,
    refresh,
    sync_commits,
    translate,
    txn_version,
)
from logstore.log.files import table_path

__all__ = [
    "APP_EPOCH",
    "app_hw",
    "app_producer",
    "app_producer_max",
    "open_table",
    "refresh",
    "sync_commits",
    "table_path",
    "translate",
    "txn_version",
]
