"""Transactions benchmark: commit latency, and transactional throughput against plain acks=all produce.

Prints one JSON document, measured over HTTP against a ``logstore serve``
child process on a fresh root (the load generator shares the machine):

* ``commit_latency``: ``--commits`` transactions, each of ``--topics`` topics x
  ``--partitions`` partitions x ``--per-partition`` records (1,000 by default:
  8,000 records a transaction), staged in requests of ``--request-records``;
  the latency of each ``POST /v1/transactions/{tid}/commit`` (the decision,
  one Delta commit per topic through the committer, the state row), p50/p99.
* ``throughput``: the same records sent twice in the same run, into fresh
  topics of the same shape — as transactions of ``--txn-records`` (10,000)
  records (stage every request, then commit), and as plain produce with
  acks=all (each request answered once its records are committed) — one
  request at a time both ways. Records/s of each and their ratio (goal ≥ 0.7).

Each figure is the median of ``--runs`` runs, each on a fresh server and root.
Values are ``harness.VALUE_BYTES`` bytes, keys null, partitions given
explicitly (round-robin).

Run: ``.venv/bin/python bench/transactions.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from harness import VALUE_BYTES, LogstoreServer, emit, load_average, machine, median_of, storage, summary_ms


def batches(total: int, partitions: int, per_request: int, start: int = 0) -> list[list[dict[str, Any]]]:
    """``total`` records as JSON request bodies of ``per_request`` records, partition ``i % partitions``."""
    value = "x" * VALUE_BYTES
    out = []
    for first in range(0, total, per_request):
        n = min(per_request, total - first)
        out.append([{"value": value, "partition": (start + first + i) % partitions} for i in range(n)])
    return out


def ok(r: httpx.Response) -> Any:
    """The JSON body of a successful answer; anything else stops the benchmark with the answer's text."""
    if r.status_code >= 300:
        raise RuntimeError(f"{r.request.method} {r.request.url}: {r.status_code} {r.text}")
    return r.json()


def transaction(c: httpx.Client, tid: str, epoch: int, topics: list[str], bodies: list[list[dict[str, Any]]]) -> float:
    """Stage ``bodies`` into every topic of ``topics`` in one transaction and commit it; the commit's milliseconds."""
    params: dict[str, str | int] = {"transactional_id": tid, "producer_epoch": epoch}
    for topic in topics:
        for body in bodies:
            ok(c.post(f"/v1/topics/{topic}/records", params=params, json={"records": body}))
    t0 = time.perf_counter()
    ok(c.post(f"/v1/transactions/{tid}/commit", json={"producer_epoch": epoch}))
    return (time.perf_counter() - t0) * 1000


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    """One fresh server: the commit latency series, then both throughput legs."""
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as d:
        node = LogstoreServer(Path(d)).start()
        try:
            with httpx.Client(base_url=node.url, timeout=120) as c:
                return measure(c, node, args)
        finally:
            node.stop()


def measure(c: httpx.Client, node: LogstoreServer, args: argparse.Namespace) -> dict[str, Any]:
    lat_topics = [f"lat-{i}" for i in range(args.topics)]
    for t in lat_topics:
        node.create_topic(t, args.partitions)
    epoch = int(ok(c.post("/v1/transactions/bench-lat/init", json={}))["producer_epoch"])
    bodies = batches(args.partitions * args.per_partition, args.partitions, args.request_records)
    transaction(c, "bench-lat", epoch, lat_topics, bodies)  # warm-up: tables, readers, the committer
    ms = [transaction(c, "bench-lat", epoch, lat_topics, bodies) for _ in range(args.commits)]

    tx_topics = [f"tx-{i}" for i in range(args.topics)]
    plain_topics = [f"plain-{i}" for i in range(args.topics)]
    for t in tx_topics + plain_topics:
        node.create_topic(t, args.partitions)
    per_topic = args.txn_records // args.topics
    bodies = batches(per_topic, args.partitions, args.request_records)
    epoch = int(ok(c.post("/v1/transactions/bench-tput/init", json={}))["producer_epoch"])
    t0 = time.perf_counter()
    for _ in range(args.transactions):
        transaction(c, "bench-tput", epoch, tx_topics, bodies)
    tx_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(args.transactions):
        for topic in plain_topics:
            for body in bodies:
                ok(c.post(f"/v1/topics/{topic}/records", params={"acks": "all"}, json={"records": body}))
    plain_s = time.perf_counter() - t0
    total = args.transactions * per_topic * args.topics
    return {
        "commit_latency": summary_ms(ms),
        "throughput": {
            "transactional_records_per_s": round(total / tx_s),
            "acks_all_records_per_s": round(total / plain_s),
            "transactional_over_acks_all": round(plain_s / tx_s, 3),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--topics", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--per-partition", type=int, default=1_000, help="records per partition per latency transaction")
    ap.add_argument("--commits", type=int, default=100, help="transactions in the latency series")
    ap.add_argument("--txn-records", type=int, default=10_000, help="records per transaction for throughput")
    ap.add_argument("--transactions", type=int, default=30, help="transactions per throughput leg")
    ap.add_argument("--request-records", type=int, default=1_000, help="records per produce request")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 1 run, 10 commits, 5 transactions")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.commits, args.transactions = 1, 10, 5
    root = tempfile.gettempdir()
    out: dict[str, Any] = {"machine": machine() | {"storage": storage(root)}}
    results = [one_run(args) for _ in range(args.runs)]
    out |= {
        "value_bytes": VALUE_BYTES,
        "runs": args.runs,
        "latency_transaction": {
            "topics": args.topics,
            "partitions": args.partitions,
            "records": args.topics * args.partitions * args.per_partition,
            "commits": args.commits,
        },
        "throughput_transaction_records": args.txn_records,
        "request_records": args.request_records,
        **median_of(results),
        "commit_p50_ms_per_run": [r["commit_latency"]["p50_ms"] for r in results],
        "ratio_per_run": [r["throughput"]["transactional_over_acks_all"] for r in results],
        "goal_ratio": 0.7,
    }
    out["machine"] |= {"storage_end": storage(root), "load_average_end": load_average()}
    emit(out)


if __name__ == "__main__":
    main()
