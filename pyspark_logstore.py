"""``format("logstore")`` on any SparkSession where the ``logstore`` distribution is installed.

Spark looks up Python data sources once per driver: every installed top-level
module named ``pyspark_*`` that has a ``DefaultSource`` (a ``DataSource``) is
registered under that source's name. This module is that entry for logstore,
so a ``spark-submit`` job or a Databricks notebook reads and writes
``format("logstore")`` without registering it. ``logstore.spark.register(spark)``
does the same explicitly, and also makes a batch ``save()`` without ``mode``
append (as Spark's Kafka sink does).
"""

from spark_source import LogstoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
