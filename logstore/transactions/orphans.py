"""Removal of staged records no transaction will use: what a crash or a failed delete left in ``_staged/``.

A transaction's records wait under
``<root>/_transactions/_staged/<transactional id>/<transaction seq>/`` (see
:mod:`logstore.transactions._staging`) until it commits or aborts, and its
coordinator deletes them then. A crash between writing ``CompleteCommit`` /
``CompleteAbort`` and that delete, a delete that failed, or an id whose state
was lost, leaves them behind; a node that starts cleans up after itself, but a
root no node serves any more keeps them for ever. The ``transactions``
maintenance job calls :func:`remove_orphaned_staging`.

A staged transaction is an orphan when the newest state row of its id does not
name it as the id's open or decided transaction (``Ongoing``,
``PrepareCommit``, ``PrepareAbort`` with that ``transaction_seq``) and nothing
in it was written for longer than the id's transaction timeout (or
``transaction.max.timeout.ms`` for an id without state). Safe beside a live
node: a coordinator writes a transaction's ``Ongoing`` row before it stages
anything, and the directories are listed before the state is read, so a
transaction begun meanwhile is seen open; a decided commit's records are never
removed, however old.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from urllib.parse import unquote

from logstore.errors import KafkaStorageError
from logstore.transactions._state_log import StateLog
from logstore.transactions.coordinator import ONGOING, PREPARE_ABORT, PREPARE_COMMIT

__all__ = ["RemovedStaging", "remove_orphaned_staging"]

_LIVE = (ONGOING, PREPARE_COMMIT, PREPARE_ABORT)


@dataclass(frozen=True)
class RemovedStaging:
    """One orphaned staged transaction that was removed."""

    transactional_id: str
    transaction_seq: int
    files: int
    bytes: int
    age_ms: int
    """How long before the removal its newest file was written."""


def remove_orphaned_staging(root: str, *, max_timeout_ms: int, now_ms: int | None = None) -> list[RemovedStaging]:
    """Remove every orphaned staged transaction under ``<root>/_transactions/_staged/``; what was removed.

    Runs wherever it is called (the maintenance driver), on a local root.

    Args:
        root: the store's ``logstore.root``.
        max_timeout_ms: ``transaction.max.timeout.ms``: the age past which an id without state is orphaned.
        now_ms: wall clock, ms since the epoch (default: now).

    Raises:
        KafkaStorageError: ``_transactions`` could not be read (nothing is removed then).
    """
    log = StateLog(root, fsync=False)
    staged = os.path.join(log.path, "_staged")
    try:
        found = [
            (name, seq)
            for name in sorted(os.listdir(staged))
            for seq in sorted(os.listdir(os.path.join(staged, name)))
            if seq.isdigit()
        ]
    except FileNotFoundError:
        return []
    except OSError as e:
        raise KafkaStorageError(f"cannot list the staged transactions under {staged}: {e}") from e
    try:
        rows = log.load()  # after listing: a transaction staged before the listing began has its row in here
    finally:
        log.close()
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    removed = []
    for name, seq_text in found:
        tid, seq = unquote(name), int(seq_text)
        row = rows.get(tid)
        if row is not None and row.transaction_seq == seq and row.state in _LIVE:
            continue
        d = os.path.join(staged, name, seq_text)
        files, size, newest_ms = _contents(d)
        timeout = row.timeout_ms if row is not None else max_timeout_ms
        if newest_ms is None or now - newest_ms <= timeout:
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(RemovedStaging(tid, seq, files, size, now - newest_ms))
    return removed


def _contents(d: str) -> tuple[int, int, int | None]:
    """Files, bytes and the newest modification time (ms; the directory's own for an empty one) under ``d``."""
    files = size = 0
    try:
        newest = os.stat(d).st_mtime_ns
        for parent, _dirs, names in os.walk(d):
            for n in names:
                st = os.stat(os.path.join(parent, n))
                files, size, newest = files + 1, size + st.st_size, max(newest, st.st_mtime_ns)
    except FileNotFoundError:  # removed meanwhile (its coordinator finished it)
        return files, size, None
    return files, size, newest // 1_000_000
