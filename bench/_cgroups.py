"""CPU caps for the benchmarks' processes: one cgroup v1 ``cpu`` cgroup per capped process tree.

A cluster node, or a consumer-group member, measured on a machine of few
cores shares them with every other process of the run: three nodes on two
cores add no CPU, so their throughput says nothing of how the system scales.
Capping each at ``C`` cores (``cpu.cfs_quota_us`` = ``C`` times ``cpu.cfs_period_us``
in a cgroup of its own) gives each the same budget, as separate machines of
``C`` cores would, while the load generator stays outside every cgroup.

A process is put in its cgroup before it runs anything of its own (the
command runs through ``sh``, which writes its own pid to ``cgroup.procs``
and then ``exec``s the command), so whatever it starts — a node's parser
processes — is born inside. Writing a pid to ``cgroup.procs`` moves every
thread of that process.

:class:`CpuCaps` creates the cgroups under ``/sys/fs/cgroup/cpu/`` and removes
them when closed, also after a failure: processes still in one are moved back
to the root cgroup first. Where cgroups cannot be made (not root, no cgroup v1
``cpu`` controller mounted, a read-only file system), :func:`unavailable` says
why, and the benchmarks run uncapped and say so.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
"""Where the cgroup v1 ``cpu`` controller is mounted (the root cgroup)."""


def unavailable(root: Path = CPU_ROOT) -> str | None:
    """Why CPU caps cannot be made here, or None when they can."""
    if not (root / "cpu.cfs_quota_us").exists():
        return f"no cgroup v1 cpu controller at {root} (cpu.cfs_quota_us missing)"
    if os.geteuid() != 0:
        return "not root: cgroups under the cpu controller need root"
    probe = root / f"logstore-bench-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        return f"cannot create a cgroup under {root}: {e}"
    return None


class CpuCaps:
    """cgroups named ``logstore-bench-<pid>-<name>``, each capped at ``cores`` CPU cores; a context manager."""

    def __init__(self, cores: float, root: Path = CPU_ROOT) -> None:
        if cores <= 0:
            raise ValueError(f"a CPU cap must be positive, not {cores} cores")
        self.cores = cores
        self.root = root
        self.groups: dict[str, Path] = {}

    def __enter__(self) -> CpuCaps:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def create(self, name: str) -> Path:
        """A new cgroup capped at ``cores`` cores (or the existing one of that name); its directory."""
        if name in self.groups:
            return self.groups[name]
        path = self.root / f"logstore-bench-{os.getpid()}-{name}"
        path.mkdir()
        self.groups[name] = path
        period = int((path / "cpu.cfs_period_us").read_text())
        (path / "cpu.cfs_quota_us").write_text(str(round(self.cores * period)))
        return path

    def prefix(self, name: str) -> list[str]:
        """A command prefix that runs the command inside cgroup ``name`` from its first instruction."""
        procs = self.create(name) / "cgroup.procs"
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs)]

    def add(self, name: str, pid: int) -> None:
        """Move process ``pid`` (all its threads) into cgroup ``name``."""
        (self.create(name) / "cgroup.procs").write_text(str(pid))

    def pids(self, name: str) -> list[int]:
        """The processes in cgroup ``name`` now."""
        return [int(x) for x in (self.groups[name] / "cgroup.procs").read_text().split()]

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per cgroup: the cap, and ``cpu.stat``'s throttling so far (periods, throttled periods, throttled ms)."""
        out: dict[str, dict[str, Any]] = {}
        for name, path in self.groups.items():
            stat = dict(line.split() for line in (path / "cpu.stat").read_text().splitlines() if line.strip())
            out[name] = {
                "cores": self.cores,
                "periods": int(stat.get("nr_periods", 0)),
                "throttled_periods": int(stat.get("nr_throttled", 0)),
                "throttled_ms": round(int(stat.get("throttled_time", 0)) / 1e6),
            }
        return out

    def throttled_since(self, before: dict[str, dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
        """Per cgroup of ``names`` since ``before`` (an earlier :meth:`stats`): the share of CFS periods in
        which it ran out of quota (``throttled_share``: near 0, the cap did not limit it) and the ms it waited."""
        now = self.stats()
        out = {}
        for name in names:
            if name not in now:
                continue
            a, b = now[name], before.get(name, {"periods": 0, "throttled_periods": 0, "throttled_ms": 0})
            periods = a["periods"] - b["periods"]
            throttled = a["throttled_periods"] - b["throttled_periods"]
            out[name] = {
                "throttled_share": round(throttled / periods, 3) if periods else 0.0,
                "throttled_ms": a["throttled_ms"] - b["throttled_ms"],
            }
        return out

    def close(self) -> None:
        """Remove every cgroup made, moving any process still in one back to the root cgroup first."""
        for path in self.groups.values():
            _remove(path, self.root)
        self.groups.clear()


def _remove(path: Path, root: Path) -> None:
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            for pid in (path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (root / "cgroup.procs").write_text(pid)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY: a task was still leaving; try again for a while
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def cgroup_of(pid: int) -> str | None:
    """The ``cpu`` cgroup path of process ``pid`` (``/`` for the root), or None when it has ended."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return None


def in_cgroup(caps: CpuCaps, name: str, pids: Sequence[int]) -> bool:
    """Whether every one of ``pids`` that still runs is in cgroup ``name``."""
    want = "/" + caps.groups[name].name
    return all(cgroup_of(p) in (want, None) for p in pids)
