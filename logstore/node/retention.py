"""The node's own retention: Kafka's log cleaner thread for ``cleanup.policy=delete``, without Spark.

Every ``log.retention.check.interval.ms`` (Kafka's key, default 5 minutes) a
thread of the node applies :func:`logstore.log.retention.run_retention` to
every topic whose ``cleanup.policy`` contains ``delete``: whole data files past
``retention.ms`` or over ``retention.bytes`` are removed and the log start
offset moves up, in one Delta commit per topic. It is the same mechanism as
``logstore maintain retention`` — one module, two callers — so a node does not
need ``maintain run --every`` beside it for retention (compaction and vacuum
still come from there).

Which partitions: an embedded node all of them; in cluster mode only the
partitions this node leads, so two nodes never remove files of one partition.

Concurrency: the commit only removes files; the node's writer commits
put-if-absent and steps over such commits (its offsets come from the high
watermark, which retention never moves), and a fetch below the new log start
offset answers ``OFFSET_OUT_OF_RANGE``. A topic that fails is logged with its
reason and counted (``logstore_retention_failures``); the others and the next
passes run: the thread ends only with :meth:`RetentionThread.stop`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from logstore.errors import UnknownTopicOrPartitionError
from logstore.log.catalog import Catalog
from logstore.log.file_changes import PartitionReport
from logstore.log.retention import run_retention
from logstore.node.metrics import Metrics

__all__ = ["RetentionThread"]

log = logging.getLogger("logstore.retention")

LedPartitions = Callable[[str], Collection[int] | None]
"""Topic → the partitions this node applies retention to; None: all of them (embedded)."""


class RetentionThread:
    """Applies retention to the node's partitions every ``interval_ms``, on a daemon thread.

    Args:
        catalog: the store's catalog (topics are listed afresh every pass).
        led: which partitions of a topic are this node's (:data:`LedPartitions`).
        metrics: where the passes are counted.
        interval_ms: from the end of one pass to the start of the next.
    """

    def __init__(self, catalog: Catalog, led: LedPartitions, metrics: Metrics, interval_ms: int) -> None:
        self._catalog = catalog
        self._led = led
        self._metrics = metrics
        self._interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="logstore-retention", daemon=True)
        self.passes = 0
        """Passes finished (failed topics included)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after the pass under way (a commit is never cut in half)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def run_pass(self, now_ms: int | None = None) -> list[PartitionReport]:
        """One pass over every topic; returns the partitions that lost files.

        A topic that fails is logged with the reason and counted; the pass goes on.
        """
        removed: list[PartitionReport] = []
        for topic in self._catalog.list_topics():
            if self._stop.is_set():
                break
            try:
                removed += self._apply(topic, now_ms)
            except UnknownTopicOrPartitionError:
                continue  # deleted since it was listed
            except Exception as e:  # one topic must not stop the others' retention, nor the thread
                self._metrics.retention_failures.inc()
                log.error("retention of topic '%s' failed, retried at the next pass: %r", topic, e)
        self.passes += 1
        self._metrics.retention_last_run.set(time.time())
        return removed

    def _apply(self, topic: str, now_ms: int | None) -> list[PartitionReport]:
        _, config = self._catalog.topic_config(topic)
        if "delete" not in config.cleanup_policy:
            return []
        partitions = self._led(topic)
        if partitions is not None and not partitions:
            return []
        reports = run_retention(self._catalog, topic, now_ms=now_ms, progress=_quiet, partitions=partitions)
        removed = [r for r in reports if r.files_removed]
        for r in removed:
            self._metrics.retention_files_removed.labels(topic).inc(r.files_removed)
            self._metrics.retention_bytes_removed.labels(topic).inc(r.bytes_removed)
            log.info(
                "retention %s/%d: removed %d files (%d bytes, %d records) past retention.ms=%d / retention.bytes=%d; "
                "log start offset %d",
                topic,
                r.partition,
                r.files_removed,
                r.bytes_removed,
                r.records_removed,
                config.retention_ms,
                config.retention_bytes,
                r.log_start_offset,
            )
        return removed

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.run_pass()
            except Exception:  # e.g. the root unreadable for a moment: the next pass tries again
                self._metrics.retention_failures.inc()
                log.exception("retention pass failed; the next runs in %.1f s", self._interval_s)


def _quiet(_line: str) -> None:
    """Progress lines of partitions left as they were are not logged (the node logs what it removed)."""
