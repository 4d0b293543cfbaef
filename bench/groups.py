"""Consumer-group benchmark: records/s read by 1, 2 and 4 HTTP members, and rebalance times.

Prints one JSON document. Writes ``--records`` records of 100-byte values into
an 8-partition topic of a fresh root (straight through the store), starts
``logstore serve`` on it, then:

* ``throughput``: for 1, 2 and 4 members of a fresh group, each in a process
  of its own (so the server, not one client GIL, is measured), keep-alive
  connections, ``GET …/members/{m}/records?max_records=--fetch`` plus a
  heartbeat every 100 ms, records/s until the whole topic is read; once with
  the Arrow IPC response (``Accept: application/vnd.apache.arrow.stream``, what
  the Python ``Consumer`` uses), once with JSON (the default), and once with
  Python ``Consumer``s (``consume(--fetch)``: a ``Message`` per record).
* same-run limits: the node's plain fetch route (JSON, 4 client processes,
  two partitions each) and a direct ``logstore.log.reader`` read of the same
  records in one thread; ``ratios_of_arrow_4_members`` divides the 4-member
  Arrow figure by each. The load average at the end says whether the machine
  was busy.
* ``rebalance``: ``--trials`` times each, with three members heartbeating every
  20 ms: ``join`` — a fourth member joins, time until every partition is owned
  and the new member has its share; ``leave`` — a member leaves (DELETE), time
  until the others own every partition; ``death`` — a member stops
  heartbeating (``session_timeout_ms`` = ``--session-ms``), time until the
  others own every partition, minus the session timeout. p50 and max in ms.

With ``--member-cpus C`` every member process runs in a cgroup of its own
capped at ``C`` CPU cores (``bench/_cgroups.py``; the server stays outside),
moved there before it reads anything, so that more members bring more CPU as
separate machines would; ``capped`` shows the cap, or why it could not be
made (then members run uncapped), and ``member_cgroups_throttled`` how much
of each run each member's cgroup was throttled (near 0: the cap did not limit it).
``ratios_to_1_member`` divides each member count's records/s by one member's.

Run: ``.venv/bin/python bench/groups.py`` (under a minute; ``--records 5000000`` for a longer run).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow as pa
from _cgroups import CpuCaps, unavailable
from harness import LogstoreServer, emit, fill, load_average, open_store, summary_ms

from logstore.client import Consumer
from logstore.wire.arrow_fetch import ARROW_STREAM

PARTITIONS = 8


def filled(root: Path, records: int) -> None:
    """Topic ``t`` of ``PARTITIONS`` partitions under ``root`` with ``records`` records, 100,000 a commit."""
    store = open_store(root)
    store.create_topic("t", PARTITIONS)
    fill(store.writer("t"), records, 100_000)


def join(c: httpx.Client, group: str, **extra: Any) -> str:
    body = {"topics": ["t"], "auto.offset.reset": "earliest", **extra}
    r = c.post(f"/v1/groups/{group}/members", json=body)
    r.raise_for_status()
    return str(r.json()["member_id"])


def _member(url: str, group: str, fmt: str, fetch: int, total: int, consumed: Any, barrier: Any, done: Any) -> None:
    """One member in a process of its own: join, then fetch (and heartbeat every 100 ms) until the topic is read."""
    accept = {"Accept": ARROW_STREAM} if fmt == "arrow" else {}
    with httpx.Client(base_url=url, timeout=60, headers=accept) as c:
        mid = join(c, group)
        barrier.wait()
        next_beat = 0.0
        while not done.is_set():
            if time.monotonic() >= next_beat:
                c.post(f"/v1/groups/{group}/members/{mid}/heartbeat").raise_for_status()
                next_beat = time.monotonic() + 0.1
            r = c.get(f"/v1/groups/{group}/members/{mid}/records", params={"max_records": fetch, "wait_ms": 100})
            r.raise_for_status()
            n = count(r.content, fmt)
            with consumed.get_lock():
                consumed.value += n
                if consumed.value >= total:
                    done.set()
        c.delete(f"/v1/groups/{group}/members/{mid}")


def _consumer(url: str, group: str, fetch: int, total: int, consumed: Any, barrier: Any, done: Any) -> None:
    """One Python ``Consumer`` (Arrow fetches, a ``Message`` per record) in a process of its own."""
    conf = {
        "bootstrap.servers": url,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "max.poll.records": fetch,
        "heartbeat.interval.ms": 100,  # as the raw members: a joining member's share comes by heartbeat
    }
    with Consumer(conf) as cons:
        cons.subscribe(["t"])
        barrier.wait()
        while not done.is_set():
            n = len(cons.consume(fetch, timeout=0.1))
            with consumed.get_lock():
                consumed.value += n
                if consumed.value >= total:
                    done.set()


def _plain(url: str, partitions: list[int], fetch: int, barrier: Any, out: Any) -> None:
    """Read ``partitions`` whole through the node's plain fetch route (JSON), one after another."""
    with httpx.Client(base_url=url, timeout=60) as c:
        barrier.wait()
        n = 0
        for p in partitions:
            offset = 0
            while True:
                r = c.get(f"/v1/topics/t/partitions/{p}/records", params={"offset": offset, "max_records": fetch})
                r.raise_for_status()
                recs = orjson.loads(r.content)["records"]
                if not recs:
                    break
                n += len(recs)
                offset = recs[-1]["offset"] + 1
        with out.get_lock():
            out.value += n


