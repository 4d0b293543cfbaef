"""A node's thread count does not grow with its topics: counted in a running ``logstore serve`` (the pools are
in ``tests/unit/node/test_thread_pools.py``)."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.server import Server

# -- the ingest node -------------------------------------------------------------------


def _server_threads(srv: Server) -> int:
    assert srv.proc is not None
    with open(f"/proc/{srv.proc.pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def test_a_nodes_threads_do_not_grow_with_its_topics(server: Callable[..., Server]) -> None:
    srv = server(**{"num.io.threads": 2})
    c = srv.client()

    def write(topics: range) -> None:
        for k in topics:
            assert c.post("/v1/topics", json={"name": f"t{k}", "partitions": 4}).status_code == 201
            for acks in ("1", "all"):
                r = c.post(f"/v1/topics/t{k}/records", params={"acks": acks}, json={"records": [{"value": "x"}]})
                assert r.status_code == 200, r.text

    write(range(2))
    two = _server_threads(srv)
    write(range(2, 50))
    # At most what the pools have not started yet: committers 2 + their timer, write-ahead log 4,
    # fsync 8, checkpoint 1 — not a thread or more per topic.
    assert _server_threads(srv) <= two + 16
