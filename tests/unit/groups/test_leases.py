"""Group leases: one live reader per (group, topic), taken atomically, kept alive through I/O errors."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from logstore.errors import GroupSubscribedToTopicError
from logstore.groups.leases import GroupLease
from tests.support.leases import race_for_lease


def test_lease_of_a_crashed_reader_expires(tmp_path: Path) -> None:
    now = [1_000_000]
    crashed = GroupLease(str(tmp_path), "g", timeout_ms=5_000, clock_ms=lambda: now[0])
    crashed.acquire({"t"})
    crashed._stop.set()  # holds the lease but never renews it, like a killed process
    newcomer = GroupLease(str(tmp_path), "g", timeout_ms=5_000, clock_ms=lambda: now[0])
    with pytest.raises(GroupSubscribedToTopicError, match="already has a live reader"):
        newcomer.acquire({"t"})
    now[0] += 5_001
    newcomer.acquire({"t"})
    newcomer.release()
    with pytest.raises(GroupSubscribedToTopicError, match="lost topic 't'"):
        crashed.acquire({"t"})  # what the crashed reader's next commit does first


@pytest.mark.parametrize("previous", ["none", "expired", "released"])
def test_exactly_one_of_many_racing_threads_takes_a_lease(tmp_path: Path, previous: str) -> None:
    root = str(tmp_path)
    for round_ in range(30):
        topic = f"t{round_}"
        if previous != "none":
            old = GroupLease(root, "g", timeout_ms=5_000, clock_ms=lambda: 0)
            old.acquire({topic})  # expires at 5_000 ms
            if previous == "released":
                old.release()
            else:
                old._stop.set()  # no heartbeat: it crashed
        start = threading.Event()
        granted: list[GroupLease | None] = []
        threads = [
            threading.Thread(target=lambda t=topic, s=start, g=granted: g.append(race_for_lease(root, t, s, 10_000)))
            for _ in range(8)
        ]
        for th in threads:
            th.start()
        start.set()
        for th in threads:
            th.join()
        winners = [lease for lease in granted if lease is not None]
        for lease in winners:
            lease.release()
        assert len(winners) == 1, f"round {round_}: {len(winners)} readers were granted one lease"


def test_the_heartbeat_survives_an_io_error(tmp_path: Path) -> None:
    lease = GroupLease(str(tmp_path), "g", timeout_ms=150)  # a renewal every 50 ms
    lease.acquire({"t"})
    try:
        _wait_for(lambda: lease.renewals >= 1)
        # The lease directory is briefly unusable (root ignores permissions: put a file in its place).
        aside = lease.dir + ".aside"
        os.rename(lease.dir, aside)
        with open(lease.dir, "w") as f:
            f.write("not a directory")
        _wait_for(lambda: lease.renewal_failures >= 2)
        os.unlink(lease.dir)
        os.rename(aside, lease.dir)
        renewed = lease.renewals
        _wait_for(lambda: lease.renewals >= renewed + 2)
        assert lease._thread is not None and lease._thread.is_alive()
        lease.acquire({"t"})  # still this reader's: a commit would go ahead
    finally:
        lease.release()


def test_the_heartbeat_survives_an_unexpected_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lease = GroupLease(str(tmp_path), "g", timeout_ms=150)
    lease.acquire({"t"})
    renew = lease._renew
    failures = iter([RuntimeError("a defect in one renewal")])

    def once_broken(topic: str) -> None:
        err = next(failures, None)
        if err is not None:
            raise err
        renew(topic)

    try:
        monkeypatch.setattr(lease, "_renew", once_broken)
        _wait_for(lambda: lease.renewal_failures == 1)
        renewed = lease.renewals
        _wait_for(lambda: lease.renewals >= renewed + 2)  # logged with its traceback; the next rounds renew
        assert lease._thread is not None and lease._thread.is_alive()
        lease.acquire({"t"})
    finally:
        lease.release()


def _wait_for(condition: object, timeout_s: float = 20.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)
