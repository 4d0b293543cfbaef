"""What the benchmarks share: the machine they ran on, their figures and JSON, topics to read, servers and Spark.

Every script under ``bench/`` prints one JSON document (:func:`emit`) and
builds it from these pieces, so the same thing is measured, summarised and
named the same way everywhere:

* machine facts — :func:`machine`, :func:`storage`, :func:`load_average`, and
  the CPU a process used (:func:`cpu_ticks`, :func:`children`);
* figures — :func:`summary_ms` is every latency summary (keys ``p50_ms``,
  ``p99_ms``, ``p999_ms``…, ``max_ms``, ``mean_ms``); :func:`median_of` is the
  median of every figure over runs;
* topics — :func:`open_store`, :func:`records`, :func:`fill` and
  :func:`timed_appends` write through the core's public writer;
* a ``logstore serve`` child process — :class:`LogstoreServer`, :func:`free_port`, :func:`stop_child`.

Two tools build on it, each a module of its own: the HTTP load generator
(``bench/_http_load.py``) and Spark's side of the reads and of end-to-end
latency (``bench/_spark.py``).

Why a benchmark records :func:`storage`: every Delta commit creates files (a
Parquet file per partition it touches and the commit file), so a commit's cost
follows what creating a file costs on the file system holding the data, and
that is not a constant of the machine. On ext4 mounted without a journal, the
inode allocator passes over inodes freed recently (the kernel's
``recently_deleted()``, which applies only without a journal): the more files
were deleted on the file system lately — test suites, earlier benchmark runs —
the more CPU each new file costs. On the 2-core machine the benchmarks were
developed on (journal-less ext4), creating an empty file cost 0.02 ms of CPU at
one hour and 0.5-0.7 ms at others, and a profile of a loop of commits
(``perf``) once spent ~40% of its time in that scan. A benchmark raises it
itself, deleting each run's data: one ``bench/ingest.py --topics 1,20,200 --runs
3`` took the cost of a new file in ``/tmp`` from 0.07 to 1.0 ms of CPU, and its
rounds ran slower in turn. The benchmarks measure :func:`storage` at their start
and at their end (``storage``, ``storage_end``), so figures from different
hours, and drift within a run, can be told apart.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa

from logstore.config import load_config
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import ProducerBatch

VALUE_BYTES = 100
"""Bytes of each record value, unless a benchmark says otherwise (keys are null)."""

# -- the machine ------------------------------------------------------------------

FILE_BYTES = 100_000
"""Bytes of each probe file of :func:`storage`: about one Parquet file of a 1,000-record request of 100-byte values."""


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages now."""
    return [round(x, 2) for x in os.getloadavg()]


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
        "load_average_start": load_average(),
    }


