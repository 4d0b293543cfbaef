"""The node's transaction metrics on ``/metrics``: open transactions, commits and aborts, commit latency."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.transactions.test_transactions_api import StartServer, create, end, init, produce


def scrape(c: httpx.Client) -> dict[str, float]:
    """Every sample of ``/metrics`` named ``logstore_transaction*``, keyed by name and labels."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(c.get("/metrics").text):
        for s in family.samples:
            if s.name.startswith("logstore_transaction"):
                out[s.name + "".join(f"{{{k}={v}}}" for k, v in sorted(s.labels.items()))] = s.value
    return out


def test_open_transactions_commits_aborts_and_commit_latency(server: StartServer) -> None:
    c = server().client()
    create(c, "m", partitions=2)
    assert scrape(c)["logstore_transactions_open"] == 0
    a, b = init(c, "m-a"), init(c, "m-b")
    assert produce(c, "m", [{"value": "1", "partition": 0}], "m-a", a).status_code == 200
    assert produce(c, "m", [{"value": "2", "partition": 1}], "m-b", b).status_code == 200
    assert scrape(c)["logstore_transactions_open"] == 2

    assert end(c, "m-a", "commit", a).status_code == 200
    assert end(c, "m-b", "abort", b).status_code == 200
    m = scrape(c)
    assert m["logstore_transactions_open"] == 0
    assert m["logstore_transactions_total{outcome=committed}"] == 1
    assert m["logstore_transactions_total{outcome=aborted}"] == 1
    assert m["logstore_transaction_commit_latency_seconds_count"] == 1
    assert m["logstore_transaction_commit_latency_seconds_sum"] > 0

    assert end(c, "m-a", "commit", a).status_code == 200  # a retry of an answered commit completes nothing again
    m = scrape(c)
    assert m["logstore_transactions_total{outcome=committed}"] == 1
    assert m["logstore_transaction_commit_latency_seconds_count"] == 1
