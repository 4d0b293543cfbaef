"""Micro-batch benchmark: what one micro-batch of a low-rate stream costs Spark, phase by phase, per source.

Four sources run one after the other, each for ``--seconds`` into the same
``foreachBatch`` (the batch's ``timestamp`` column read back with ``toArrow()``,
as the end-to-end runs of ``bench/consume.py`` and ``bench/vs_kafka.py`` do) on a
``--trigger-ms`` processing-time trigger, ``--rounds`` times alternating:

* ``rate``: Spark's own rate source (JVM, no Python task) — the floor;
* ``python_nothing``: a Python data source whose one task yields 20 rows and
  reads nothing — what Spark's task path for Python data sources costs;
* ``logstore``: the ``logstore`` source on a 2-partition topic a process of its
  own feeds with 100-record commits at ``--rate`` records/s (the core writer, no
  HTTP) — during all four runs, so each meets the same load;
* ``logstore_read_on_driver``: the same with ``maxRecordsReadOnDriver`` 10,000:
  each micro-batch read while Spark plans it, no Python task.

For each: the median of every phase Spark times over the batches that read
rows (``latestOffset``, ``walCommit`` = offset log, ``queryPlanning``,
``addBatch`` = the job and ``foreachBatch``, ``commitOffsets`` = commit log,
``triggerExecution`` = the whole batch), and the Hadoop file system serving
``file:`` paths. ``--hadoop-local-fs`` runs on Hadoop's own local file system
instead of ``jars/localfs`` (see docs/spark.md): its offset and commit logs
fork the JVM for every file.

Run: ``.venv/bin/python bench/micro_batch.py`` (about 2 minutes).
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from _spark import logstore_stream, phase_medians, spark_session
from harness import emit, median_of, open_store, records
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from logstore.log.writer import TopicWriter
from logstore.structs import ProducerBatch

PHASES = ("latestOffset", "walCommit", "queryPlanning", "addBatch", "commitOffsets", "triggerExecution")


class _NothingReader(DataSourceStreamReader):
    """A new offset every 100 ms; each batch one task of 20 rows stamped now."""

    def initialOffset(self) -> dict[str, int]:
        return {"t": 0}

    def latestOffset(self) -> dict[str, int]:
        return {"t": int(time.time() * 10)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        now = pa.array([time.time_ns() // 1000] * 20, pa.timestamp("us", tz="UTC"))
        yield pa.RecordBatch.from_arrays([now], names=["timestamp"])


class PythonNothing(DataSource):
    """``format("python_nothing")``: a Python data source that reads nothing."""

    @classmethod
    def name(cls) -> str:
        return "python_nothing"

    def schema(self) -> str:
        return "timestamp timestamp"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _NothingReader()


def _feed(root: str, rate: int, stop: Any) -> None:
    """100-record commits into topic ``mb`` (2 partitions, alternating) at ``rate`` records/s until ``stop``."""
    writer = TopicWriter(open_store(root).catalog, "mb")
    i = 0
    start = time.monotonic()
    while not stop.is_set():
        writer.append([ProducerBatch(records(100, partition=i % 2))])
        i += 1
        delay = start + i * 100 / rate - time.monotonic()
        if delay > 0:
            stop.wait(delay)


def run(spark: Any, frame: Any, seconds: float, trigger_ms: int) -> dict[str, float]:
    """Medians of each phase over the micro-batches of ``frame`` that read rows."""
    checkpoint = tempfile.mkdtemp(prefix="micro-batch-")
    try:
        q = (
            frame.writeStream.foreachBatch(lambda df, _i: df.select("timestamp").toArrow())
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{trigger_ms} milliseconds")
            .start()
        )
        time.sleep(seconds)  # a stream at a steady rate: the figure is per batch, whatever their number
        q.stop()
        batches = [p["durationMs"] for p in q.recentProgress[3:] if p["numInputRows"] > 0]
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    return {"batches": len(batches), **phase_medians(batches, PHASES)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=12, help="length of each source's run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--trigger-ms", type=int, default=100)
    ap.add_argument("--rate", type=int, default=10_000, help="records/s into the logstore topic")
    ap.add_argument("--hadoop-local-fs", action="store_true", help="Hadoop's local file system, not jars/localfs")
    args = ap.parse_args()
    hadoop = {
        "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.LocalFs",
    }
    spark = spark_session(**(hadoop if args.hadoop_local_fs else {}))
    spark.dataSource.register(PythonNothing)
    root = tempfile.mkdtemp(prefix="micro-batch-root-")
    spawn = multiprocessing.get_context("spawn")  # not a fork of a process holding a JVM gateway
    stop = spawn.Event()
    feeder = spawn.Process(target=_feed, args=(root, args.rate, stop), daemon=True)
    try:
        open_store(root).create_topic("mb", 2)
        feeder.start()
        sources = {
            "rate": lambda: spark.readStream.format("rate").option("rowsPerSecond", 200).load(),
            "python_nothing": lambda: spark.readStream.format("python_nothing").load(),
            "logstore": lambda: logstore_stream(spark, root, "mb", startingOffsets="latest"),
            "logstore_read_on_driver": lambda: logstore_stream(
                spark, root, "mb", startingOffsets="latest", maxRecordsReadOnDriver=10000
            ),
        }
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
        for _ in range(args.rounds):
            for name, frame in sources.items():
                rounds[name].append(run(spark, frame(), args.seconds, args.trigger_ms))
        jvm = spark._jvm
        fs = jvm.org.apache.hadoop.fs.Path("file:///").getFileSystem(spark._jsc.hadoopConfiguration())
        out = {
            "file_system": fs.getClass().getName(),
            "trigger_ms": args.trigger_ms,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "micro_batch_p50_ms": {name: median_of(rs) for name, rs in rounds.items()},
        }
    finally:
        stop.set()
        if feeder.pid is not None:
            feeder.join()
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    emit(out)


if __name__ == "__main__":
    main()
