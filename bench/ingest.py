"""Ingest benchmark: HTTP produce throughput and latency against the core writer's limit.

Prints one JSON document. Starts ``logstore serve`` on loopback (fresh root,
one 8-partition topic) and drives it from a separate load-generator process
(``bench/_http_load.py``: asyncio, keep-alive HTTP/1.1 connections, prepared
requests, as wrk) with 1,000-record JSON batches of
100-byte values:

* ``max``: closed loop, ``--concurrency`` requests in flight, acks=all →
  records/s; the server's mean records per Delta commit is read from /metrics.
* ``limit``: the same records written straight through ``TopicWriter`` with the
  same records per commit, in this process → records/s, and the ratio.
* ``latency``: open loop at half the measured maximum, acks=1 and acks=all →
  p50/p99/p999 in ms.
* ``body_formats``: the same records as JSON and as Arrow IPC bodies
  (``Content-Type: application/vnd.apache.arrow.stream``), both from the Python
  load generator: max records/s and latency at half the JSON maximum, and the ratio.
* ``overload``: acks=0 flood with a small ``buffer.memory``; the server's peak
  RSS (VmHWM; its parser processes' added) against buffer.memory, its peak
  resident memory sampled every 0.1 s (the node's, plus what its parsers hold
  privately: libraries they share counted once) and how much that grew, against
  the goal of ``buffer.memory`` + 150 MiB. ``--overload``: only these runs;
  ``--parser-processes N`` sets their ``num.parser.processes``.

Medians of ``--runs`` runs. Run: ``.venv/bin/python bench/ingest.py`` (``--quick``).
Every document starts with ``machine``: the load averages at the start and end
and what creating a file costs where the servers keep their data, at the start
and at the end (``bench/harness.py``): a commit's cost follows it.

Cost as the work grows, instead of the runs above:

* ``--topics 1,50,200``: for each N, a fresh server with N topics of
  ``SCALE_PARTITIONS`` partitions, every topic written once (opened), then
  ``--concurrency`` acks=all requests in flight for ``--seconds``, each to a
  topic drawn at random → records/s, mean latency, the server's RSS (VmRSS,
  VmHWM) and thread count, requests per Delta commit, the server's CPU (its
  parsers' included) in cores and per request, and each N's ratios to the
  first N's figures; and
  meanwhile the latency of a metadata request sent every 50 ms (what the
  node's other requests — fetch, heartbeats, the console — wait under that
  load). ``--io-threads N`` sets the server's ``num.io.threads``.
* ``--open-topics N``: N topics each written one small request → the
  server's threads and RSS with N topics open, whether every request got its
  200, and the server's CPU use while they sit idle.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow as pa
from _http_load import LOAD_GENERATOR, RECORDS, body, closed_loop, open_loop, touch
from harness import (
    VALUE_BYTES,
    LogstoreServer,
    children,
    emit,
    load_average,
    machine,
    open_store,
    records,
    storage,
    summary_ms,
    timed_appends,
)
from prometheus_client.parser import text_string_to_metric_families

from logstore.config import DEFAULT_IO_THREADS
from logstore.log.writer import TopicWriter

PARTITIONS = 8
SCALE_PARTITIONS = 4
"""Partitions of each topic in the ``--topics`` and ``--open-topics`` runs."""
PROBE_INTERVAL_S = 0.05
"""Pause between two metadata requests of :class:`MetadataProbe`."""


def metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def stage_p50_ms(url: str) -> dict[str, float]:
    """Per-stage p50 (ms) of ``logstore_produce_stage_seconds``: the upper bound of the bucket holding the median."""
    buckets: dict[str, list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        if family.name == "logstore_produce_stage_seconds":
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    le = float(sample.labels["le"])
                    buckets.setdefault(sample.labels["stage"], []).append((le, sample.value))
    p50 = {}
    for stage, cumulative in buckets.items():
        cumulative.sort()
        total = cumulative[-1][1]
        if total:
            p50[stage] = round(1000 * next(le for le, n in cumulative if n >= total / 2), 2)
    return p50


def start_server(root: Path, **config: object) -> LogstoreServer:
    s = LogstoreServer(root, **config).start()
    s.create_topic("bench", PARTITIONS)
    return s


def core_limit(records_per_commit: float, total: int) -> float:
    """records/s of ``TopicWriter`` appends of the load generator's requests, ``records_per_commit`` a commit."""
    per_commit = max(RECORDS, round(records_per_commit / RECORDS) * RECORDS)
    values = pa.array([r["value"] for r in orjson.loads(body())["records"]], pa.string()).cast(pa.binary())
    batches = [records(RECORDS, partition=i % PARTITIONS, values=values) for i in range(per_commit // RECORDS)]
    with tempfile.TemporaryDirectory() as d:
        store = open_store(d)
        store.create_topic("bench", PARTITIONS)
        w = TopicWriter(store.catalog, "bench")
        commits = max(3, total // per_commit)
        ms = timed_appends(w, commits, lambda _i: batches)
        w.close()
        return commits * per_commit / (sum(ms) / 1000)


def server_status(srv: LogstoreServer) -> dict[str, float]:
    """The node's resident memory now and at its peak (MiB, its parser processes included) and its thread count."""
    assert srv.proc is not None
    fields = _status(srv.proc.pid)
    parsers = [_status(pid) for pid in children(srv.proc.pid)]
    return {
        "rss_mib": round(sum(int(f["VmRSS"][0]) for f in [fields, *parsers]) / 1024),
        "hwm_mib": round(sum(int(f["VmHWM"][0]) for f in [fields, *parsers]) / 1024),
        "threads": int(fields["Threads"][0]),
    }


def _status(pid: int) -> dict[str, list[str]]:
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            fields[name] = value.split()
    return fields


def _server_with_topics(root: Path, count: int, **config: object) -> tuple[LogstoreServer, list[str]]:
    """A server over ``root`` holding ``count`` topics of ``SCALE_PARTITIONS`` partitions (created before it starts)."""
    names = [f"t{i:05d}" for i in range(count)]
    store = open_store(root)
    for name in names:
        store.create_topic(name, SCALE_PARTITIONS)
    return LogstoreServer(root, **config).start(), names


class MetadataProbe:
    """While the load runs: ``GET /v1/topics/{topic}`` every ``PROBE_INTERVAL_S`` → how long another request waits.

    Produce shares the node's event loop with every other request (fetch,
    group heartbeats, metadata, the console); this is what they see under load.
    """

    def __init__(self, url: str, topic: str) -> None:
        self._url = f"{url}/v1/topics/{topic}"
        self._stop = threading.Event()
        self._ms: list[float] = []
        self._failed = 0
        self._thread = threading.Thread(target=self._run, name="metadata-probe")

    def __enter__(self) -> MetadataProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.wait(PROBE_INTERVAL_S):
                started = time.perf_counter()
                try:
                    client.get(self._url).raise_for_status()
                except httpx.HTTPError:
                    self._failed += 1  # reported, not timed: the probe goes on
                    continue
                self._ms.append((time.perf_counter() - started) * 1000)

    def summary(self) -> dict[str, Any]:
        """How many requests were answered 200 and how many not; the latency of the first (ms)."""
        return {"requests": len(self._ms), "failed": self._failed, **summary_ms(self._ms, digits=1)}


def scale_run(count: int, seconds: float, concurrency: int, **config: object) -> dict[str, Any]:
    """Closed loop over ``count`` topics, each request to one at random, after every topic was opened."""
    with tempfile.TemporaryDirectory() as d:
        srv, names = _server_with_topics(Path(d), count, **config)
        try:
            touch(srv.url, names, concurrency)
            assert srv.proc is not None
            commits, cpu = metric(srv.url, "logstore_commit_records_count"), srv.cpu_seconds()
            with MetadataProbe(srv.url, names[0]) as probe:
                res = closed_loop(srv.url, names, "all", concurrency, seconds=seconds)
            cpu = {k: v - cpu[k] for k, v in srv.cpu_seconds().items()}
            commits = metric(srv.url, "logstore_commit_records_count") - commits
            status = server_status(srv)
        finally:
            srv.stop()
    return {
        "topics": count,
        "records_per_s": round(res["records_per_s"]),
        "mean_ms": round(res["mean_ms"], 1),
        "requests_per_commit": round(res["requests"] / max(commits, 1), 2),
        "server_cpu_cores": round(sum(cpu.values()) / res["seconds"], 2),
        "server_cpu_ms_per_request": round(1000 * sum(cpu.values()) / max(res["requests"], 1), 2),
        "server_cpu_ms_per_request_by_part": {k: round(1000 * v / max(res["requests"], 1), 2) for k, v in cpu.items()},
        "metadata_request_meanwhile": probe.summary(),
        **status,
    }


def scale(
    counts: list[int], seconds: float, concurrency: int, io_threads: int | None = None, rounds: int = 1
) -> dict[str, object]:
    """``rounds`` rounds of one run per topic count, in turn (drift on a shared machine hits every count alike).

    Each count reports its median run by records/s and every run's records/s; the ratios are of those medians.
    """
    config = {} if io_threads is None else {"num.io.threads": io_threads}
    by_count: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    for _ in range(rounds):
        for n in counts:
            by_count[n].append(scale_run(n, seconds, concurrency, **config))
    runs = []
    for n in counts:
        ranked = sorted(by_count[n], key=lambda r: r["records_per_s"])
        runs.append({**ranked[len(ranked) // 2], "records_per_s_runs": [r["records_per_s"] for r in by_count[n]]})
    first = runs[0]
    return {
        "load_generator": LOAD_GENERATOR,
        "partitions_per_topic": SCALE_PARTITIONS,
        "batch_records": RECORDS,
        "value_bytes": VALUE_BYTES,
        "concurrency": concurrency,
        "seconds": seconds,
        "rounds": rounds,
        "num_io_threads": io_threads if io_threads is not None else f"default ({DEFAULT_IO_THREADS} here)",
        "runs": runs,
        f"ratios_to_{first['topics']}_topics": {
            str(r["topics"]): {
                k: round(r[k] / first[k], 2)
                for k in ("records_per_s", "mean_ms", "server_cpu_ms_per_request", "rss_mib", "threads")
            }
            for r in runs[1:]
        },
    }


def open_topics(count: int, concurrency: int) -> dict[str, object]:
    """Open ``count`` topics on one server (one small request each) → its threads and memory before and after."""
    with tempfile.TemporaryDirectory() as d:
        srv, names = _server_with_topics(Path(d), count)
        try:
            before = server_status(srv)
            opened = touch(srv.url, names, concurrency)
            after = server_status(srv)
            idle_cpu = {"first_5_s": _cpu_percent(srv, 5.0)}
            time.sleep(10)  # past the committers' 10 s of idleness, after which they let go and rest
            idle_cpu["after_15_s"] = _cpu_percent(srv, 5.0)
            try:
                alive = httpx.get(srv.url + "/healthz", timeout=30).status_code == 200
            except httpx.HTTPError:
                alive = False
        finally:
            srv.stop()
    return {
        "topics": count,
        "partitions_per_topic": SCALE_PARTITIONS,
        "answered_200": opened["answered_200"],
        "failures": opened["failures"],
        "seconds_to_open": round(opened["seconds"], 1),
        "server_alive_after": alive,
        "before": before,
        "after": after,
        "idle_cpu_percent": idle_cpu,
    }


def _cpu_percent(srv: LogstoreServer, seconds: float) -> float:
    """The server's CPU use (user + system, its parsers' included, % of one core) over ``seconds`` without requests."""
    start = sum(srv.cpu_seconds().values())
    time.sleep(seconds)
    return round(100 * (sum(srv.cpu_seconds().values()) - start) / seconds, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each figure (medians); rounds of --topics")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--topics", help="comma list of topic counts (1,50,200): the scale runs instead of the others")
    ap.add_argument("--open-topics", type=int, help="open this many topics and report threads and memory")
    ap.add_argument("--io-threads", type=int, help="num.io.threads of the --topics runs (else the default)")
    ap.add_argument("--overload", action="store_true", help="only the overload run")
    ap.add_argument("--parser-processes", type=int, help="num.parser.processes of the overload run (else the default)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.seconds = 1, 4
    info = machine() | {"storage": storage(tempfile.gettempdir())}  # where the servers' roots are made

    def report(figures: dict[str, object]) -> None:
        info["load_average_end"] = load_average()
        info["storage_end"] = storage(tempfile.gettempdir())  # the runs' own deletions raise it
        emit({"machine": info, **figures})

    if args.overload:
        report({"overload": overload(args)})
        return
    if args.topics or args.open_topics:
        out: dict[str, object] = {}
        if args.topics:
            counts = [int(n) for n in args.topics.split(",")]
            out["scale"] = scale(counts, args.seconds, args.concurrency, args.io_threads, args.runs)
        if args.open_topics:
            out["open_topics"] = open_topics(args.open_topics, args.concurrency)
        report(out)
        return
    maxes, limits, per_commit = [], [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as d:
            srv = start_server(Path(d))
            try:
                res = closed_loop(srv.url, "bench", "all", args.concurrency, seconds=args.seconds)
                commits = metric(srv.url, "logstore_commit_records_count")
                records = metric(srv.url, "logstore_commit_records_sum")
            finally:
                srv.stop()
            maxes.append(res["records_per_s"])
            per_commit.append(records / max(commits, 1))
            limits.append(core_limit(per_commit[-1], int(res["records_per_s"] * 3)))
    best = statistics.median(maxes)
    out = {
        "load_generator": LOAD_GENERATOR,
        "batch_records": RECORDS,
        "value_bytes": VALUE_BYTES,
        "partitions": PARTITIONS,
        "runs": args.runs,
        "acks_all_records_per_s": round(best),
        "acks_all_mb_per_s": round(best * VALUE_BYTES / 1e6, 1),
        "records_per_commit": round(statistics.median(per_commit)),
        "core_writer_limit_records_per_s": round(statistics.median(limits)),
        "ratio_to_core_writer": round(best / statistics.median(limits), 3),
    }
    half = best / 2 / RECORDS
    latency = {}
    for acks in ("1", "all"):
        with tempfile.TemporaryDirectory() as d:
            srv = start_server(Path(d))
            try:
                latency[f"acks_{acks}"] = open_loop(srv.url, "bench", acks, args.seconds, half)
                latency[f"acks_{acks}"]["server_stage_p50_ms"] = stage_p50_ms(srv.url)  # type: ignore[assignment]
            finally:
                srv.stop()
    out["latency_at_half_max"] = latency
    out["body_formats"] = body_formats(args, half)
    out["overload"] = overload(args)
    report(out)


OVERLOAD_BUFFER = 64 * 1024 * 1024
"""``buffer.memory`` of the overload runs."""
MEMORY_GOAL_MARGIN_MB = 150
"""The memory goal: under any overload the node grows by at most ``buffer.memory`` plus this many MiB."""


def overload(args: argparse.Namespace) -> dict[str, object]:
    """``--runs`` overload runs (:func:`overload_run`): the median run by growth, and every run's growth.

    ``growth_mb`` is ``peak_resident_mb`` less ``resident_before_mb``; the goal
    is at most ``buffer.memory`` + 150 MiB of it.
    """
    runs = [overload_run(args) for _ in range(args.runs)]
    for run in runs:
        run["growth_mb"] = run["peak_resident_mb"] - run["resident_before_mb"]
    median = sorted(runs, key=lambda r: r["growth_mb"])[len(runs) // 2]
    return {
        **median,
        "growth_mb_runs": [r["growth_mb"] for r in runs],
        "growth_goal_mb": OVERLOAD_BUFFER // 2**20 + MEMORY_GOAL_MARGIN_MB,
    }


def overload_run(args: argparse.Namespace) -> dict[str, Any]:
    """An acks=0 flood (twice ``--concurrency`` connections), ``buffer.memory`` 64 MiB: the node's memory.

    ``peak_rss_mb`` sums each process's VmHWM over the node and its parser
    processes, which counts the libraries they share (Python, Arrow) once per
    process. ``peak_resident_mb``, sampled every 0.1 s, is the node's resident
    memory plus what its parsers hold privately: shared pages counted once.
    """
    buffer = OVERLOAD_BUFFER
    with tempfile.TemporaryDirectory() as d:
        config: dict[str, object] = {"buffer.memory": buffer}
        if args.parser_processes is not None:
            config["num.parser.processes"] = args.parser_processes
        srv = start_server(Path(d), **config)
        try:
            base, base_resident = _hwm(srv), _resident(srv)
            peak_resident = [base_resident]
            done = threading.Event()

            def sample() -> None:
                while not done.wait(0.1):
                    with contextlib.suppress(OSError):  # a parser process that just ended
                        peak_resident.append(_resident(srv))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                flood = closed_loop(srv.url, "bench", "0", args.concurrency * 2, seconds=args.seconds)
            finally:
                done.set()
                sampler.join()
            peak = _hwm(srv)
            parsed = {
                where: metric(srv.url, f'logstore_parsed_bodies_total{{where="{where}"}}')
                for where in ("parser", "event_loop")
            }
        finally:
            srv.stop()
    return {
        "acks_0_records_per_s_offered": round(flood["records_per_s"]),
        "buffer_memory_mb": buffer // 2**20,
        "bodies_parsed": parsed,
        "rss_before_mb": round(base / 2**20),
        "peak_rss_mb": round(peak / 2**20),
        "peak_minus_before_over_buffer": round((peak - base) / buffer, 2),
        "resident_before_mb": round(base_resident / 2**20),
        "peak_resident_mb": round(max(peak_resident) / 2**20),
    }


def body_formats(args: argparse.Namespace, half: float) -> dict[str, object]:
    """The same records as JSON and as Arrow IPC bodies, both from the Python load generator: max records/s
    (acks=all, median of ``--runs``) and latency at ``half`` requests/s (the JSON maximum's half), and the ratios."""
    out: dict[str, object] = {"load_generator": "httpx"}
    for fmt in ("json", "arrow"):
        maxes = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as d:
                srv = start_server(Path(d))
                try:
                    maxes.append(
                        closed_loop(srv.url, "bench", "all", args.concurrency, seconds=args.seconds, body_format=fmt)[
                            "records_per_s"
                        ]
                    )
                finally:
                    srv.stop()
        result: dict[str, object] = {"acks_all_records_per_s": round(statistics.median(maxes))}
        for acks in ("1", "all"):
            with tempfile.TemporaryDirectory() as d:
                srv = start_server(Path(d))
                try:
                    lat = open_loop(srv.url, "bench", acks, args.seconds, half, body_format=fmt)
                    result[f"acks_{acks}_at_half_max"] = lat
                    result[f"acks_{acks}_at_half_max"]["server_stage_p50_ms"] = stage_p50_ms(srv.url)  # type: ignore[index]
                finally:
                    srv.stop()
        out[fmt] = result
    json_max = out["json"]["acks_all_records_per_s"]  # type: ignore[index]
    out["arrow_over_json_records_per_s"] = round(out["arrow"]["acks_all_records_per_s"] / json_max, 3)  # type: ignore[index]
    return out


def _resident(srv: LogstoreServer) -> int:
    """The node's resident bytes plus its parser processes' private ones (what they share with it counted once)."""
    assert srv.proc is not None
    private = ("Private_Clean", "Private_Dirty")
    total = 0
    for pid, fields in [(srv.proc.pid, ("Rss",)), *((c, private) for c in children(srv.proc.pid))]:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            total += sum(int(line.split()[1]) * 1024 for line in f if line.split(":")[0] in fields)
    return total


def _hwm(srv: LogstoreServer) -> int:
    """The peak resident bytes of the node and of its parser processes, summed (each process's own peak)."""
    return int(server_status(srv)["hwm_mib"] * 2**20)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
