"""Where the repository is, for tests that read its files or start a child in it (wherever the test module sits)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository's root: ``conf/``, ``notebooks/``, ``maintenance/`` and the ``tests`` package are under it."""

SPARK_KAFKA_JARS = REPO / ".cache" / "spark-kafka"
"""Spark's Kafka connector (``format("kafka")``) and its jars, fetched by ``make setup`` (jars/spark-kafka/pom.xml)."""
