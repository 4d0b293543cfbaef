"""kill -9 of a driver mid-stream, then a restart: the output holds every input record exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from logstore.store import LogStore
from tests.support.helpers import assert_gap_free, read_topic
from tests.support.paths import REPO
from tests.support.spark_helpers import produce

pytestmark = [pytest.mark.spark, pytest.mark.crash]


CHILD = """
import json, sys
from pyspark.sql.streaming import StreamingQueryListener
from logstore.spark import session

root, checkpoint, out, sink = sys.argv[1:5]
spark = session(**{"spark.master": "local[2]", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                   "spark.databricks.delta.snapshotPartitions": "2"})
spark.sparkContext.setLogLevel("ERROR")

class Progress(StreamingQueryListener):
    def onQueryStarted(self, event): pass
    def onQueryIdle(self, event): pass
    def onQueryTerminated(self, event): pass
    def onQueryProgress(self, event):
        print(json.dumps({"batch": event.progress.batchId, "rows": event.progress.numInputRows}), flush=True)

spark.streams.addListener(Progress())
df = (spark.readStream.format("logstore").option("logstore.root", root).option("subscribe", "src")
      .option("group", "copier").option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "150").load())
w = df.writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
if sink == "delta":
    q = w.format("delta").start(out)
else:
    w = df.select("key", "value").writeStream.option("checkpointLocation", checkpoint).trigger(availableNow=True)
    q = w.format("logstore").option("logstore.root", root).option("topic", "dst").start()
q.awaitTermination()
print(json.dumps({"done": True}), flush=True)
"""


def run_child(args: list[str], kill_after_batches: int | None) -> list[dict[str, object]]:
    """Run the query in a child driver; with ``kill_after_batches``, SIGKILL its whole process group then."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,  # the JVM and Python workers share the group: kill -9 takes the whole driver
    )
    seen: list[dict[str, object]] = []
    assert child.stdout is not None
    try:
        for line in child.stdout:
            if not line.startswith(b"{"):
                continue
            seen.append(json.loads(line))
            if kill_after_batches is not None and len(seen) >= kill_after_batches:
                os.killpg(child.pid, signal.SIGKILL)
                break
        child.wait(timeout=300)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return seen


@pytest.mark.parametrize("sink", ["delta", "logstore"])
def test_kill_9_mid_stream_then_restart_is_exactly_once(
    spark: SparkSession, store: LogStore, make_topic: Callable[..., str], tmp_path: Path, sink: str
) -> None:
    store.create_topic("src", 3)
    store.create_topic("dst", 2)
    for i in range(10):
        produce(store, "src", [k % 3 for k in range(150)], prefix=f"r{i}-")
    args = [store.config.root, str(tmp_path / "checkpoint"), str(tmp_path / "out"), sink]

    first = run_child(args, kill_after_batches=3)
    assert len(first) == 3 and not any("done" in e for e in first)
    second = run_child(args, kill_after_batches=None)
    assert second[-1] == {"done": True}
    assert len(second) > 1  # the restart had work left: the kill was mid-stream

    source = read_topic(store.catalog, "src")
    if sink == "delta":
        got = spark.read.format("delta").load(str(tmp_path / "out")).select("partition", "offset", "value")
        expected = spark.createDataFrame(source.to_pylist(), got.schema)
        assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    else:
        values = assert_gap_free(store.catalog, "dst")
        stored = sorted(v for vs in values.values() for v in vs)
        assert stored == sorted(source["value"].to_pylist())
    hws = {p.partition: p.high_watermark for p in store.describe_topic("src").partitions}
    assert {g.partition: g.committed_offset for g in store.describe_group("copier")} == hws
