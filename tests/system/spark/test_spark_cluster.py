"""The source on a real Spark standalone cluster: a master and two workers on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pyspark
import pytest

from logstore.store import LogStore
from tests.support.paths import REPO
from tests.support.server import free_port
from tests.support.spark_helpers import produce

pytestmark = pytest.mark.cluster

SPARK_HOME = Path(pyspark.__file__).parent

DRIVER = """
import json, sys
from logstore.spark import session

root, master, checkpoint, out = sys.argv[1:5]
spark = session(**{
    "spark.master": master, "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
    "spark.executor.memory": "512m", "spark.cores.max": "2", "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2", "spark.databricks.delta.snapshotPartitions": "2",
})
spark.sparkContext.setLogLevel("ERROR")
q = (spark.readStream.format("logstore").option("logstore.root", root).option("subscribe", "events")
     .option("group", "cluster").option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "200").load()
     .writeStream.format("delta").option("checkpointLocation", checkpoint).trigger(availableNow=True).start(out))
q.awaitTermination()
rows = spark.read.format("delta").load(out)
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
print(json.dumps({"rows": rows.count(), "distinct": rows.select("partition", "offset").distinct().count(),
                  "batches": len(q.recentProgress), "executors": executors}), flush=True)
spark.stop()
"""


class _Daemon:
    """A Spark daemon whose log is drained by a thread; ``ready`` is set when ``marker`` appears."""

    def __init__(self, args: list[str], marker: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.ready = threading.Event()
        self.lines: list[str] = []
        threading.Thread(target=self._drain, args=(marker,), daemon=True).start()

    def _drain(self, marker: str) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            if marker in line:
                self.ready.set()
        self.ready.set()  # exited: let the waiter see it failed

    def wait_ready(self) -> None:
        assert self.ready.wait(120), "".join(self.lines[-20:])
        assert self.proc.poll() is None, "".join(self.lines[-20:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """``spark://127.0.0.1:<port>`` of a master with two one-core workers, all stopped afterwards."""
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    daemons = []
    try:
        master = _Daemon(
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"],
            "I have been elected leader",
            env,
        )
        daemons.append(master)
        master.wait_ready()
        for i in range(2):
            worker = _Daemon(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    "0",
                    "--work-dir",
                    str(tmp_path / f"worker-{i}"),
                ],
                "Successfully registered with master",
                env,
            )
            daemons.append(worker)
        for d in daemons[1:]:
            d.wait_ready()
        yield url
    finally:
        for d in reversed(daemons):
            d.kill()


def test_streaming_query_on_a_standalone_cluster(
    cluster: str, store: LogStore, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    store.create_topic("events", 3)
    for i in range(4):
        produce(store, "events", [k % 3 for k in range(300)], prefix=f"e{i}-")
    driver = subprocess.run(
        [sys.executable, "-c", DRIVER, store.config.root, cluster, str(tmp_path / "ck"), str(tmp_path / "out")],
        capture_output=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1"},
        timeout=600,
        check=False,
    )
    lines = [ln for ln in driver.stdout.decode().splitlines() if ln.startswith("{")]
    assert driver.returncode == 0 and lines, driver.stderr.decode()[-3000:]
    result = json.loads(lines[-1])
    assert result["executors"] == 2
    assert result["rows"] == result["distinct"] == 1200
    assert result["batches"] >= 6
    assert {g.partition: g.committed_offset for g in store.describe_group("cluster")} == {0: 400, 1: 400, 2: 400}
