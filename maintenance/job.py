"""Run maintenance jobs over topics; the ``spark-submit`` entry point.

Jobs, by the CLI's names:

=============  ====================================================  =========================
job            what                                                  runs where
=============  ====================================================  =========================
``retention``  delete whole old files (``cleanup.policy`` delete)    driver; Delta log only
``compact``    segment compaction towards ``segment.bytes``          Spark tasks, one per bin
``clean``      key compaction (``cleanup.policy`` compact)           Spark job (window on key)
``vacuum``     delete unreferenced files past Delta's retention      driver (delta-rs)
``offsets``    compact ``_offsets`` to the latest commits per key,   driver (delta-rs)
               then vacuum it (not per topic: ``topics`` ignored)
``transactions`` remove orphaned staged transaction records         driver (file system)
               (:mod:`logstore.transactions.orphans`; not per topic)
=============  ====================================================  =========================

Submit to a cluster (the store's root must be reachable by every executor,
and the project installed in the executors' Python)::

    spark-submit --jars "$(ls .cache/jars/*.jar | paste -sd,)" \\
        maintenance/job.py retention compact clean --root /data/logstore

Locally, with pyspark's ``spark-submit`` from the venv::

    PATH=$PWD/.venv/bin:$PATH PYSPARK_PYTHON=$PWD/.venv/bin/python spark-submit --master 'local[2]' \\
        --jars "$(ls .cache/jars/*.jar | paste -sd,)" maintenance/job.py retention compact --root ./data

``python -m maintenance ...`` does the same with a local session.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a file by spark-submit: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from logstore.common.logs import describe
from logstore.config import LogstoreConfig, load_config
from logstore.errors import InvalidConfigError, InvalidRequestError, LogstoreError
from logstore.log.catalog import Catalog
from logstore.log.retention import run_retention
from logstore.transactions.orphans import remove_orphaned_staging
from maintenance.cleaner import run_key_compaction
from maintenance.offsets import OFFSETS_TABLE, run_offsets_compaction
from maintenance.report import PartitionReport, Progress, RunReport, print_progress
from maintenance.segments import run_segment_compaction
from maintenance.vacuum import DEFAULT_RETENTION_HOURS, run_vacuum

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["JOBS", "SPARK_JOBS", "main", "run_job", "store_config"]

JOBS = ("retention", "compact", "clean", "vacuum", "offsets", "transactions")
"""Every job name, in the order a full pass runs them."""

SPARK_JOBS = frozenset({"compact", "clean"})
"""Jobs that need a SparkSession (``compact`` falls back to in-process without one)."""

JobFunction = Callable[..., list[PartitionReport]]

TRANSACTIONS_DIR = "_transactions"
"""What the ``transactions`` job's reports name: ``<root>/_transactions/_staged/``."""


def run_job(
    job: str,
    catalog: Catalog,
    *,
    topics: Sequence[str] | None = None,
    spark: SparkSession | None = None,
    progress: Progress = print_progress,
    now_ms: int | None = None,
    vacuum_retention_hours: int = DEFAULT_RETENTION_HOURS,
    enforce_retention_duration: bool = True,
) -> RunReport:
    """Run ``job`` on ``topics`` (default: every topic), one topic after another.

    ``offsets`` runs once, on the store's ``_offsets`` table, keeping the
    config's ``offsets.history.commits`` commits per key; ``topics`` does not apply.
    ``transactions`` runs once too, on ``_transactions/_staged/``.

    A topic that fails is recorded in :attr:`RunReport.errors` and the run goes
    on with the next one. Prints progress and ends with the run's summary line.

    Raises:
        InvalidRequestError: an unknown job, or ``clean`` without a SparkSession.
    """
    if job not in JOBS:
        raise InvalidRequestError(f"unknown maintenance job '{job}'; jobs: {', '.join(JOBS)}")
    if job == "clean" and spark is None:
        raise InvalidRequestError("key compaction ('clean') is a Spark job: pass a SparkSession")
    started = time.monotonic()
    report = RunReport(job)
    targets = [OFFSETS_TABLE] if job == "offsets" else [TRANSACTIONS_DIR] if job == "transactions" else topics
    for topic in targets if targets is not None else catalog.list_topics():
        fn: JobFunction
        kwargs: dict[str, Any] = {"progress": progress}
        if job == "offsets":
            fn = _compact_offsets
            kwargs |= {
                "vacuum_retention_hours": vacuum_retention_hours,
                "enforce_retention_duration": enforce_retention_duration,
            }
        elif job == "transactions":
            fn = _remove_orphaned_staging
            kwargs["now_ms"] = now_ms
        elif job == "retention":
            fn = run_retention
            kwargs["now_ms"] = now_ms
        elif job == "compact":
            fn = run_segment_compaction
            kwargs["spark"] = spark
        elif job == "clean":
            fn = run_key_compaction
            kwargs |= {"spark": spark, "now_ms": now_ms}
        else:
            fn = run_vacuum
            kwargs |= {
                "retention_hours": vacuum_retention_hours,
                "enforce_retention_duration": enforce_retention_duration,
            }
        try:
            report.partitions.extend(fn(catalog, topic, **kwargs))
        except Exception as e:  # one topic's failure must not stop the others
            report.errors[topic] = describe(e)
            progress(f"{job} {topic}: FAILED: {describe(e)}")
    report.seconds = time.monotonic() - started
    progress(report.summary())
    return report


