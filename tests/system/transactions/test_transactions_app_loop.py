"""kill -9 of a consume-transform-produce application, and of the node under it: exactly once, nothing aborted seen.

The application (tests/support/txn_app.py, a child process using only the public client) reads an input
topic in a group with a read_committed ``Consumer`` and writes each batch to two topics in one transaction
of a transactional ``Producer``, with the group's positions sent by ``send_offsets_to_transaction``. The test
kills it with SIGKILL at seeded points (records staged, offsets sent, just committed, at random times), kills
the node twice (while a transaction is held open, and at a random time), and lets a last instance finish the
input. While a transaction is held open, delta-rs finds none of its records in the topic tables.

Then every input record is in each output exactly once, by a read_committed ``Consumer`` and by
``spark.read.format("delta")`` on the topic tables; each output partition's offsets are 0..n-1; each
transaction is there whole or not at all, and none that was killed open (or never asked to commit) is. Each
record names its instance and transaction (``a:<input>:<instance>:<txn>``), so a record of an aborted
transaction cannot pass for its retry's.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.functions import lit

from logstore.client import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from tests.support.paths import REPO
from tests.support.server import Server

pytestmark = [pytest.mark.spark, pytest.mark.crash]

StartServer = Callable[..., Server]

RECORDS = 4_000
INPUT, OUT_A, OUT_B = "in", "out-a", "out-b"
PARTITIONS = {INPUT: 4, OUT_A: 3, OUT_B: 2}
DEADLINE_S = 150
"""The whole loop's limit (it takes ~20 s on an idle machine): past it the test fails with the app's stderr."""


class App:
    """One instance of the application: a child process whose stdout lines a thread collects."""

    def __init__(self, node: Server, instance: int, log: Path, hold: str = "") -> None:
        self.instance = instance
        self.hold = hold
        self.lines: list[str] = []
        self.log = log
        self._cond = threading.Condition()
        env = os.environ | {"PYTHONPATH": str(REPO)}
        args = [node.url, INPUT, str(PARTITIONS[INPUT]), OUT_A, OUT_B, str(instance), hold]
        with log.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.txn_app", *args],
                cwd=REPO,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.strip())
                self._cond.notify_all()
        with self._cond:
            self.proc.wait()
            self._cond.notify_all()

    def count(self, phase: str) -> int:
        with self._cond:
            return sum(1 for line in self.lines if line.split()[0] == phase)

    def wait_for(self, phase: str, n: int, deadline: float) -> bool:
        """Wait until the ``n``-th line of ``phase`` (True) or the process ended without it (False)."""
        with self._cond:
            while self.count(phase) < n:
                if self.proc.poll() is not None:
                    return False
                assert time.monotonic() < deadline, (
                    f"instance {self.instance} did not reach {phase} #{n}: {self.tail()}"
                )
                self._cond.wait(0.1)
            return True

    def tail(self) -> str:
        """The end of what the instances wrote on stderr (their tracebacks)."""
        return self.log.read_text()[-3000:] if self.log.exists() else ""

    def release(self) -> None:
        """Let an instance stopped at its hold point go on."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def run_for(self, seconds: float) -> None:
        """Let it run ``seconds`` (a random kill point, not a wait for anything), or until it ends."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(seconds)

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def apps() -> Iterator[list[App]]:
    """The instances a test started; any still running at its end is killed."""
    started: list[App] = []
    yield started
    for app in started:
        app.kill()


def transactions(app: App) -> dict[tuple[int, int], tuple[int, set[str]]]:
    """(instance, txn) → (its records, the phases it reached), from the instance's lines."""
    out: dict[tuple[int, int], tuple[int, set[str]]] = {}
    for line in app.lines:
        phase, *rest = line.split()
        if phase == "DONE":
            continue
        key = (app.instance, int(rest[0]))
        n, phases = out.get(key, (0, set()))
        out[key] = (int(rest[1]) if phase == "F" else n, phases | {phase})
    return out


def tagged(root: Path) -> set[tuple[int, int]]:
    """(instance, txn) of every row in the output topics' tables, read with delta-rs."""
    out: set[tuple[int, int]] = set()
    for topic in (OUT_A, OUT_B):
        for v in DeltaTable(str(root / "topics" / topic)).to_pyarrow_table(columns=["value"])["value"].to_pylist():
            _, _, instance, txn = v.decode().split(":")
            out.add((int(instance), int(txn)))
    return out


