"""``logstore_produce_stage_seconds``: where a produce request's time goes on the server, per stage."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import Server

STAGES = ("parse", "queue", "commit", "ack")


def _stages(c: httpx.Client) -> dict[str, tuple[float, float]]:
    """stage -> (count, sum in seconds) scraped from ``/metrics``."""
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(c.get("/metrics").text):
        if family.name != "logstore_produce_stage_seconds":
            continue
        for s in family.samples:
            acc = out.setdefault(s.labels["stage"], [0.0, 0.0])
            if s.name.endswith("_count"):
                acc[0] = s.value
            elif s.name.endswith("_sum"):
                acc[1] = s.value
    return {k: (v[0], v[1]) for k, v in out.items()}


def _produce(c: httpx.Client, acks: str, n: int) -> float:
    """Mean client-side latency (s) of ``n`` sequential requests."""
    started = time.perf_counter()
    for i in range(n):
        r = c.post("/v1/topics/t/records", params={"acks": acks}, json={"records": [{"value": f"v{i}"}] * 10})
        assert r.status_code == 200, r.text
    return (time.perf_counter() - started) / n


def test_stages_are_observed_and_add_up_to_no_more_than_the_request(server: Callable[..., Server]) -> None:
    srv = server(**{"linger.ms": 1})
    with srv.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
        mean_all = _produce(c, "all", 20)
        seen = _stages(c)
        for stage in STAGES:
            count, total = seen[stage]
            assert count > 0 and total >= 0, (stage, seen)
        # Sequential requests: each is its own commit group, so the stage means add up to a request.
        staged = sum(seen[s][1] / seen[s][0] for s in STAGES)
        assert staged <= mean_all + 0.05, (staged, mean_all, seen)

        mean_1 = _produce(c, "1", 20)
        after = _stages(c)
        count, total = after["wal"]
        assert count >= 20 and total >= 0, after
        wal_mean = total / count
        parse_mean = (after["parse"][1] - seen["parse"][1]) / (after["parse"][0] - seen["parse"][0])
        assert parse_mean + wal_mean <= mean_1 + 0.05, (after, mean_1)
        for stage in STAGES:
            assert after[stage][0] > seen[stage][0], (stage, seen, after)


def test_garbage_collections_are_timed_and_start_up_objects_are_frozen(server: Callable[..., Server]) -> None:
    # A full collection holds every thread of the node: its pauses are a source of produce's tail latency, so
    # each is observed per generation; what start-up built (modules, classes, the app) is frozen out of them.
    srv = server()
    with srv.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
        _produce(c, "all", 20)
        families = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}

    frozen = [s.value for s in families["logstore_gc_frozen_objects"].samples]
    assert frozen and frozen[0] > 10_000
    counts = {
        s.labels["generation"]: s.value
        for s in families["logstore_gc_pause_seconds"].samples
        if s.name.endswith("_count")
    }
    assert counts.get("0", 0) > 0, counts


def test_what_the_first_produce_request_imports_is_frozen_before_it() -> None:
    # pyarrow's conversion of Python lists imports pandas on first use: imported after the freeze, its ~35k
    # objects were scanned by every later full collection (20-40 ms each, in produce's p99). A fresh
    # interpreter, as a node's: after the freeze, parsing a produce request imports no module.
    script = """
import sys
from ingest_api.app import _freeze_and_watch_gc
from logstore.node.metrics import Metrics
from logstore.wire.json_produce import parse_produce
_freeze_and_watch_gc(Metrics())
before = set(sys.modules)
parse_produce(b'{"records": [{"value": "a"}, {"key": "k", "value": "b"}]}')
print(sorted(set(sys.modules) - before))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout[:2000]
