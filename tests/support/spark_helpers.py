"""Running `format("logstore")` queries to completion in tests (availableNow, no sleeps), and what they read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch


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


def produce(store: LogStore, topic: str, partitions: list[int], prefix: str = "v", **kw: object) -> None:
    """One batch into ``topic``: a record per entry of ``partitions`` (its partition), values ``<prefix><i>``."""
    values = [f"{prefix}{i}".encode() for i in range(len(partitions))]
    store.append(topic, [ProducerBatch(input_table(partitions, values, **kw))])  # type: ignore[arg-type]


def offsets_by_partition(df: object) -> dict[int, list[int]]:
    """Partition → the offsets ``df`` holds of it, in order."""
    out: dict[int, list[int]] = {}
    for r in df.select("partition", "offset").orderBy("partition", "offset").collect():  # type: ignore[attr-defined]
        out.setdefault(r.partition, []).append(r.offset)
    return out


def committed(store: LogStore, group: str, topic: str) -> dict[int, int]:
    """Partition → the offset ``group`` committed of ``topic``."""
    return {p: o for (_, _, p), (o, _, _) in store.offsets.committed(group, topic).items()}


def produce_mixed(store: LogStore, topic: str) -> None:
    """Into a two-partition ``topic``, one batch of three records stamped 1, 2 and 3 s after the epoch.

    Partition 0 gets ``a`` keyed ``k1`` with header ``h=1`` and then ``k1``'s tombstone; partition 1 gets ``b``,
    without key.
    """
    store.append(
        topic,
        [
            ProducerBatch(
                input_table(
                    [0, 1, 0],
                    [b"a", b"b", None],
                    keys=[b"k1", None, b"k1"],
                    timestamps_ms=[1000, 2000, 3000],
                    headers=[[("h", b"1")], [], []],
                )
            )
        ],
    )
