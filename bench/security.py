"""Security overhead benchmark: acks=all produce throughput and p99 with API keys + ACLs on, against off.

Prints one JSON document. Starts ``logstore serve`` twice on loopback (fresh
roots, one 8-partition topic): once open (``security.enabled=false``) and once
with ``security.enabled=true``, a key, and the principal's rights given by a
prefixed ACL among a few dozen others (not a super user, so every request is
authenticated and authorized). The load is the shared load generator's closed
loop (``bench/_http_load.py``) of ``--concurrency`` requests of 1,000-record
batches (acks=all) for ``--seconds``; runs alternate off/on and the medians are
reported.

Run: ``.venv/bin/python bench/security.py`` (about half a minute;
``--seconds 20 --runs 5`` for a steadier figure).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from _http_load import closed_loop
from harness import LogstoreServer, emit

from logstore.security import AclBinding, FileSecurityStore, Operation, PatternType, Permission, ResourceType, new_key

PARTITIONS = 8
TOPIC = "bench-events"


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
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            srv.create_topic(TOPIC, PARTITIONS, headers=headers)
            res = closed_loop(srv.url, TOPIC, "all", concurrency, seconds=seconds, headers=headers)
        finally:
            srv.stop()
    if res["failed"]:
        raise RuntimeError(f"{res['failed']} produce requests failed ({'secure' if secure else 'open'} server)")
    return res


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
    emit({"params": vars(args), **summary})


if __name__ == "__main__":
    main()
