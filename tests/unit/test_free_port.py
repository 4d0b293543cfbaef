"""The ports the tests and benchmarks give their servers: outside the kernel's ephemeral range, never twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness import free_port

_EPHEMERAL_LOW = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_ports_lie_below_the_ephemeral_range_and_never_repeat() -> None:
    # A port in the ephemeral range can be taken by any outgoing connection's source port before the
    # server binds it (a ZooKeeper ensemble member then exits with status 1).
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(1024 < p < _EPHEMERAL_LOW for p in ports)


@pytest.mark.parametrize("worker", [0, 1])
def test_each_xdist_worker_draws_from_its_own_slice(worker: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
    middle = 10_000 + (_EPHEMERAL_LOW - 10_000) // 2
    ports = [free_port() for _ in range(100)]
    assert all((p < middle) if worker == 0 else (p >= middle) for p in ports)
