"""The long-running maintenance scheduler behind ``logstore maintain run --every``.

Each cycle runs, per topic, the jobs its policy calls for: ``retention`` when
``cleanup.policy`` contains ``delete``, ``clean`` (key compaction) when it
contains ``compact``, then ``compact`` (segment compaction) and ``vacuum`` for
every topic; then ``offsets`` once (compaction and vacuum of the consumer-group
offsets table). A failing job is logged with its traceback and the cycle goes
on; the next cycle starts ``every_s`` seconds after the previous one started.

Logging: one line per partition a job changed, then that job's summary; a job
that changed nothing logs nothing (a quiet store logs nothing per cycle). A
node already applies retention by itself (``log.retention.check.interval.ms``);
the scheduler's retention covers stores without a running node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from logstore.common.logs import describe
from logstore.log.catalog import Catalog
from maintenance.job import run_job
from maintenance.report import RunReport

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Scheduler", "jobs_for_policy", "parse_duration"]

log = logging.getLogger("logstore.maintenance")

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``"5m"`` → 300.0 seconds; units ms, s, m, h, d; a bare number is seconds.

    Raises:
        ValueError: not a duration.
    """
    t = text.strip().lower()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if t.endswith(unit):
            return float(t[: -len(unit)]) * _UNITS[unit]
    return float(t)


def jobs_for_policy(cleanup_policy: str) -> list[str]:
    """The jobs a cycle runs for a topic with ``cleanup_policy``, in order."""
    jobs = []
    if "delete" in cleanup_policy:
        jobs.append("retention")
    if "compact" in cleanup_policy:
        jobs.append("clean")
    return [*jobs, "compact", "vacuum"]


class Scheduler:
    """Runs maintenance cycles over every topic of a catalog.

    Args:
        catalog: the store's catalog (topics are listed afresh each cycle).
        spark: the session for the Spark jobs; without one, ``clean`` is skipped
            and segment compaction runs in-process.
        every_s: seconds from one cycle's start to the next's.
        run: the job runner (``run_job``'s signature), replaceable for tests.
    """

    def __init__(
        self,
        catalog: Catalog,
        *,
        spark: SparkSession | None = None,
        every_s: float = 300.0,
        run: Callable[..., RunReport] = run_job,
    ) -> None:
        self.catalog = catalog
        self.spark = spark
        self.every_s = every_s
        self._run = run
        self._stop = threading.Event()
        self.cycles_done = 0
        self.failures = 0

    def stop(self) -> None:
        """Ask :meth:`run_forever` to return after the current job."""
        self._stop.set()

    def run_cycle(self) -> list[RunReport]:
        """One pass over every topic, then over ``_offsets`` and the staged transactions; each job run's report."""
        reports: list[RunReport] = []
        for topic in self.catalog.list_topics():
            try:
                _, config = self.catalog.topic_config(topic)
            except Exception:  # one unreadable topic must not stop the others' maintenance; counted and logged
                log.exception("maintenance: cannot read topic %s; skipping it this cycle", topic)
                self.failures += 1
                continue
            for job in jobs_for_policy(config.cleanup_policy):
                if self._stop.is_set():
                    return reports
                if job == "clean" and self.spark is None:
                    log.warning("maintenance: %s needs key compaction but no SparkSession was given", topic)
                    continue
                self._run_one(job, topic, reports)
        for job in ("offsets", "transactions"):
            if not self._stop.is_set():
                self._run_one(job, None, reports)
        return reports

    def _run_one(self, job: str, topic: str | None, reports: list[RunReport]) -> None:
        """Run one job; log one line per partition it changed, and its summary only when it did something.

        The job's own progress lines are not logged: a cycle over topics with
        nothing to do logs nothing.
        """
        what = f"topic {topic}" if topic is not None else f"the {job} job"
        try:
            report = self._run(
                job, self.catalog, topics=[topic] if topic is not None else None, spark=self.spark, progress=_quiet
            )
        except Exception as e:  # a job that raises (not a per-topic error in its report): counted, logged, retried
            log.exception("maintenance: %s of %s failed (%s); the next cycle retries", job, what, describe(e))
            self.failures += 1
            return
        for p in report.partitions:
            if p.files_removed or p.files_added:
                log.info(
                    "maintenance: %s %s/%d: removed %d files (%d bytes, %d records), wrote %d files (%d bytes); "
                    "log start offset %d",
                    job,
                    p.topic,
                    p.partition,
                    p.files_removed,
                    p.bytes_removed,
                    p.records_removed,
                    p.files_added,
                    p.bytes_added,
                    p.log_start_offset,
                )
        if report.errors:
            self.failures += 1
            log.error("maintenance: %s", report.summary())
        elif report.files_removed or report.files_added:
            log.info("maintenance: %s", report.summary())
        reports.append(report)

    def run_forever(self, cycles: int | None = None) -> None:
        """Run cycles until :meth:`stop` (or ``cycles`` of them), ``every_s`` apart."""
        while not self._stop.is_set() and (cycles is None or self.cycles_done < cycles):
            started = time.monotonic()
            log.debug("maintenance: cycle %d starts", self.cycles_done + 1)
            self.run_cycle()
            self.cycles_done += 1
            if cycles is not None and self.cycles_done >= cycles:
                break
            self._stop.wait(max(0.0, self.every_s - (time.monotonic() - started)))


def _quiet(_line: str) -> None:
    """A job's progress lines, dropped: the scheduler logs what changed from the job's report."""
