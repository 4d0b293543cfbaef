"""``logstore transactions list | describe | abort`` against a running node (kafka-transactions.sh's commands)."""

from __future__ import annotations

from collections.abc import Callable

from deltalake import DeltaTable

from tests.support.cli import cli
from tests.support.server import Server

StartServer = Callable[..., Server]


def test_list_describe_and_abort_a_hanging_transaction(server: StartServer) -> None:
    srv = server()
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
    epoch = c.post("/v1/transactions/stuck/init", json={"transaction_timeout_ms": 600_000}).json()["producer_epoch"]
    r = c.post(
        "/v1/topics/t/records",
        params={"transactional_id": "stuck", "producer_epoch": epoch},
        json={"records": [{"value": "v", "partition": 1}]},
    )
    assert r.status_code == 200, r.text

    out = cli(srv.root, "transactions", "list", "--server", srv.url)
    assert out.returncode == 0, out.stderr
    pid = str(c.get("/v1/transactions/stuck").json()["producer_id"])
    assert out.stdout.splitlines()[1].split("\t") == ["stuck", pid, str(epoch), "Ongoing"]

    out = cli(srv.root, "transactions", "describe", "--transactional-id", "stuck", "--server", srv.url)
    assert out.returncode == 0, out.stderr
    row = out.stdout.splitlines()[1].split("\t")
    assert row[3:5] == ["Ongoing", "600000"] and row[6] == "t-1"

    out = cli(srv.root, "transactions", "abort", "--transactional-id", "stuck", "--server", srv.url)
    assert out.returncode == 0, out.stderr
    assert "CompleteAbort" in out.stdout
    assert c.get("/v1/transactions/stuck").json()["producer_epoch"] == epoch + 1  # its producer is fenced
    assert DeltaTable(str(srv.root / "topics" / "t")).to_pyarrow_table().num_rows == 0

    out = cli(srv.root, "transactions", "describe", "--transactional-id", "nobody", "--server", srv.url)
    assert out.returncode == 1 and out.stderr.startswith("TRANSACTIONAL_ID_NOT_FOUND"), out.stderr
