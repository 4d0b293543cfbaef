"""The nemesis (bench/nemesis.py) for three minutes: no anomaly, and no partition unavailable for long.

A real 3-server ZooKeeper ensemble and 3 ``logstore serve`` nodes under a fixed
seed's schedule of faults — kill -9 and restart of a node, SIGSTOP/SIGCONT, kill
of a ZooKeeper server, kill -9 of the whole cluster, a node cut from ZooKeeper
while it serves clients, a topic deleted and created again, partitions added, a
probe principal's key and ACL given and taken away (security on) — while producers
(acks 0/1/all, idempotent and plain) and group members work.
The checker (bench/nemesis_check.py) reads the history and the final tables:
every anomaly count must be 0, and no partition may go longer without an
acknowledged write than the session timeout + 4 s (docs/nemesis.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from bench.nemesis_check import ANOMALIES

pytestmark = [pytest.mark.zookeeper, pytest.mark.crash]

BENCH = Path(__file__).resolve().parents[3] / "bench"
SEED = 20261125
MINUTES = 3
SESSION_S = 4.0
"""The nodes' ``zookeeper.session.timeout.ms`` in bench/nemesis.py, in seconds."""
OPEN: frozenset[str] = frozenset()
"""Anomalies found and not fixed yet (docs/nemesis.md says which; none now): this run reports them (a warning with
the count and the history) and fails on every other one. A count becomes an assertion again when its fix lands."""


@pytest.mark.timeout(MINUTES * 60 + 600)
def test_three_minutes_of_faults_leave_no_anomaly(tmp_path: Path) -> None:
    args = ["--minutes", str(MINUTES), "--seed", str(SEED), "--security", "--out", str(tmp_path)]
    run = subprocess.run(
        [sys.executable, str(BENCH / "nemesis.py"), *args],
        capture_output=True,
        text=True,
        timeout=MINUTES * 60 + 540,
        env={**os.environ, "PYTHONPATH": str(BENCH.parent)},
    )
    assert run.stdout.strip(), f"no result (status {run.returncode}): {run.stderr[-3000:]}"
    result = json.loads(run.stdout.strip().splitlines()[-1])
    where = f"{json.dumps(result)}; history in {tmp_path / 'history.jsonl'}"
    checked = [k for k in ANOMALIES if k not in OPEN]
    assert {k: result[k] for k in checked} == dict.fromkeys(checked, 0), where
    for k in sorted(OPEN):
        if result[k]:
            warnings.warn(f"open anomaly {k}: {result[k]} ({where})", stacklevel=1)
    assert result["worst_unavailability_s"] is None or result["worst_unavailability_s"] <= SESSION_S + 4, where
    assert sum(result["faults"].values()) >= 10, where  # the faults really ran
    assert run.returncode == 0, run.stderr[-3000:]
