"""The nemesis's Spark reader: ``availableNow`` runs of a ``format("logstore")`` stream of one consumer group.

Each run is a new streaming query (a fresh checkpoint) of the group
``spark-reader`` on the stable topic, so where it starts is the group's
committed offsets alone (docs/spark.md: a new query in group G starts at G's
committed offsets, and each completed batch, the last one of an
``availableNow`` run included, commits). Every batch's records are a
``fetch`` of the history; the end of a run is a ``commit`` of the next offset
after the last record read per partition (what the source committed), so the
checker's ``reread_after_commit`` finds a later run that starts below it. The
reader reads the Delta tables directly, beside the nodes, as Spark does in
production.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from _nemesis_workload import STABLE, History

__all__ = ["SPARK_GROUP", "SparkReader"]

SPARK_GROUP = "spark-reader"


class SparkReader:
    """A thread of ``availableNow`` runs, one every ``every_s`` seconds, until :meth:`join`."""

    def __init__(self, history: History, root: Path, every_s: float = 15.0) -> None:
        self.history, self.root, self.every_s = history, root, every_s
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._guarded, name="spark-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self.stop.set()
        self._thread.join(timeout=300)
        if self.failure is not None:
            raise RuntimeError(f"the Spark reader failed: {self.failure!r}") from self.failure

    def _guarded(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # no thread dies silently: join() raises it
            self.failure = e

    def _loop(self) -> None:
        from _spark import spark_session

        spark = spark_session("local[1]")
        try:
            while not self.stop.wait(self.every_s):
                self._run_once(spark)
        finally:
            spark.stop()

    def _run_once(self, spark: Any) -> None:
        checkpoint = tempfile.mkdtemp(prefix="nemesis-spark-")
        t0 = self.history.now()
        req = {"group": SPARK_GROUP, "member_id": "spark"}
        ends: dict[tuple[str, int], int] = {}

        def batch(df: Any, _batch_id: int) -> None:
            rows = [[STABLE, r["partition"], r["offset"], r["value"]] for r in df.collect()]
            for _t, p, o, _v in rows:
                ends[(STABLE, p)] = max(ends.get((STABLE, p), 0), o + 1)
            self.history.write("fetch", "spark", None, t0, req, ok=True, ans={"records": rows})

        try:
            stream = (
                spark.readStream.format("logstore")
                .option("logstore.root", str(self.root))
                .option("subscribe", STABLE)
                .option("group", SPARK_GROUP)
                .option("startingOffsets", "earliest")
                .load()
                .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
            )
            query = (
                stream.writeStream.foreachBatch(batch)
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
        except Exception as e:  # a failed run is an operation of the history, not the end of the reader
            self.history.write("fetch", "spark", None, t0, req, err=f"{type(e).__name__}: {str(e)[:500]}")
            return
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
        offsets = [[t, p, o] for (t, p), o in sorted(ends.items())]
        self.history.write("commit", "spark", None, t0, {**req, "generation": 0, "offsets": offsets}, ok=True)
