"""Retention, segment compaction, key compaction and vacuum as Spark jobs.

Depends on the core (`logstore`); the core never imports it.
"""
