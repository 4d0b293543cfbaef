"""What a benchmark ran on: the machine, its load, and what its file system charges for a new file now.

Every Delta commit creates files (a Parquet file per partition it touches and
the commit file), so a commit's cost follows what creating a file costs on the
file system holding the data, and that is not a constant of the machine. On
ext4 mounted without a journal, the inode allocator passes over inodes freed
recently (the kernel's ``recently_deleted()``, which applies only without a
journal): the more files were deleted on the file system lately — test suites,
earlier benchmark runs — the more CPU each new file costs. On the 2-core
machine the benchmarks were developed on (journal-less ext4), creating an
empty file cost 0.02 ms of CPU at one hour and 0.5-0.7 ms at others, and a
profile of a loop of commits (``perf``) once spent ~40% of its time in that
scan. A benchmark raises it itself, deleting each run's data: one
``bench/ingest.py --topics 1,20,200 --runs 3`` took the cost of a new file in
``/tmp`` from 0.07 to 1.0 ms of CPU, and its rounds ran slower in turn. The
benchmarks measure :func:`storage` at their start and at their end
(``storage``, ``storage_end``), so figures from different hours, and drift
within a run, can be told apart.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

FILE_BYTES = 100_000
"""Bytes of each probe file: about one Parquet file of a 1,000-record request of 100-byte values."""


def machine() -> dict[str, Any]:
    """CPU model, cores, memory, Java's version and the load averages now."""
    with open("/proc/meminfo") as f:
        mem_kib = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal:"))
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        java = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "mem_gib": round(mem_kib / 2**20, 1),
        "java": java,
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }


def storage(path: str | Path, files: int = 200) -> dict[str, Any]:
    """The file system holding ``path``, and what creating a file on it costs now (medians of ``files`` files).

    ``create_file_cpu_ms``: CPU (user + system, this thread) to create a file,
    write :data:`FILE_BYTES` and close it; ``create_fsync_file_ms``: wall time
    to do the same with an fsync before the close. ``journal``: whether an
    ext4 file system has one (``None`` for other types).
    """
    mount = _mount_of(Path(path).resolve())
    cpu_ms, fsync_ms = [], []
    data = os.urandom(FILE_BYTES)
    with tempfile.TemporaryDirectory(dir=path, prefix=".storage-probe-") as d:
        for i in range(files):
            t0 = time.thread_time()
            _write(os.path.join(d, f"a{i}"), data, sync=False)
            cpu_ms.append((time.thread_time() - t0) * 1e3)
        for i in range(max(1, files // 4)):
            t0 = time.perf_counter()
            _write(os.path.join(d, f"s{i}"), data, sync=True)
            fsync_ms.append((time.perf_counter() - t0) * 1e3)
    return {
        **mount,
        "create_file_cpu_ms": round(statistics.median(cpu_ms), 3),
        "create_fsync_file_ms": round(statistics.median(fsync_ms), 3),
    }


def _write(path: str, data: bytes, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _mount_of(path: Path) -> dict[str, Any]:
    """Mount point, type and device of the file system holding ``path`` (the longest mount point above it)."""
    best: list[str] = []
    with open("/proc/self/mounts") as f:
        for line in f:
            device, point, fstype = line.split()[:3]
            point = point.replace("\\040", " ")
            if (path == Path(point) or Path(point) in path.parents) and len(point) >= len(best[1] if best else ""):
                best = [device, point, fstype]
    if not best:
        return {"mount": None, "type": None, "device": None, "journal": None}
    device, point, fstype = best
    journal = None
    if fstype == "ext4":  # jbd2 lists each journal it runs as <device>-<inode of the journal>
        name = os.path.basename(os.path.realpath(device))
        journal = os.path.isdir("/proc/fs/jbd2") and any(e.startswith(name + "-") for e in os.listdir("/proc/fs/jbd2"))
    return {"mount": point, "type": fstype, "device": device, "journal": journal}