def read_committed(url: str, topic: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record of ``topic``, read by a read_committed ``Consumer``."""
    consumer = Consumer(
        {"bootstrap.servers": url, "group.id": f"check-{topic}"},
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS[topic])]
    ends = {tp.partition: consumer.get_watermark_offsets(tp)[1] for tp in tps}
    consumer.assign(tps)
    out: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + 60
    while any(p.offset < ends[p.partition] for p in consumer.position(tps)):
        assert time.monotonic() < deadline, f"{topic} was not read to its end in 60 s"
        out += [(m.partition(), m.offset(), m.value() or b"") for m in consumer.consume(500, timeout=1)]
    consumer.close()
    return out


def delta_rows(spark: SparkSession, root: Path) -> dict[str, list[tuple[int, int, bytes]]]:
    """Output topic → (partition, offset, value) of each row ``spark.read.format("delta")`` reads of its table."""
    frames = [
        spark.read.format("delta")
        .load(str(root / "topics" / t))
        .select(lit(t).alias("topic"), "partition", "offset", "value")
        for t in (OUT_A, OUT_B)
    ]
    out: dict[str, list[tuple[int, int, bytes]]] = {OUT_A: [], OUT_B: []}
    for r in frames[0].unionByName(frames[1]).collect():  # one job for both tables
        out[r.topic].append((r.partition, r.offset, bytes(r.value)))
    return {t: sorted(rows) for t, rows in out.items()}


def test_consume_transform_produce_is_exactly_once_under_kill_9_of_app_and_node(
    server: StartServer, apps: list[App], spark: SparkSession, tmp_path: Path
) -> None:
    started = time.monotonic()
    deadline = started + DEADLINE_S
    node = server()
    with node.client() as c:
        for topic, n in PARTITIONS.items():
            assert c.post("/v1/topics", json={"name": topic, "partitions": n}).status_code == 201
    inputs = {f"r{i:05d}" for i in range(RECORDS)}
    with Producer(node.url, linger_ms=20) as p:
        for v in sorted(inputs):
            p.produce(INPUT, v, key=v)
    log = tmp_path / "app.log"
    setup_s = time.monotonic() - started

    def start(hold: str = "") -> App:
        app = App(node, len(apps), log, hold)
        apps.append(app)
        return app

    # Each step starts an instance and kills it, or the node under it, at a seeded point. Held points (the
    # instance stops there until killed; its k-th transaction): "F" its records are staged, no offsets sent;
    # "P" the offsets sent, commit_transaction not called; "C" committed, nothing open. "node": kill -9 of the
    # node while the instance is held at "F", which then goes on against the restarted node and must be
    # refused, as its transaction was aborted. "timer" and "node-timer": the instance, or the node, at a random
    # time (inside commit_transaction too). A step ends in an instance's first four transactions or so: the input
    # (40 of them) outlasts the steps.
    rng = random.Random(33)
    steps = ["F", "P", "C", "timer", "timer", "node", "node-timer"]
    rng.shuffle(steps)
    aborted: set[tuple[int, int]] = set()
    for step in steps:
        if step in ("timer", "node-timer"):  # a random point within its first three transactions
            app = start()
            app.wait_for("B", rng.randint(1, 3), deadline)
            app.run_for(rng.uniform(0, 0.05))
            if step == "node-timer":
                node.kill()
                node.restart()
                app.wait_for("C", app.count("C") + 1, deadline)  # it goes on, or fails on its aborted transaction
            app.kill()
            continue
        phase, txn = ("F" if step == "node" else step), rng.randint(0, 2)
        app = start(f"{phase}:{txn}")
        assert app.wait_for(phase, txn + 1, deadline), (
            f"instance {app.instance} ended before {step}:{txn}: {app.tail()}"
        )
        if phase != "C":  # open: its records staged on the node, in no table (read with delta-rs)
            aborted.add((app.instance, txn))
            assert (app.instance, txn) not in tagged(node.root), "a record of an open transaction is in a table"
        if step == "node":
            node.kill()
            node.restart()
            app.release()
            assert app.proc.wait(60) != 0, "the instance went on with a transaction the node aborted"
        else:
            app.kill()

    app = start()  # the last instance finishes the input; restarted if it fails
    while not app.wait_for("DONE", 1, deadline):
        assert time.monotonic() < deadline, f"the input was not done in time: {app.tail()}"
        app = start()
    assert app.proc.wait(30) == 0, app.tail()
    assert app.count("C") >= 1, "the input was done before the last instance: the kills came too late"
    loop_s = time.monotonic() - started - setup_s

    known: dict[tuple[int, int], tuple[int, set[str]]] = {}
    for a in apps:
        known |= transactions(a)
    aborted |= {k for k, (_, phases) in known.items() if "F" in phases and "P" not in phases}
    committed = {k for k, (_, phases) in known.items() if "C" in phases}

    in_delta = delta_rows(spark, node.root)
    for topic, tag in ((OUT_A, "a"), (OUT_B, "b")):
        rows = read_committed(node.url, topic)
        assert in_delta[topic] == sorted(rows), f"{topic}: the Delta table and a read_committed Consumer differ"
        for p in range(PARTITIONS[topic]):
            offsets = sorted(o for q, o, _ in rows if q == p)
            assert offsets == list(range(len(offsets))), f"{topic}/{p}: offsets are not 0..n-1"
        fields = [v.decode().split(":") for _, _, v in rows]
        assert {f[0] for f in fields} == {tag}
        ids = Counter(f[1] for f in fields)
        twice = sorted(i for i, n in ids.items() if n > 1)
        assert not twice, f"{topic}: {len(twice)} input records more than once, e.g. {twice[:5]}"
        assert set(ids) == inputs, f"{topic}: {len(inputs - set(ids))} input records missing"
        seen = Counter((int(f[2]), int(f[3])) for f in fields)
        assert not set(seen) & aborted, f"{topic}: records of aborted transactions {sorted(set(seen) & aborted)}"
        assert committed <= set(seen), f"{topic}: committed transactions missing {sorted(committed - set(seen))}"
        partly = {k: n for k, n in seen.items() if n != known.get(k, (-1, set()))[0]}
        assert not partly, f"{topic}: transactions partly visible (seen, of records): {partly}"
    print(
        f"\n{len(apps)} instances, {len(committed)} committed, {len(aborted)} aborted transactions;"
        f" setup {setup_s:.1f} s, loop {loop_s:.1f} s, checks {time.monotonic() - started - setup_s - loop_s:.1f} s"
    )
