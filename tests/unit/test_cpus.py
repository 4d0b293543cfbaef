"""Usable cores: the affinity mask, capped by the cgroups' CPU quota (a container's CPU limit), v1 and v2."""

import os
from pathlib import Path

from logstore._cpus import cgroup_cpu_limit, usable_cores


def affinity() -> int:
    return len(os.sched_getaffinity(0))


def cgroup_v1(tmp_path: Path, quota_us: int, *, path: str = "/bench/node-1", parent_quota_us: int = -1) -> Path:
    """A cgroup v1 tree with the ``cpu`` controller under tmp_path; the fake /proc/self/cgroup naming ``path``."""
    root = tmp_path / "fs"
    parent = root / "cpu,cpuacct" / path.strip("/").split("/")[0]
    leaf = root / "cpu,cpuacct" / path.strip("/")
    leaf.mkdir(parents=True)
    for cgroup, quota in ((parent, parent_quota_us), (leaf, quota_us)):
        (cgroup / "cpu.cfs_period_us").write_text("100000\n")
        (cgroup / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    proc = tmp_path / "cgroup"
    proc.write_text(f"4:memory:/x\n1:cpu,cpuacct:{path}\n0::/\n")
    return proc


def test_a_v1_quota_of_half_a_core_is_one_usable_core(tmp_path: Path) -> None:
    proc = cgroup_v1(tmp_path, 50_000)
    assert cgroup_cpu_limit(proc, tmp_path / "fs") == 0.5
    assert usable_cores(proc, tmp_path / "fs") == 1


def test_a_quota_rounds_up_to_whole_cores_and_never_exceeds_the_affinity(tmp_path: Path) -> None:
    proc = cgroup_v1(tmp_path, 150_000)
    assert usable_cores(proc, tmp_path / "fs") == min(2, affinity())
    proc = cgroup_v1(tmp_path / "big", 6_400_000)
    assert usable_cores(proc, tmp_path / "big" / "fs") == affinity()


def test_a_parent_cgroups_smaller_quota_wins(tmp_path: Path) -> None:
    proc = cgroup_v1(tmp_path, 300_000, parent_quota_us=100_000)
    assert cgroup_cpu_limit(proc, tmp_path / "fs") == 1.0


def test_no_quota_means_the_affinity_mask(tmp_path: Path) -> None:
    proc = cgroup_v1(tmp_path, -1)
    assert cgroup_cpu_limit(proc, tmp_path / "fs") is None
    assert usable_cores(proc, tmp_path / "fs") == affinity()
    assert usable_cores(tmp_path / "no-such-file", tmp_path / "fs") == affinity()


def test_a_v2_cpu_max_counts_and_max_means_unlimited(tmp_path: Path) -> None:
    root = tmp_path / "fs"
    (root / "kubepods" / "pod").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "kubepods" / "cpu.max").write_text("max 100000\n")
    (root / "kubepods" / "pod" / "cpu.max").write_text("50000 100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/kubepods/pod\n")
    assert cgroup_cpu_limit(proc, root) == 0.5
    assert usable_cores(proc, root) == 1
    (root / "kubepods" / "pod" / "cpu.max").write_text("max 100000\n")
    assert usable_cores(proc, root) == affinity()
