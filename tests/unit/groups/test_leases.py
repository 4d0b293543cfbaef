"""Group leases: one live reader per (group, topic), taken atomically, kept alive through I/O errors."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from logstore.errors import GroupSubscribedToTopicError, InvalidGroupIdError
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


def _lease_files(root: Path) -> dict[Path, list[str]]:
    """Every folder under ``root`` holding lease files, with their names."""
    found: dict[Path, list[str]] = {}
    for folder, _, files in os.walk(root):
        leases = sorted(f for f in files if ".lease" in f)
        if leases:
            found[Path(folder)] = leases
    return found


@pytest.mark.parametrize("group", [".", "..", "../..", "a/../..", "/", "x/y", "\x00", "..\x00", "%2e", "~"])
def test_any_group_name_is_one_folder_under_groups(tmp_path: Path, group: str) -> None:
    root = tmp_path / "root"
    lease = GroupLease(str(root), group, timeout_ms=60_000)
    lease.acquire({"t"})
    try:
        folder = Path(lease.dir)
        assert folder.parent == root / "_groups" and folder.name not in ("", ".", ".."), lease.dir
        assert _lease_files(tmp_path) == {folder: ["t.lease.1"]}
        with pytest.raises(GroupSubscribedToTopicError):  # the same name finds the same lease
            GroupLease(str(root), group, timeout_ms=60_000).acquire({"t"})
    finally:
        lease.release()


def test_ordinary_group_names_keep_their_folders(tmp_path: Path) -> None:
    """Lease folders written by earlier versions stay where they are: only what needs it is encoded."""
    expected = {
        "g": "g",
        "orders-eu.v2_x": "orders-eu.v2_x",
        "...": "...",
        ".hidden": ".hidden",
        "Grüße": "Grüße",
        "a b/c": "a%20b%2fc",
        "100%": "100%25",
        "ü\u00d7": "ü%d7",  # a multiplication sign: not a letter
    }
    for group, folder in expected.items():
        assert GroupLease(str(tmp_path), group).dir == str(tmp_path / "_groups" / folder)


def test_different_group_names_never_share_a_folder(tmp_path: Path) -> None:
    long = "g" * 300  # more than a file name's 255 bytes
    names = [".", "..", "%2e", "%2e%2e", "\u2603", "&03", "%u002603", long, long + "x", "é" * 200, "é" * 201]
    folders = [GroupLease(str(tmp_path), g).dir for g in names]
    assert len(set(folders)) == len(names)
    assert all(len(os.path.basename(f).encode()) <= 255 for f in folders)
    lease = GroupLease(str(tmp_path), long, timeout_ms=60_000)
    lease.acquire({"t"})  # a long name is a folder that can be created
    lease.release()


def test_the_longest_topic_name_has_a_lease(tmp_path: Path) -> None:
    topic = "t" * 249  # Kafka's limit: its lease file's name would exceed 255 bytes as is
    lease = GroupLease(str(tmp_path), "g", timeout_ms=60_000)
    lease.acquire({topic})
    try:
        with pytest.raises(GroupSubscribedToTopicError):
            GroupLease(str(tmp_path), "g", timeout_ms=60_000).acquire({topic})
    finally:
        lease.release()


def test_an_empty_group_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidGroupIdError):
        GroupLease(str(tmp_path), "")