def store_config(root: str = "", spark: SparkSession | None = None, config_file: str | None = None) -> LogstoreConfig:
    """The config of the store a notebook or job maintains; its root must be an existing directory.

    The root is, first found: ``root`` (a notebook's ``root`` widget or
    ``MAINTENANCE_ROOT``, the job's ``--root``), the Spark conf
    ``spark.logstore.root`` of ``spark`` (a cluster's Spark config), then the
    config as the CLI reads it: ``LOGSTORE_ROOT``, the config file's
    ``logstore.root`` (``LOGSTORE_CONFIG`` or ``conf/logstore.toml`` under the
    working directory), ``./data``.

    Raises:
        InvalidConfigError: the root is not a directory (a notebook run from
            ``notebooks/`` would otherwise find no topics and succeed), naming it and the settings.
    """
    if not root and spark is not None:
        root = spark.conf.get("spark.logstore.root", None) or ""
    config = load_config(config_file, overrides={"logstore.root": root} if root else {})
    if not os.path.isdir(config.root):
        raise InvalidConfigError(
            f"logstore.root '{config.root}' (from the working directory {os.getcwd()}) is not a directory: there "
            "is no store there. Give the store's directory with the root parameter (widget or MAINTENANCE_ROOT), "
            "the Spark conf spark.logstore.root, LOGSTORE_ROOT, or the config file's logstore.root"
        )
    return config


def _compact_offsets(catalog: Catalog, _table: str, **kwargs: Any) -> list[PartitionReport]:
    return run_offsets_compaction(catalog.config.root, keep=catalog.config.offsets_history_commits, **kwargs)


def _remove_orphaned_staging(
    catalog: Catalog, _table: str, *, progress: Progress, now_ms: int | None
) -> list[PartitionReport]:
    """One report (partition = transaction number) per orphaned staged transaction removed."""
    removed = remove_orphaned_staging(
        catalog.config.root, max_timeout_ms=catalog.config.transaction_max_timeout_ms, now_ms=now_ms
    )
    for r in removed:
        progress(
            f"transactions: removed the staged records of '{r.transactional_id}' transaction {r.transaction_seq} "
            f"({r.files} files, {r.bytes} bytes, unchanged for {r.age_ms / 1000:.0f} s)"
        )
    return [PartitionReport(TRANSACTIONS_DIR, r.transaction_seq, r.files, r.bytes) for r in removed]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="maintenance", description="Run logstore maintenance jobs on Spark.")
    p.add_argument("jobs", nargs="+", choices=JOBS, help="jobs to run, in order")
    p.add_argument("--root", help="store directory (default: the config's logstore.root)")
    p.add_argument("--config", dest="config_file", help="TOML config file")
    p.add_argument("--topic", action="append", dest="topics", help="only this topic (repeatable)")
    p.add_argument("--vacuum-retention-hours", type=int, default=DEFAULT_RETENTION_HOURS)
    p.add_argument("--json", action="store_true", help="print each run's report as one JSON line")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``spark-submit maintenance/job.py`` and ``python -m maintenance``."""
    args = _parser().parse_args(argv)
    try:
        catalog = Catalog(store_config(args.root or "", config_file=args.config_file))
    except LogstoreError as e:
        print(f"{e.name}: {e.message}", file=sys.stderr)
        return 1
    spark = None
    if SPARK_JOBS & set(args.jobs):
        from logstore.spark import session

        spark = session(**{"spark.app.name": "logstore-maintenance"})
    failed = False
    for job in args.jobs:
        report = run_job(
            job, catalog, topics=args.topics, spark=spark, vacuum_retention_hours=args.vacuum_retention_hours
        )
        failed = failed or bool(report.errors)
        if args.json:
            print(report.to_json(), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
