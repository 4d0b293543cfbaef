"""Where an ingest node's CPU goes at its max rate: CPU per thread and per parser process, as JSON.

Starts ``logstore serve`` on a fresh root with one 8-partition topic, drives
it with the closed loop of ``bench/_http_load.py`` (acks=all, ``--concurrency``
1,000-record requests of 100-byte values in flight, JSON or Arrow bodies) for
``--settle`` + ``--seconds`` seconds, and reads each thread's CPU time (user +
system, ``/proc/<pid>/task/<tid>/stat``) at the start and at the end of the
``--seconds`` window; the node's parser processes are counted whole. Each
thread is named by what runs on it: its Python thread name (``py-spy dump``
from the venv, read twice in the window), else its OS name (``comm``: delta-rs's
and the allocator's native threads name themselves), with a trailing number
dropped, and grouped:

* ``event_loop``: the main thread — uvicorn's event loop: HTTP, routing,
  validation, the accumulator, handing records to the committers;
* ``committer``: the ``num.io.threads`` committer pool (Parquet encoding,
  Delta commits, their fsyncs); ``committer-timer`` its linger timer;
* ``wal``, ``checkpoint``…: the process's shared pools; other Python threads
  by name (``AnyIO worker thread``: the thread pool FastAPI runs blocking
  calls on); native threads by ``comm``;
* ``threads_ended``: CPU of threads that ended within the window (the
  process's total less its threads');
* ``parsers``: the parser processes (``num.parser.processes``), every thread.

``shares`` divides each by the total (node and parsers); ``cores`` by the
window's seconds. With ``--stacks`` (py-spy in the venv), ``py-spy record``
samples the node for the window (``--nonblocking``: the node is not paused)
and ``top_frames`` lists, per thread group, the functions most often on the
stack (``inclusive``) and at its top (``self``), as shares of that group's
samples: what to move when one share stands out. ``--stacks all`` samples a
thread whenever it is not idle, which includes waiting for the interpreter
lock (a frame that just called into native code that released it is charged
the wait); ``--stacks gil`` only the samples holding the lock: what the event
loop and the committers compete for (native work that releases it, such as
Parquet encoding, is then left out).

With ``--door kafka`` the node serves its Kafka listener too and the load is
Kafka's own ``ProducerPerformance`` (acks=all, ``batch.size=262144``,
``linger.ms=5``, 100-byte values, null keys: the same-client figure of
``bench/vs_kafka.py``), sending without a limit until the window ends;
``records_per_s`` is then the topic's high watermarks' growth over the window.
``event_loop`` holds the listener: framing, decoding record batches, handing
them to the accumulator.

    .venv/bin/python bench/profile_ingest.py                         # JSON bodies, 5 s window
    .venv/bin/python bench/profile_ingest.py --body-format arrow --stacks gil
    .venv/bin/python bench/profile_ingest.py --door kafka --stacks all
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from _http_load import RECORDS, closed_loop
from _kafka import TUNED_PRODUCER, producer_performance, start_producer_performance
from harness import TICKS_PER_S, LogstoreServer, children, cpu_ticks, emit, free_port, load_average, machine, stop_child

TOPIC = "profile"
PARTITIONS = 8
_PY_SPY = Path(sys.executable).parent / "py-spy"
_NUMBERED = re.compile(r"[-_ ]?\d+$")


def py_spy() -> str | None:
    """The py-spy next to this interpreter, or on PATH; None without one."""
    return str(_PY_SPY) if _PY_SPY.exists() else shutil.which("py-spy")


def thread_ticks(pid: int) -> dict[int, int]:
    """CPU ticks (user + system) of each thread of ``pid`` now."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            utime, stime, *_ = cpu_ticks(task / "stat")
        except (OSError, ValueError):  # ended since listed
            continue
        out[int(task.name)] = utime + stime
    return out


def process_ticks(pid: int) -> int:
    """CPU ticks of process ``pid``, every thread, ended ones included (not its children's)."""
    utime, stime, *_ = cpu_ticks(f"/proc/{pid}/stat")
    return utime + stime


def python_thread_names(pid: int) -> dict[int, str]:
    """OS thread id → Python thread name of ``pid``'s Python threads (py-spy dump), or {} without py-spy."""
    tool = py_spy()
    if tool is None:
        return {}
    out = subprocess.run([tool, "dump", "--pid", str(pid), "--json", "--nonblocking"], capture_output=True, text=True)
    if out.returncode:
        return {}
    return {int(t["os_thread_id"]): str(t["thread_name"]) for t in json.loads(out.stdout) if t.get("os_thread_id")}