def count(body: bytes, fmt: str) -> int:
    if fmt == "arrow":
        return int(pa.ipc.open_stream(body).read_all().num_rows)
    return len(orjson.loads(body)["records"])


def throughput(
    url: str, members: int, total: int, fetch: int, fmt: str, caps: CpuCaps | None = None
) -> tuple[float, dict[str, Any]]:
    """records/s of ``members`` member processes of a fresh group reading the whole topic, and with ``caps``
    how much each member's cgroup was throttled meanwhile (:meth:`CpuCaps.throttled_since`; else {}).

    ``fmt``: ``arrow`` or ``json`` (raw HTTP members that count rows), or ``consumer`` (Python ``Consumer``s).
    With ``caps``, member ``i`` is moved into cgroup ``member-i`` before the clock starts.
    """
    ctx = mp.get_context("spawn")
    consumed, done, barrier = ctx.Value("q", 0), ctx.Event(), ctx.Barrier(members + 1)
    group = f"tp-{fmt}-{members}"
    procs = [
        ctx.Process(target=_consumer, args=(url, group, fetch, total, consumed, barrier, done))
        if fmt == "consumer"
        else ctx.Process(target=_member, args=(url, group, fmt, fetch, total, consumed, barrier, done))
        for _ in range(members)
    ]
    before = caps.stats() if caps is not None else {}
    for i, p in enumerate(procs):
        p.start()
        if caps is not None and p.pid is not None:
            caps.add(f"member-{i}", p.pid)  # before the barrier: no record is read outside the cgroup
    barrier.wait()
    started = time.perf_counter()
    done.wait()
    elapsed = time.perf_counter() - started
    for p in procs:
        p.join()
    throttled = caps.throttled_since(before, [f"member-{i}" for i in range(members)]) if caps is not None else {}
    return int(consumed.value) / elapsed, throttled


def plain_route(url: str, clients: int, total: int, fetch: int) -> float:
    """records/s of the node's plain fetch route (JSON) read by ``clients`` processes, partitions split among them."""
    ctx = mp.get_context("spawn")
    out, barrier = ctx.Value("q", 0), ctx.Barrier(clients + 1)
    split = [list(range(PARTITIONS))[i::clients] for i in range(clients)]
    procs = [ctx.Process(target=_plain, args=(url, parts, fetch, barrier, out)) for parts in split]
    for p in procs:
        p.start()
    barrier.wait()
    started = time.perf_counter()
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - started
    assert out.value == total, (out.value, total)
    return total / elapsed


def direct_read(root: Path, total: int, fetch: int) -> float:
    """records/s of ``logstore.log.reader`` reading the same records in this process: the storage's own limit."""
    reader = open_store(root).reader("t")
    started = time.perf_counter()
    n = 0
    for p in range(PARTITIONS):
        offset = 0
        while True:
            recs = reader.fetch(p, offset, max_records=fetch, max_bytes=1024 * 1024).records
            if not len(recs):
                break
            n += len(recs)
            offset = int(recs["offset"][-1].as_py()) + 1
    assert n == total, (n, total)
    return total / (time.perf_counter() - started)


class Beater:
    """Members that heartbeat every 20 ms on one thread; ``owned()`` is what each was last told."""

    def __init__(self, url: str, group: str) -> None:
        self.c = httpx.Client(base_url=url, timeout=30)
        self.group = group
        self.members: dict[str, set[tuple[str, int]]] = {}
        self.silent: set[str] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.wait(0.02):
            with self.lock:
                ids = [m for m in self.members if m not in self.silent]
            for mid in ids:
                r = self.c.post(f"/v1/groups/{self.group}/members/{mid}/heartbeat")
                if r.status_code == 200:
                    with self.lock:
                        if mid in self.members:
                            self.members[mid] = {(a["topic"], a["partition"]) for a in r.json()["assignment"]}

    def owned(self, exclude: str | None = None) -> int:
        with self.lock:
            return sum(len(v) for m, v in self.members.items() if m != exclude)


def wait_until(cond: Any, timeout_s: float = 30) -> float:
    t0 = time.perf_counter()
    while not cond():
        if time.perf_counter() - t0 > timeout_s:
            raise TimeoutError("the group did not settle")
        time.sleep(0.002)
    return (time.perf_counter() - t0) * 1000


