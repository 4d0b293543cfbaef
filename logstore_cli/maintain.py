"""``logstore maintain JOB``: retention, compaction, key compaction, vacuum and ``_offsets`` compaction, once or on
a schedule (``maintain run``); the ``maintenance`` package runs them."""

from __future__ import annotations

import argparse

from logstore.common.logs import configure_logging
from logstore.config import LogstoreConfig
from logstore.errors import InvalidRequestError
from logstore_cli._common import Parents, Subparsers, require_store

__all__ = ["register"]


def register(sub: Subparsers, parents: Parents) -> None:
    """Add ``maintain``: it works on the root (``--root``) only."""
    p = sub.add_parser(
        "maintain",
        help="retention | compact (segments) | clean (keys) | vacuum | offsets (compact _offsets) | transactions "
        "(orphaned staged records) | run (scheduler)",
        parents=[parents.store],
    )
    p.add_argument(
        "job",
        choices=["retention", "compact", "clean", "vacuum", "offsets", "transactions", "run"],
        help="the job to run once, or run: every job on a schedule",
    )
    p.add_argument("--topic", help="only this topic (default: every topic)")
    p.add_argument("--every", default="5m", help="run: time between cycles (30s, 5m, 1h)")
    p.add_argument("--cycles", type=int, help="run: stop after this many cycles (default: run until stopped)")
    p.add_argument("--vacuum-retention-hours", type=int, default=168, help="vacuum: keep removed files this long")
    p.add_argument("--no-spark", action="store_true", help="no SparkSession: compact in-process, skip clean")
    p.add_argument("--json", action="store_true", help="print the run's report as JSON")
    p.set_defaults(func=_maintain)


def _maintain(args: argparse.Namespace, config: LogstoreConfig) -> int:
    """Retention, compaction, key compaction, vacuum, ``_offsets`` compaction: ``maintenance`` runs them."""
    import logging

    from logstore.log.catalog import Catalog
    from maintenance.job import SPARK_JOBS, run_job
    from maintenance.scheduler import Scheduler, parse_duration

    require_store(config)
    catalog = Catalog(config)
    spark = None
    if not args.no_spark and (args.job == "run" or args.job in SPARK_JOBS):
        from logstore.spark import session

        spark = session(**{"spark.app.name": "logstore-maintenance"})
    if args.job == "run":
        try:
            every = parse_duration(args.every)
        except ValueError:
            raise InvalidRequestError(f"--every takes a duration like 30s, 5m or 1h, got '{args.every}'") from None
        configure_logging(logging.INFO)
        scheduler = Scheduler(catalog, spark=spark, every_s=every)
        try:
            scheduler.run_forever(cycles=args.cycles)
        except KeyboardInterrupt:
            scheduler.stop()
        return 0
    report = run_job(
        args.job,
        catalog,
        topics=[args.topic] if args.topic else None,
        spark=spark,
        vacuum_retention_hours=args.vacuum_retention_hours,
    )
    if args.json:
        print(report.to_json())
    return 1 if report.errors else 0
