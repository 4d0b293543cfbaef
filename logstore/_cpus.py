"""How many CPU cores this process may use: its affinity mask, and no more than its cgroups' CPU quota.

A container's CPU limit (Kubernetes' ``resources.limits.cpu``, ``docker run
--cpus``) is a CFS quota on the container's cgroup, not an affinity mask: a
process limited to one core still sees every core of the host in
``os.sched_getaffinity``. The defaults sized by cores (``num.io.threads``,
``num.parser.processes``) would then start threads and processes that can only
take turns within the quota, which costs the event loop more than it gives.
So, as the JVM does, the quota counts: ``cpu.max`` (cgroup v2) or
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (cgroup v1, the ``cpu``
controller), the smallest on the way from the process's cgroup up to the root,
rounded up to whole cores.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["cgroup_cpu_limit", "usable_cores"]

_PROC_CGROUP = Path("/proc/self/cgroup")
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cores(proc_cgroup: Path = _PROC_CGROUP, cgroup_root: Path = _CGROUP_ROOT) -> int:
    """CPU cores this process may run on: its affinity mask (where the platform has one), at most its
    cgroups' CPU quota rounded up (:func:`cgroup_cpu_limit`), and at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = cgroup_cpu_limit(proc_cgroup, cgroup_root)
    return cores if limit is None else max(1, min(cores, math.ceil(limit)))


def cgroup_cpu_limit(proc_cgroup: Path = _PROC_CGROUP, cgroup_root: Path = _CGROUP_ROOT) -> float | None:
    """The CPU cores (a fraction, e.g. 0.5) the process's cgroups allow it, or None when none sets a quota.

    ``proc_cgroup`` is ``/proc/self/cgroup``; ``cgroup_root`` where the
    hierarchies are mounted: cgroup v2 at the root itself (or at ``unified/`` on
    a hybrid host), v1's ``cpu`` controller in a folder named after its
    controllers (``cpu``, ``cpu,cpuacct``). Files that cannot be read are
    skipped: a quota nobody can see limits nothing here.
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            for base in (cgroup_root, cgroup_root / "unified"):
                if (base / "cgroup.controllers").exists():
                    limits += _walk_up(base, path, _v2_limit)
                    break
        elif "cpu" in controllers.split(","):
            for base in (cgroup_root / controllers, cgroup_root / "cpu"):
                if base.is_dir():
                    limits += _walk_up(base, path, _v1_limit)
                    break
    return min(limits) if limits else None


def _walk_up(base: Path, path: str, read: Callable[[Path], float | None]) -> list[float]:
    """The limits ``read`` finds in the cgroup at ``path`` under ``base`` and in each of its ancestors."""
    out = []
    here = Path("/") / path
    for cgroup in (here, *here.parents):
        limit = read(base / cgroup.relative_to("/"))
        if limit is not None:
            out.append(limit)
    return out


def _v1_limit(cgroup: Path) -> float | None:
    try:
        quota = int((cgroup / "cpu.cfs_quota_us").read_text())
        period = int((cgroup / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v2_limit(cgroup: Path) -> float | None:
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None
