"""Security overhead benchmark: acks=all produce throughput and p99 with API keys + ACLs on, against off.

Prints one JSON document. Starts ``logstore serve`` twice on loopback (fresh
roots, one 8-partition topic): once open (``security.enabled=false``) and once
with ``security.enabled=true``, a key, and the principal's rights given by a
prefixed ACL among a few dozen others (not a super user, so every request is
authenticated and authorized). The load is a closed loop of ``--concurrency``
requests of 1,000-record batches (acks=all) for ``--seconds``; runs alternate
off/on and the medians are reported.

Run: ``.venv/bin/python bench/security.py`` (about half a minute;
``--seconds 20 --runs 5`` for a steadier figure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import orjson
from _http_load import LogstoreServer

from logstore.security import AclBinding, FileSecurityStore, Operation, PatternType, Permission, ResourceType, new_key

RECORDS = 1000
VALUE_BYTES = 100
PARTITIONS = 8


def body() -> bytes:
    rng = np.random.default_rng(0)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)
    vals = [bytes(letters[rng.integers(0, len(letters), VALUE_BYTES)]).decode() for _ in range(RECORDS)]
    return orjson.dumps({"records": [{"value": v} for v in vals]})


async def closed_loop(url: str, key: str | None, seconds: float, concurrency: int) -> dict[str, float]:
    payload = body()
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits, headers=headers) as c:
        end = time.monotonic() + seconds

        async def worker() -> None:
            while time.monotonic() < end:
                started = time.perf_counter()
                r = await c.post("/v1/topics/bench-events/records", params={"acks": "all"}, content=payload)
                r.raise_for_status()
                latencies.append(time.perf_counter() - started)

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - started
    return {
        "records_per_s": len(latencies) * RECORDS / elapsed,
        "p99_ms": float(np.percentile(latencies, 99) * 1000),
    }


def run(secure: bool, seconds: float, concurrency: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        key = None
        config: dict[str, object] = {}
        if secure:
            store = FileSecurityStore(str(root))
            record, key = new_key("User:bench")
            store.add_key(record)
            topic, cluster = ResourceType.TOPIC, ResourceType.CLUSTER
            allow, prefixed = Permission.ALLOW, PatternType.PREFIXED
            acls = [AclBinding(f"User:other{i}", topic, f"t{i}-", prefixed, Operation.ALL, allow) for i in range(40)]
            acls += [
                AclBinding("User:bench", topic, "bench-", prefixed, Operation.WRITE, allow),
                AclBinding("User:bench", cluster, "kafka-cluster", PatternType.LITERAL, Operation.CREATE, allow),
            ]
            store.add_acls(acls)
            config = {"security.enabled": "true"}
        srv = LogstoreServer(root, **config).start()
        try:
            with httpx.Client(base_url=srv.url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as c:
                c.post("/v1/topics", json={"name": "bench-events", "partitions": PARTITIONS}).raise_for_status()
            return asyncio.run(closed_loop(srv.url, key, seconds, concurrency))
        finally:
            srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    results: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for _ in range(args.runs):
        for mode in ("off", "on"):
            results[mode].append(run(mode == "on", args.seconds, args.concurrency))
    summary = {
        mode: {k: statistics.median(r[k] for r in runs) for k in ("records_per_s", "p99_ms")}
        for mode, runs in results.items()
    }
    summary["ratio_on_off"] = {
        "records_per_s": summary["on"]["records_per_s"] / summary["off"]["records_per_s"],
        "p99_ms": summary["on"]["p99_ms"] / summary["off"]["p99_ms"],
    }
    print(json.dumps({"params": vars(args), **summary}, indent=2))


if __name__ == "__main__":
    main()