def one_trial(url: str, group: str, session_ms: int) -> dict[str, float]:
    """Join, leave and death of one member in a group of three heartbeating members; ms each."""
    b = Beater(url, group)
    c = httpx.Client(base_url=url, timeout=30)
    out: dict[str, float] = {}
    try:
        for _ in range(3):
            mid = join(c, group, session_timeout_ms=session_ms)
            with b.lock:
                b.members[mid] = set()
        wait_until(lambda: b.owned() == PARTITIONS)
        # join: a fourth member, until it has its share and every partition is owned
        t0 = time.perf_counter()
        new = join(c, group, session_timeout_ms=session_ms)
        with b.lock:
            b.members[new] = set()
        wait_until(lambda: b.owned() == PARTITIONS and len(b.members[new]) == PARTITIONS // 4)
        out["join"] = (time.perf_counter() - t0) * 1000
        # leave: DELETE, until the other three own everything
        t0 = time.perf_counter()
        c.delete(f"/v1/groups/{group}/members/{new}").raise_for_status()
        with b.lock:
            del b.members[new]
        wait_until(lambda: b.owned() == PARTITIONS)
        out["leave"] = (time.perf_counter() - t0) * 1000
        # death: a member stops heartbeating
        victim = sorted(b.members)[0]
        t0 = time.perf_counter()
        with b.lock:
            b.silent.add(victim)
        wait_until(lambda: b.owned(exclude=victim) == PARTITIONS)
        out["death"] = (time.perf_counter() - t0) * 1000 - session_ms
    finally:
        b.stop.set()
        b.thread.join()
        c.close()
    return out


def rebalances(url: str, trials: int, session_ms: int) -> dict[str, dict[str, float | None]]:
    runs = [one_trial(url, f"rb-{trial}", session_ms) for trial in range(trials)]
    return {k: summary_ms([r[k] for r in runs], percentiles=(50,), digits=1) for k in ("join", "leave", "death")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--fetch", type=int, default=10_000, help="max_records per fetch")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--session-ms", type=int, default=1000)
    ap.add_argument(
        "--member-cpus",
        type=float,
        default=0,
        help="cap each member process at this many CPU cores in a cgroup of its own (0: uncapped)",
    )
    ap.add_argument("--skip-limits", action="store_true", help="no same-run limits (plain route, direct read)")
    ap.add_argument("--skip-rebalance", action="store_true", help="no rebalance trials")
    ap.add_argument("--formats", default="arrow,json,consumer", help="member kinds to measure, comma-separated")
    args = ap.parse_args()
    formats = [f for f in args.formats.split(",") if f.strip()]
    capped: dict[str, Any] = {"member_cpus": None}
    with ExitStack() as stack:
        caps = None
        if args.member_cpus > 0:
            why = unavailable()
            if why is None:
                caps = stack.enter_context(CpuCaps(args.member_cpus))
                capped = {"member_cpus": args.member_cpus}
            else:
                print(f"groups.py: cannot cap the members' CPU ({why}); running uncapped", file=sys.stderr)
                capped = {"member_cpus": None, "uncapped_because": why}
        out = measure(args, formats, caps)
    emit(out | {"capped": capped})


def measure(args: argparse.Namespace, formats: list[str], caps: CpuCaps | None) -> dict[str, Any]:
    """Fill a topic, serve it, and run every measurement that ``args`` asks for; the JSON document's figures."""
    limits: dict[str, int] = {}
    rb: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "data"
        filled(root, args.records)
        srv = LogstoreServer(root).start()
        try:
            runs = {
                fmt: {str(n): throughput(srv.url, n, args.records, args.fetch, fmt, caps) for n in (1, 2, 4)}
                for fmt in formats
            }
            tp = {fmt: {n: round(rate) for n, (rate, _) in by_n.items()} for fmt, by_n in runs.items()}
            throttled = {fmt: {n: t for n, (_, t) in by_n.items()} for fmt, by_n in runs.items()}
            if not args.skip_limits:
                limits = {
                    "plain_fetch_route_json_4_clients": round(plain_route(srv.url, 4, args.records, args.fetch)),
                    "direct_reader_1_thread": round(direct_read(root, args.records, args.fetch)),
                }
            if not args.skip_rebalance:
                rb = rebalances(srv.url, args.trials, args.session_ms)
        finally:
            srv.stop()
    out: dict[str, Any] = {
        "records": args.records,
        "records_per_s": tp,
        "member_cgroups_throttled": throttled if caps is not None else None,
        "ratios_to_1_member": {fmt: {n: round(v / by_n["1"], 2) for n, v in by_n.items()} for fmt, by_n in tp.items()},
    }
    if limits and "arrow" in tp:
        best = tp["arrow"]["4"]
        out["same_run_limits_records_per_s"] = limits
        out["ratios_of_arrow_4_members"] = {k: round(best / v, 2) for k, v in limits.items()}
    if rb is not None:
        out["rebalance"] = rb
    out["load_average_1_5_15"] = load_average()
    return out


if __name__ == "__main__":
    main()
