"""Consumer-group benchmark: records/s read by 1, 2 and 4 HTTP members, and rebalance times.

Prints one JSON document. Writes ``--records`` records of 100-byte values into
an 8-partition topic of a fresh root (straight through the store), starts
``logstore serve`` on it, then:

* ``throughput``: for 1, 2 and 4 members of a fresh group (one thread each,
  keep-alive connections, ``GET …/members/{m}/records?max_records=--fetch``
  plus a heartbeat every 100 ms), records/s until the whole topic is read.
  Client threads share this process's GIL: with more members the client, not
  the server, is often the limit on a small machine.
* ``rebalance``: ``--trials`` times each, with three members heartbeating every
  20 ms: ``join`` — a fourth member joins, time until every partition is owned
  and the new member has its share; ``leave`` — a member leaves (DELETE), time
  until the others own every partition; ``death`` — a member stops
  heartbeating (``session_timeout_ms`` = ``--session-ms``), time until the
  others own every partition, minus the session timeout. p50 and max in ms.

Run: ``.venv/bin/python bench/groups.py`` (about 30 s; ``--records 2000000`` for a longer run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from _http_load import LogstoreServer

from logstore.config import load_config
from logstore.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch

PARTITIONS = 8


def fill(root: Path, records: int) -> None:
    store = LogStore(load_config(environ={}, path=None, overrides={"logstore.root": str(root)}))
    store.create_topic("t", PARTITIONS)
    value = b"v" * 100
    batch = 100_000
    for start in range(0, records, batch):
        n = min(batch, records - start)
        parts = [(start + i) % PARTITIONS for i in range(n)]
        (result,) = store.append("t", [ProducerBatch(input_table(parts, [value] * n))])
        assert not isinstance(result, Exception), result


def join(c: httpx.Client, group: str, **extra: Any) -> str:
    body = {"topics": ["t"], "auto.offset.reset": "earliest", **extra}
    r = c.post(f"/v1/groups/{group}/members", json=body)
    r.raise_for_status()
    return str(r.json()["member_id"])


def throughput(url: str, members: int, total: int, fetch: int) -> float:
    group = f"tp-{members}"
    done = threading.Event()
    counts = [0] * members
    lock = threading.Lock()
    consumed = [0]
    barrier = threading.Barrier(members + 1)
    started = [0.0]

    def member(i: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            mid = join(c, group)
            barrier.wait()
            next_beat = 0.0
            while not done.is_set():
                if time.monotonic() >= next_beat:
                    c.post(f"/v1/groups/{group}/members/{mid}/heartbeat").raise_for_status()
                    next_beat = time.monotonic() + 0.1
                r = c.get(f"/v1/groups/{group}/members/{mid}/records", params={"max_records": fetch, "wait_ms": 100})
                n = len(orjson.loads(r.content)["records"])
                counts[i] += n
                with lock:
                    consumed[0] += n
                    if consumed[0] >= total:
                        done.set()
            c.delete(f"/v1/groups/{group}/members/{mid}")

    threads = [threading.Thread(target=member, args=(i,)) for i in range(members)]
    for t in threads:
        t.start()
    barrier.wait()
    started[0] = time.perf_counter()
    done.wait()
    elapsed = time.perf_counter() - started[0]
    for t in threads:
        t.join()
    return consumed[0] / elapsed


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


def rebalances(url: str, trials: int, session_ms: int) -> dict[str, dict[str, float]]:
    runs = [one_trial(url, f"rb-{trial}", session_ms) for trial in range(trials)]
    return {
        k: {"p50_ms": round(statistics.median(r[k] for r in runs), 1), "max_ms": round(max(r[k] for r in runs), 1)}
        for k in ("join", "leave", "death")
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--fetch", type=int, default=10_000, help="max_records per fetch")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--session-ms", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "data"
        fill(root, args.records)
        srv = LogstoreServer(root).start()
        try:
            tp = {str(n): round(throughput(srv.url, n, args.records, args.fetch)) for n in (1, 2, 4)}
            rb = rebalances(srv.url, args.trials, args.session_ms)
        finally:
            srv.stop()
    print(json.dumps({"records": args.records, "records_per_s": tp, "rebalance": rb}, indent=2))


if __name__ == "__main__":
    main()
