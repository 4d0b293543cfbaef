"""The audit log: one JSON line per denied request and per key, ACL or quota change.

Lines go to the ``logstore.audit`` logger (``logstore serve`` prints them on
stderr); they never carry a key's secret, only its id.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

__all__ = ["AUDIT_LOGGER", "audit", "log_audit_to_stderr"]

AUDIT_LOGGER = "logstore.audit"


def audit(event: str, *, principal: str | None, decision: str, **fields: Any) -> None:
    """Log one audit event: ``event`` (``authorize``, ``authenticate``, ``acl.add``, ``key.create``, …).

    ``decision`` is ``DENIED`` / ``ALLOWED`` for requests and ``CHANGED`` for
    changes; ``fields`` add the resource, operation, key id and the like.
    """
    line = {"ts_ms": int(time.time() * 1000), "event": event, "principal": principal, "decision": decision}
    line.update({k: v for k, v in fields.items() if v is not None})
    logging.getLogger(AUDIT_LOGGER).info(orjson.dumps(line, default=str).decode())


def log_audit_to_stderr() -> None:
    """Print audit lines on stderr, whatever the other loggers' levels (``serve`` and the CLI's changes)."""
    logger = logging.getLogger(AUDIT_LOGGER)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