def group_of(tid: int, pid: int, names: dict[int, str]) -> str:
    """The group a thread's CPU is counted under (see the module docstring)."""
    if tid == pid:
        return "event_loop"
    name = names.get(tid)
    if name is None:
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:
            name = "unknown"
    return _NUMBERED.sub("", name) or name


class Sampler:
    """``py-spy record`` of the node for ``seconds`` (raw collapsed stacks with thread ids), in the background."""

    def __init__(self, pid: int, seconds: float, out: Path, *, gil: bool) -> None:
        tool = py_spy()
        assert tool is not None
        self.out = out
        cmd = [tool, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
        cmd += ["--format", "raw", "--threads", "--nonblocking", "--rate", "200", "--output", str(out)]
        cmd += ["--gil"] if gil else []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def top_frames(self, pid: int, names: dict[int, str], top: int) -> dict[str, Any]:
        """Per thread group: its samples, and the ``top`` functions most often on its stack and at its top."""
        _, err = self.proc.communicate(timeout=120)
        if self.proc.returncode or not self.out.exists():
            return {"error": err.decode(errors="replace")[-1000:]}
        samples: collections.Counter[str] = collections.Counter()
        inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        leaf: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for line in self.out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = stack.split(";")
            # py-spy names the thread first: "thread (0x7f…)" or, with a name, "process … thread (…)".
            head = frames[0]
            m = re.search(r"\((0x[0-9A-Fa-f]+|\d+)\)", head)
            tid = _os_tid(m[1]) if m else -1
            group = "event_loop" if tid == pid else group_of(tid, pid, names) if tid > 0 else head
            n = int(count)
            samples[group] += n
            body = [f for f in frames[1:] if f]
            for f in set(body):
                inclusive[group][_short(f)] += n
            if body:
                leaf[group][_short(body[-1])] += n
        return {
            g: {
                "samples": total,
                "inclusive": {f: round(c / total, 3) for f, c in inclusive[g].most_common(top)},
                "self": {f: round(c / total, 3) for f, c in leaf[g].most_common(top)},
            }
            for g, total in samples.most_common()
        }


def _os_tid(raw: str) -> int:
    """py-spy's ``--threads`` label: the OS thread id (decimal), or a pthread id (hex: not an OS id, -1)."""
    return -1 if raw.startswith("0x") else int(raw)


def _short(frame: str) -> str:
    """``fn (path/to/module.py:12)`` → ``fn (module.py)``: one entry per function, not per line."""
    m = re.match(r"(.*) \((.*?):\d+\)$", frame)
    return f"{m[1]} ({os.path.basename(m[2])})" if m else frame


def high_watermarks(server: LogstoreServer) -> int:
    """The sum of the profiled topic's high watermarks: records committed so far."""
    info = httpx.get(f"{server.url}/v1/topics/{TOPIC}", timeout=30).raise_for_status().json()
    return sum(p["high_watermark"] for p in info["partitions"])


class KafkaLoad:
    """``ProducerPerformance`` against the node's listener from :meth:`start` until :meth:`stop`; records/s from
    the topic's high watermarks between :meth:`mark` and :meth:`stop` (acks=all: committed records)."""

    def __init__(self, server: LogstoreServer, listener: str) -> None:
        self.server = server
        self.listener = listener
        self.proc: subprocess.Popen[bytes] | None = None
        self.marked = (0.0, 0)

    def start(self) -> None:
        self.proc = start_producer_performance(self.listener, TOPIC, "all", TUNED_PRODUCER)

    def mark(self) -> None:
        self.marked = (time.perf_counter(), high_watermarks(self.server))

    def stop(self) -> dict[str, Any]:
        t1, hw1 = time.perf_counter(), high_watermarks(self.server)
        stop_child(self.proc)
        t0, hw0 = self.marked
        return {"records_per_s": round((hw1 - hw0) / (t1 - t0)), "requests": None, "failed": None}


def profile(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    info = machine()
    kafka = args.door == "kafka"
    listener = f"127.0.0.1:{free_port()}"
    server = LogstoreServer(scratch / "root", **({"listeners": f"PLAINTEXT://{listener}"} if kafka else {})).start()
    kafka_load = KafkaLoad(server, listener)
    try:
        server.create_topic(TOPIC, PARTITIONS)
        if kafka:
            producer_performance(listener, TOPIC, args.warmup_requests * RECORDS, -1, "all", TUNED_PRODUCER)
        else:
            closed_loop(
                server.url, TOPIC, "all", args.concurrency, requests=args.warmup_requests, body_format=args.body_format
            )
        assert server.proc is not None
        pid = server.proc.pid
        load: dict[str, Any] = {}

        def drive() -> None:
            load.update(
                closed_loop(
                    server.url,
                    TOPIC,
                    "all",
                    args.concurrency,
                    seconds=args.settle + args.seconds + 1,
                    body_format=args.body_format,
                )
            )

        driver = threading.Thread(target=drive)
        if kafka:
            kafka_load.start()
        else:
            driver.start()
        time.sleep(args.settle)  # the load generator's start, not a synchronisation: the window is measured as is
        kafka_load.mark()
        names = python_thread_names(pid)
        parsers = children(pid)
        t0, proc0 = time.perf_counter(), process_ticks(pid)
        threads0 = thread_ticks(pid)
        parsers0 = {c: process_ticks(c) for c in parsers}
        sampler = None
        if args.stacks and py_spy():
            sampler = Sampler(pid, args.seconds, scratch / "stacks.txt", gil=args.stacks == "gil")
        time.sleep(args.seconds)
        threads1 = thread_ticks(pid)
        proc1 = process_ticks(pid)
        parsers1 = {c: process_ticks(c) for c in parsers if Path(f"/proc/{c}").exists()}
        window = time.perf_counter() - t0
        names |= python_thread_names(pid)
        stacks = sampler.top_frames(pid, names, args.top) if sampler is not None else None
        if kafka:
            load |= kafka_load.stop()
        else:
            driver.join()
    finally:
        stop_child(kafka_load.proc)
        server.stop()
    groups: collections.Counter[str] = collections.Counter()
    for tid, ticks in threads1.items():
        groups[group_of(tid, pid, names)] += ticks - threads0.get(tid, 0)
    counted = sum(groups.values())
    groups["threads_ended"] = max(0, (proc1 - proc0) - counted)
    groups["parsers"] = sum(parsers1.get(c, parsers0[c]) - parsers0[c] for c in parsers0)
    total = sum(groups.values()) or 1
    seconds = {g: t / TICKS_PER_S for g, t in groups.items()}
    out: dict[str, Any] = {
        "machine": info,
        "config": {
            "door": args.door,
            "load": "ProducerPerformance, acks=all, " + ", ".join(f"{k}={v}" for k, v in TUNED_PRODUCER.items())
            if kafka
            else f"{args.concurrency} requests of {RECORDS} records in flight, acks=all",
            "body_format": None if kafka else args.body_format,
            "concurrency": None if kafka else args.concurrency,
            "window_seconds": round(window, 2),
            "records_per_request": None if kafka else RECORDS,
            "partitions": PARTITIONS,
            "python_thread_names": bool(names),
        },
        "load": {k: load.get(k) for k in ("records_per_s", "requests", "failed", "mean_ms", "p99_ms")},
        "cpu_seconds": {g: round(s, 2) for g, s in sorted(seconds.items(), key=lambda kv: -kv[1])},
        "shares": {g: round(t / total, 3) for g, t in groups.most_common()},
        "cores": {g: round(s / window, 2) for g, s in seconds.items()}
        | {"total": round(total / TICKS_PER_S / window, 2)},
        "cpu_ms_per_request": round(
            1000 * total / TICKS_PER_S / max(1, window * load.get("records_per_s", 0) / RECORDS), 3
        ),
        "cpu_us_per_record": round(1e6 * total / TICKS_PER_S / max(1, window * load.get("records_per_s", 0)), 3),
        "load_average_end": load_average(),
    }
    if stacks is not None:
        out["top_frames"] = stacks
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5, help="the measured window")
    ap.add_argument("--settle", type=float, default=2, help="seconds of load before the window opens")
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    ap.add_argument(
        "--door",
        choices=("http", "kafka"),
        default="http",
        help="the load: HTTP produce requests, or ProducerPerformance against the Kafka listener",
    )
    ap.add_argument("--body-format", choices=("json", "arrow"), default="json")
    ap.add_argument(
        "--warmup-requests",
        type=int,
        default=200,
        help=f"requests before the load (first commits); --door kafka: {RECORDS} records each",
    )
    ap.add_argument(
        "--stacks",
        choices=("all", "gil"),
        help="py-spy record the window: top functions per thread group, of every sample or of those holding the GIL",
    )
    ap.add_argument("--top", type=int, default=15, help="functions listed per thread group with --stacks")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="profile-ingest-"))
    try:
        emit(profile(args, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
