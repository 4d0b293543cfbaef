"""The ``transactions`` maintenance job beside a live node: it removes staged records no transaction will use.

Orphans are made as a crash makes them (staged files left behind a completed
transaction, or an id with no state); the job runs in this process while the
node serves, with its clock moved forward past the timeouts. An open
transaction and a decided commit (held in ``PrepareCommit`` by a storage
error) keep their records however old they are.
"""

from __future__ import annotations

import time
from pathlib import Path

from logstore.config import load_config
from logstore.log.catalog import Catalog
from maintenance.job import run_job
from tests.integration.transactions.test_transactions_api import StartServer, create, end, init, produce

MINUTE_MS = 60_000


def staged(root: Path) -> set[tuple[str, str]]:
    """(transactional id as stored, transaction number) of every staged transaction."""
    base = root / "_transactions" / "_staged"
    return {(t.name, s.name) for t in base.iterdir() for s in t.iterdir()} if base.exists() else set()


def leave(root: Path, tid: str, seq: int) -> None:
    """A staged file as a crash after ``CompleteCommit`` (or with the state lost) leaves it."""
    d = root / "_transactions" / "_staged" / tid / str(seq) / "audit"
    d.mkdir(parents=True)
    (d / "0000000000.arrow").write_bytes(b"x" * 100)


def test_orphans_past_their_timeout_go_open_and_decided_transactions_stay(server: StartServer) -> None:
    srv = server(**{"request.timeout.ms": 1000})
    root = srv.root
    c = srv.client()
    create(c, "audit")
    create(c, "b")
    live = init(c, "live", transaction_timeout_ms=MINUTE_MS)
    assert produce(c, "audit", [{"value": "open"}], "live", live).status_code == 200
    done = init(c, "done", transaction_timeout_ms=MINUTE_MS)
    assert produce(c, "audit", [{"value": "kept"}], "done", done).status_code == 200
    assert end(c, "done", "commit", done).status_code == 200
    decided = init(c, "decided", transaction_timeout_ms=MINUTE_MS)
    assert produce(c, "b", [{"value": "decided"}], "decided", decided).status_code == 200
    blocker = root / "topics" / "b" / "partition=0"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.touch()  # its commit is decided, and cannot complete while this file is where the partition goes
    assert end(c, "decided", "commit", decided).status_code == 503
    assert c.get("/v1/transactions/decided").json()["state"] == "PrepareCommit"
    leave(root, "done", 0)
    leave(root, "done", 7)
    leave(root, "ghost", 0)  # an id without state: transaction.max.timeout.ms (15 minutes) applies
    live_seq = {s for t, s in staged(root) if t == "live"}
    decided_seq = {s for t, s in staged(root) if t == "decided"}
    assert len(live_seq) == len(decided_seq) == 1

    catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": str(root)}))
    now = time.time_ns() // 1_000_000
    assert run_job("transactions", catalog, now_ms=now).files_removed == 0  # nothing is old enough yet
    report = run_job("transactions", catalog, now_ms=now + 10 * MINUTE_MS)
    assert (report.files_removed, report.bytes_removed, report.errors) == (2, 200, {})
    assert staged(root) == {("live", *live_seq), ("decided", *decided_seq), ("ghost", "0")}
    run_job("transactions", catalog, now_ms=now + 20 * MINUTE_MS)
    assert staged(root) == {("live", *live_seq), ("decided", *decided_seq)}

    blocker.unlink()  # the decided commit completes with its staged records, and the open one still commits
    assert end(c, "decided", "commit", decided).status_code == 200
    assert end(c, "live", "commit", live).status_code == 200
    got = {
        r["value"]
        for t in ("audit", "b")
        for r in c.get(f"/v1/topics/{t}/partitions/0/records?offset=0").json()["records"]
    }
    assert got == {"open", "kept", "decided"}
