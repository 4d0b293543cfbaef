"""Group leases across processes: of many forked processes racing for an expired lease, exactly one takes it."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

from logstore.groups.leases import GroupLease
from tests.support.leases import race_for_lease


def _race_in_process(root: str, topic: str, barrier: threading.Barrier) -> int:
    barrier.wait()
    return int(race_for_lease(root, topic, None, 10_000) is not None)  # the process ends: no release


def test_exactly_one_of_many_racing_processes_takes_an_expired_lease(tmp_path: Path) -> None:
    root = str(tmp_path)
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as manager, ctx.Pool(6) as pool:
        for round_ in range(15):
            topic = f"t{round_}"
            old = GroupLease(root, "g", timeout_ms=5_000, clock_ms=lambda: 0)
            old.acquire({topic})  # expires at 5_000 ms
            old._stop.set()
            barrier = manager.Barrier(6)
            wins = pool.starmap(_race_in_process, [(root, topic, barrier)] * 6)
            assert sum(wins) == 1, f"round {round_}: {sum(wins)} processes were granted one lease"
