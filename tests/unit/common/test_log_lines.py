"""Log lines: ISO time in milliseconds, level and logger; a failure names its exception even when its str() is empty."""

from __future__ import annotations

import io
import logging
import re
import threading

import pytest
from kazoo.exceptions import ConnectionLoss

from logstore.cluster import NodeInfo, ZooKeeperController
from logstore.common.logs import LINE_FORMAT, IsoFormatter, configure_logging, describe

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")


def test_a_line_starts_with_its_iso_time_in_milliseconds_its_level_and_its_logger() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(IsoFormatter(LINE_FORMAT))
    logger = logging.getLogger("logstore.test_log_lines")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("commit to topic %s failed", "t")
    finally:
        logger.removeHandler(handler)
    line = stream.getvalue().rstrip("\n")
    assert LINE.match(line), line
    assert line.endswith(" WARNING logstore.test_log_lines: commit to topic t failed")


def test_an_exception_is_named_by_its_type_and_message_or_its_repr() -> None:
    assert describe(ConnectionLoss()) == "ConnectionLoss()"
    assert describe(TimeoutError()) == "TimeoutError()"
    assert describe(OSError(28, "No space left on device")) == "OSError: [Errno 28] No space left on device"


class _FailingOnce(ZooKeeperController):
    """A controller whose coordination step loses its ZooKeeper connection once (kazoo raises ``ConnectionLoss()``)."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1:1", NodeInfo(1, "http://127.0.0.1:1"))
        self.failed = threading.Event()

    def _step(self) -> None:
        if not self.failed.is_set():
            self.failed.set()
            raise ConnectionLoss()
        self._closed.set()


def test_the_coordinators_retry_line_names_an_exception_without_a_message(caplog: pytest.LogCaptureFixture) -> None:
    controller = _FailingOnce()
    controller._wake.set()
    with caplog.at_level(logging.WARNING, logger="logstore.cluster"):
        controller._run()  # on this thread: one failing step, then one that ends the loop
    lines = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert lines == ["node 1: coordination step failed, retrying: ConnectionLoss()"]


def test_a_request_a_node_forwards_logs_no_line_but_a_dropped_connection_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx logs every request at INFO: a node forwarding each produce of a cluster wrote a line per request,
    which filled the pipe of a node run with its stderr unread and stopped its event loop."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    for name in ("httpx", "httpcore", "kazoo"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.getLogger(name).level)
    configure_logging()
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    assert not logging.getLogger("httpcore").isEnabledFor(logging.INFO)
    assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)
    assert logging.getLogger("logstore.ingest").isEnabledFor(logging.INFO)
