"""Running `format("logstore")` queries to completion in tests (availableNow, no sleeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from logstore.store import LogStore


def read_stream(spark: SparkSession, store: LogStore, **options: Any) -> DataFrame:
    """``readStream.format("logstore")`` on ``store``'s root with ``options`` (values as text)."""
    reader = spark.readStream.format("logstore").option("logstore.root", store.config.root)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def read_batch(spark: SparkSession, store: LogStore, **options: Any) -> DataFrame:
    reader = spark.read.format("logstore").option("logstore.root", store.config.root)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def drain(df: DataFrame, workdir: Path) -> tuple[DataFrame, StreamingQuery]:
    """Run ``df`` with ``trigger(availableNow=True)`` into a Delta table under ``workdir``.

    Returns everything that table holds (a second run on the same ``workdir``
    resumes from the checkpoint and appends) and the finished query.
    """
    out = str(workdir / "out")
    q = (
        df.writeStream.format("delta")
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start(out)
    )
    q.awaitTermination()
    return df.sparkSession.read.format("delta").load(out), q


def batch_sizes(q: StreamingQuery) -> list[int]:
    """Rows of each micro-batch the query ran, in order (batches without rows left out)."""
    return [p["numInputRows"] for p in sorted(q.recentProgress, key=lambda p: p["batchId"]) if p["numInputRows"]]
