"""Log lines of the long-running commands (``serve``, ``maintain``, ``zookeeper start``), and errors named in them.

A line reads ``2026-05-01T12:00:00.123+00:00 WARNING logstore.cluster: <message>``:
the time in ISO 8601 with milliseconds, in UTC, then the level and the logger.
Audit lines (:mod:`logstore.security.audit`) keep their own handler: one JSON
object per line.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

__all__ = ["LINE_FORMAT", "IsoFormatter", "configure_logging", "describe"]

LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""What every line holds: ISO time with milliseconds, level, logger, message (a traceback below, if any)."""


class IsoFormatter(logging.Formatter):
    """Formats ``%(asctime)s`` as ISO 8601 in UTC with milliseconds (``2026-05-01T12:00:00.123+00:00``)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


def configure_logging(level: int = logging.INFO) -> None:
    """Send the process's log lines to stderr as :data:`LINE_FORMAT` says, at ``level`` and above.

    Replaces the root logger's handlers (a second call changes nothing but
    the level); library loggers (uvicorn's, kazoo's) propagate to it.
    """
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(IsoFormatter(LINE_FORMAT))
    root.handlers = [handler]
    root.setLevel(level)
    # kazoo logs every connection attempt at INFO, httpx every request a node forwards to another (a line per
    # produce in a cluster, enough to fill a log or a pipe); their warnings (a dropped connection) are kept.
    for chatty in ("kazoo", "httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


def describe(error: BaseException) -> str:
    """An exception for a log line: ``Type: message``, or its ``repr`` when its message is empty.

    ``str()`` of many exceptions is empty (kazoo's ``ConnectionLoss()``, a
    bare ``TimeoutError()``): a line must still say what failed.
    """
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else repr(error)
