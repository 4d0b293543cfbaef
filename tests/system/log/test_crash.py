"""kill -9 in the middle of a commit loop loses nothing acknowledged and leaves no gap."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from logstore.config import load_config
from logstore.log.catalog import Catalog, high_watermark
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.structs import AppendResult, ProducerBatch
from tests.support.helpers import assert_gap_free
from tests.support.paths import REPO

pytestmark = pytest.mark.crash

PARTITIONS = 3

CHILD = """
import json, sys
from logstore.log.catalog import Catalog
from logstore.config import load_config
from logstore.log.writer import TopicWriter
from tests.system.log.test_crash import records_for
catalog = Catalog(load_config(environ={}, overrides={"logstore.root": sys.argv[1]}))
w = TopicWriter(catalog, "t")
seq = 0
while True:
    (r,) = w.append([records_for(seq)])
    ack = {"seq": seq, "offsets": r.offsets.to_pylist(), "partitions": r.partitions.to_pylist()}
    print(json.dumps(ack), flush=True)
    seq += 1
"""


def records_for(seq: int) -> ProducerBatch:
    """The deterministic batch a producer sends as sequence ``seq`` (and resends on retry)."""
    parts = [(seq * 7 + k) % PARTITIONS for k in range(5)]
    return ProducerBatch(input_table(parts, [f"s{seq}-{k}".encode() for k in range(5)]), "crash-producer", seq)


@pytest.mark.parametrize("kill_after", [3, 17, 40])
def test_kill_9_mid_commit_loop(tmp_path: Path, kill_after: int) -> None:
    root = str(tmp_path / "data")
    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": root}))
    catalog.create_topic("t", PARTITIONS)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, root],
        stdout=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    acked = []
    assert child.stdout is not None
    for line in child.stdout:
        acked.append(json.loads(line))
        if len(acked) >= kill_after:
            child.send_signal(signal.SIGKILL)  # likely mid-commit: the loop never pauses
            break
    child.wait()
    assert child.returncode == -signal.SIGKILL

    # Reopen: the high watermark is right and nothing acknowledged is missing.
    values = assert_gap_free(catalog, "t")
    dt = catalog.table("t")
    for p in range(PARTITIONS):
        assert high_watermark(dt, p) == len(values.get(p, []))
    for a in acked:
        for k, (p, o) in enumerate(zip(a["partitions"], a["offsets"], strict=True)):
            assert values[p][o] == f"s{a['seq']}-{k}".encode()

    # A replay of the last acknowledged sequence returns its offsets and adds nothing.
    w = TopicWriter(catalog, "t")
    last = acked[-1]
    rows_before = sum(len(v) for v in values.values())
    (again,) = w.append([records_for(last["seq"])])
    assert isinstance(again, AppendResult) and again.duplicate
    assert again.offsets.to_pylist() == last["offsets"]
    # The batch in flight at the kill may or may not have committed; resending it settles it exactly once.
    (inflight,) = w.append([records_for(last["seq"] + 1)])
    assert isinstance(inflight, AppendResult)
    values = assert_gap_free(catalog, "t")
    stored = [v for vs in values.values() for v in vs]
    assert len(stored) == len(set(stored))
    assert len(stored) in (rows_before, rows_before + 5)
    (nxt,) = w.append([records_for(last["seq"] + 2)])
    assert isinstance(nxt, AppendResult) and not nxt.duplicate
    assert_gap_free(catalog, "t")