def storage(path: str | Path, files: int = 200) -> dict[str, Any]:
    """The file system holding ``path``, and what creating a file on it costs now (medians of ``files`` files).

    ``create_file_cpu_ms``: CPU (user + system, this thread) to create a file,
    write :data:`FILE_BYTES` and close it; ``create_fsync_file_ms``: wall time
    to do the same with an fsync before the close. ``journal``: whether an
    ext4 file system has one (``None`` for other types).
    """
    mount = _mount_of(Path(path).resolve())
    data = os.urandom(FILE_BYTES)
    with tempfile.TemporaryDirectory(dir=path, prefix=".storage-probe-") as d:
        cpu_ms = [_write(os.path.join(d, f"a{i}"), data, sync=False, clock=time.thread_time) for i in range(files)]
        fsync_ms = [
            _write(os.path.join(d, f"s{i}"), data, sync=True, clock=time.perf_counter)
            for i in range(max(1, files // 4))
        ]
    return {
        **mount,
        "create_file_cpu_ms": round(statistics.median(cpu_ms), 3),
        "create_fsync_file_ms": round(statistics.median(fsync_ms), 3),
    }


def _write(path: str, data: bytes, *, sync: bool, clock: Callable[[], float]) -> float:
    """Create ``path`` holding ``data`` (fsynced with ``sync``); the milliseconds it took by ``clock``."""
    t0 = clock()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return (clock() - t0) * 1e3


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


def cpu_ticks(stat: str | Path) -> list[int]:
    """``utime``, ``stime``, ``cutime``, ``cstime`` (clock ticks) from a ``/proc/…/stat`` file."""
    return [int(x) for x in Path(stat).read_text().rsplit(")", 1)[1].split()[11:15]]


TICKS_PER_S = os.sysconf("SC_CLK_TCK")
"""Clock ticks a second, the unit of :func:`cpu_ticks`."""


def children(pid: int) -> list[int]:
    """The processes ``pid`` started and that still run, from /proc."""
    return [int(c) for f in Path(f"/proc/{pid}/task").glob("*/children") for c in f.read_text().split()]


# -- figures and JSON ----------------------------------------------------------------


def summary_ms(
    ms: Sequence[float] | np.ndarray, percentiles: Sequence[float] = (50, 99), digits: int = 2
) -> dict[str, float | None]:
    """A latency summary of ``ms`` (milliseconds): ``p50_ms``, ``p99_ms`` (``p999_ms`` for 99.9…), ``max_ms``,
    ``mean_ms``, rounded to ``digits``; every value ``None`` when there is none.

    Percentiles interpolate linearly between the nearest samples (numpy's default).
    """
    a = np.asarray(ms, dtype=float)
    keys = [f"p{q:g}".replace(".", "") + "_ms" for q in percentiles]
    if a.size == 0:
        return dict.fromkeys([*keys, "max_ms", "mean_ms"])
    out: dict[str, float | None] = {
        k: round(float(np.percentile(a, q)), digits) for k, q in zip(keys, percentiles, strict=True)
    }
    return out | {"max_ms": round(float(a.max()), digits), "mean_ms": round(float(a.mean()), digits)}


def median_of(results: Sequence[Mapping[str, Any]], digits: int = 2) -> dict[str, Any]:
    """Field-wise medians of ``results`` (nested fields too), rounded to ``digits``; ``None`` where a run has none."""
    out: dict[str, Any] = {}
    for k, v in results[0].items():
        values = [r[k] for r in results]
        if isinstance(v, Mapping):
            out[k] = median_of(values, digits)
        elif any(x is None for x in values):
            out[k] = None
        else:
            out[k] = round(statistics.median(values), digits)
    return out


def emit(document: Mapping[str, Any]) -> None:
    """Print a benchmark's one JSON document."""
    print(json.dumps(document, indent=2))


# -- topics -------------------------------------------------------------------------


def open_store(root: str | Path, config: Mapping[str, object] | None = None) -> LogStore:
    """The embedded store over ``root`` with these config keys (``{"checkpoint.interval": 10}``), no environment."""
    return LogStore(load_config(environ={}, path=None, overrides={"logstore.root": str(root), **(config or {})}))


def records(
    n: int,
    *,
    partitions: int = 1,
    partition: int | None = None,
    value_bytes: int = VALUE_BYTES,
    rng: np.random.Generator | None = None,
    values: pa.Array | None = None,
    timestamp_ms: int | None = None,
) -> pa.Table:
    """``n`` records with null keys, for ``TopicWriter.append``.

    Record ``i`` goes to partition ``i % partitions``, or every one to
    ``partition``. Values are ``value_bytes`` bytes: ``b"x"`` repeated, or
    random bytes from ``rng``, or ``values`` as given. Timestamps are the
    commit's, or ``timestamp_ms``.
    """
    if values is None and rng is None:
        values = pa.repeat(pa.scalar(b"x" * value_bytes, pa.binary()), n)
    elif values is None:
        raw = pa.py_buffer(rng.integers(0, 256, n * value_bytes, dtype=np.uint8).tobytes())
        values = pa.FixedSizeBinaryArray.from_buffers(pa.binary(value_bytes), n, [None, raw]).cast(pa.binary())
    parts = np.full(n, partition, np.int32) if partition is not None else np.arange(n, dtype=np.int32) % partitions
    return input_table(pa.array(parts), values, timestamps_ms=None if timestamp_ms is None else [timestamp_ms] * n)


def timed_appends(
    writer: TopicWriter, commits: int, make: Callable[[int], pa.Table | Sequence[pa.Table]]
) -> list[float]:
    """``commits`` appends of ``make(i)`` (one table, or several: one request each); milliseconds each append took.

    ``make`` runs outside the clock.
    """
    ms = []
    for i in range(commits):
        made = make(i)
        batches = [ProducerBatch(t) for t in ([made] if isinstance(made, pa.Table) else made)]
        t0 = time.perf_counter()
        results = writer.append(batches)
        ms.append((time.perf_counter() - t0) * 1000)
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise failed[0]
    return ms


def fill(
    writer: TopicWriter,
    total: int,
    per_commit: int,
    *,
    rotate: bool = False,
    value_bytes: int = VALUE_BYTES,
    rng: np.random.Generator | None = None,
) -> float:
    """Write ``total`` records in commits of ``per_commit``; the seconds it took.

    Each commit spreads its records over the topic's partitions, or with
    ``rotate`` goes to one partition, the next one each commit. Values as :func:`records`.
    """
    partitions = writer.num_partitions
    sizes = [min(per_commit, total - start) for start in range(0, total, per_commit)]

    def make(i: int) -> pa.Table:
        where = i % partitions if rotate else None
        return records(sizes[i], partitions=partitions, partition=where, value_bytes=value_bytes, rng=rng)

    t0 = time.perf_counter()
    timed_appends(writer, len(sizes), make)
    return time.perf_counter() - t0


# -- a logstore serve child process ---------------------------------------------------


_PORTS_GIVEN: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral range.

    A port the kernel hands out (``bind`` to port 0) lies in the ephemeral
    range, from which it also picks the source port of every outgoing
    connection: between this call and the server's own ``bind`` — or while a
    server is down before a restart on the same port — a client's connection
    (ZooKeeper members dialling each other, a Spark JVM, an HTTP client) can
    take it, and the server fails to start (ZooKeeper exits with status 1).
    So the port is drawn at random below that range, never twice in one
    process; under pytest-xdist each worker draws from its own slice, so two
    workers never pick the same port.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    first, last = min(10_000, low // 2), low
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:  # a worker xdist starts again after a crash is gw<n> with n >= workers: it takes n's slot
        index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")) % workers
        width = (last - first) // workers
        first, last = first + index * width, first + (index + 1) * width
    rng = random.SystemRandom()
    while True:
        port = rng.randrange(first, last)
        if port in _PORTS_GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port


def stop_child(proc: subprocess.Popen[bytes] | None, timeout_s: float = 60) -> None:
    """SIGTERM a child process that runs (a server drains, then exits); SIGKILL if it has not exited in time."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


_LOGSTORE = [sys.executable, "-m", "logstore_cli"]


class LogstoreServer:
    """``logstore serve`` (the console script) on 127.0.0.1 in a child process; ``url`` is its base URL.

    ``root``: a directory, or an object-store URI (``s3://bucket/prefix``).
    ``config`` keys are the server's dotted config keys (``buffer.memory``),
    passed as ``LOGSTORE_*`` environment variables; ``env``: other variables
    for the server (``AWS_ENDPOINT_URL``), over this process's. ``prefix`` runs
    before the command and ``exec``s it (``bench/_cgroups.py``: into a
    CPU-capped cgroup), so the server's pid is still ``proc.pid``.
    """

    def __init__(
        self,
        root: Path | str,
        *,
        prefix: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        **config: object,
    ) -> None:
        self.root = root
        self.prefix = list(prefix)
        self.env = dict(env or {})
        self.config = config
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        # A file, not a pipe: a pipe nobody reads fills up, and the node's event loop then blocks on a log line.
        fd, name = tempfile.mkstemp(prefix=f"logstore-serve-{self.port}-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)

    def start(self) -> LogstoreServer:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")} | self.env
        env |= {"LOGSTORE_" + k.upper().replace(".", "_"): str(v) for k, v in self.config.items()}
        serve = ["serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, *_LOGSTORE, "--root", str(self.root), *serve],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait for the socket, not for a fixed time
            if self.proc.poll() is not None:
                raise RuntimeError(f"logstore serve exited: {self.log_path.read_text(errors='replace')}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("logstore serve did not become ready within 60 s")

    def create_topic(self, name: str, partitions: int, headers: Mapping[str, str] | None = None) -> None:
        body = {"name": name, "partitions": partitions}
        httpx.post(self.url + "/v1/topics", json=body, headers=headers).raise_for_status()

    def cpu_seconds(self) -> dict[str, float]:
        """CPU (user + system, seconds) that the node and its parser processes have used so far, from /proc.

        ``event_loop``: the node's main thread (HTTP, the event loop's share of each
        request); ``other_threads``: the node's other threads (committers, write-ahead
        log, fsyncs, delta-rs's own); ``parsers``: its child processes, living or ended.
        """
        assert self.proc is not None
        pid = self.proc.pid
        node, main = cpu_ticks(f"/proc/{pid}/stat"), cpu_ticks(f"/proc/{pid}/task/{pid}/stat")
        parsers = node[2] + node[3]
        for child in children(pid):
            with contextlib.suppress(OSError):  # one that ended since it was listed is in the node's cutime now
                parsers += sum(cpu_ticks(f"/proc/{child}/stat"))
        return {
            "event_loop": (main[0] + main[1]) / TICKS_PER_S,
            "other_threads": (node[0] + node[1] - main[0] - main[1]) / TICKS_PER_S,
            "parsers": parsers / TICKS_PER_S,
        }

    def stop(self) -> None:
        """SIGTERM (drain, then exit); SIGKILL if it has not exited after 60 s. Its log file goes with it."""
        stop_child(self.proc)
        self.log_path.unlink(missing_ok=True)
