"""Retention, segment compaction, key compaction, vacuum and ``_offsets`` compaction.

Depends on the core (`logstore`); the core never imports it (the CLI's
``maintain`` command imports it lazily). Entry points: :func:`run_job` (one
job over topics, with a summary), :class:`Scheduler` (``maintain run``), and
``maintenance/job.py`` for ``spark-submit``.
"""

from logstore.log.retention import plan_retention, run_retention
from maintenance.cleaner import run_key_compaction
from maintenance.job import JOBS, run_job, store_config
from maintenance.offsets import run_offsets_compaction
from maintenance.report import PartitionReport, RunReport
from maintenance.scheduler import Scheduler, jobs_for_policy
from maintenance.segments import plan_segments, run_segment_compaction
from maintenance.vacuum import DEFAULT_RETENTION_HOURS, run_vacuum

__all__ = [
    "DEFAULT_RETENTION_HOURS",
    "JOBS",
    "PartitionReport",
    "RunReport",
    "Scheduler",
    "jobs_for_policy",
    "plan_retention",
    "plan_segments",
    "run_job",
    "run_key_compaction",
    "run_offsets_compaction",
    "run_retention",
    "run_segment_compaction",
    "run_vacuum",
    "store_config",
]
