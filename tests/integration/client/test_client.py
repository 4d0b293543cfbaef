"""`logstore.client.Producer` and the CLI's `--server` mode against a real server."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable

from logstore.client import Message, Producer, RemoteStore
from logstore.config import load_config
from logstore.errors import LogstoreError, MessageTooLargeError
from logstore.groups.offsets import OffsetsStore
from logstore.log.catalog import Catalog
from logstore.log.partitioner import murmur2, to_positive
from tests.support.helpers import Landed, assert_gap_free, landed
from tests.support.server import LOGSTORE, Server


def test_producer_batches_and_reports_offsets(server: Callable[..., Server]) -> None:
    srv = server()
    RemoteStore(srv.url).create_topic("t", 3, {"message.max.bytes": 1000})
    delivered: list[tuple[LogstoreError | None, Landed | None]] = []

    def report(e: LogstoreError | None, m: Message) -> None:
        delivered.append((e, landed(m)))

    with Producer(srv.url, linger_ms=20, batch_records=50) as p:
        for i in range(200):
            p.produce("t", f"v{i}", key=f"k{i % 7}", headers={"n": str(i)}, on_delivery=report)
        p.produce("t", "x" * 2000, on_delivery=report)
        assert p.flush(timeout=60) == 0
    errors = [e for e, _ in delivered if e is not None]
    assert len(errors) == 1 and isinstance(errors[0], MessageTooLargeError)
    metas = [m for e, m in delivered if e is None and m is not None]
    assert len(metas) == 200
    assert {m.partition for m in metas if m.offset == 0} <= {0, 1, 2}
    assert metas[0].partition == to_positive(murmur2(b"k0")) % 3
    values = assert_gap_free(Catalog(load_config(environ={}, overrides={"logstore.root": str(srv.root)})), "t")
    assert sum(len(v) for v in values.values()) == 200


def test_repeated_header_keys_survive_a_fetch(server: Callable[..., Server]) -> None:
    srv = server()
    remote = RemoteStore(srv.url)
    remote.create_topic("t", 1)
    repeated = [
        {"key": "trace", "value": "a"},
        {"key": "hop", "value": {"b64": "/w=="}},
        {"key": "trace", "value": None},
    ]
    records = [{"value": "dup", "headers": repeated}, {"value": "plain", "headers": {"h": "1", "g": "2"}}]
    with srv.client() as c:
        assert c.post("/v1/topics/t/records", json={"records": records}).status_code == 200
        got = c.get("/v1/topics/t/partitions/0/records", params={"offset": 0}).json()["records"]
    # every header in order when a key repeats; the object form when keys are unique
    assert [r["headers"] for r in got] == [repeated, {"h": "1", "g": "2"}]
    fetched = remote.fetch("t", 0, 0).records["headers"].to_pylist()
    assert fetched == [
        [{"key": "trace", "value": b"a"}, {"key": "hop", "value": b"\xff"}, {"key": "trace", "value": None}],
        [{"key": "h", "value": b"1"}, {"key": "g", "value": b"2"}],
    ]


def test_producer_rides_out_a_server_crash_without_duplicates(server: Callable[..., Server]) -> None:
    srv = server()
    RemoteStore(srv.url).create_topic("t", 2)
    acked: list[Message] = []
    lock = threading.Lock()

    def ok(e: LogstoreError | None, m: Message) -> None:
        assert e is None, e
        with lock:
            acked.append(m)

    with Producer(srv.url, linger_ms=1, batch_records=20) as p:
        for i in range(300):
            p.produce("t", f"v{i}", on_delivery=ok)
            if i == 150:
                srv.kill()
                srv.restart()
        assert p.flush(timeout=120) == 0
    values = assert_gap_free(Catalog(load_config(environ={}, overrides={"logstore.root": str(srv.root)})), "t")
    stored = [v for vs in values.values() for v in vs]
    assert sorted(stored) == sorted(f"v{i}".encode() for i in range(300))  # each exactly once
    assert len(acked) == 300


def test_a_request_that_timed_out_does_not_block_the_producers_later_records(server: Callable[..., Server]) -> None:
    srv = server()
    RemoteStore(srv.url).create_topic("t", 1)
    delivered: list[tuple[LogstoreError | None, Landed | None]] = []
    with Producer(srv.url, linger_ms=1, delivery_timeout_ms=500) as p:
        for value in ("before", "lost", "after"):
            if value == "lost":
                srv.kill()
            p.produce("t", value, on_delivery=lambda e, m: delivered.append((e, landed(m))))
            assert p.flush(timeout=30) == 0
            if value == "lost":
                # its sequence never reached the server: sent under the same producer id, the next one skips ahead
                srv.restart()
    assert delivered[0] == (None, Landed("t", 0, 0))
    assert delivered[1][0] is not None and delivered[1][0].retriable
    assert delivered[2] == (None, Landed("t", 0, 1))


def cli(srv: Server, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOGSTORE, "--server", srv.url, *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def test_cli_server_mode(server: Callable[..., Server]) -> None:
    srv = server()
    assert cli(srv, "topics", "create", "t", "--partitions", "2", "--config", "retention.ms=5000").returncode == 0
    assert cli(srv, "topics", "list").stdout.split() == ["TOPIC", "t"]
    r = cli(srv, "produce", "t", "--key-separator", ":", stdin="a:1\nb:2\na:3\n")
    assert r.returncode == 0, r.stderr
    r = cli(srv, "consume", "t", "--group", "g", "--from-beginning", "--print-key", "--key-separator", ":",
            "--max-messages", "3")  # fmt: skip
    assert sorted(r.stdout.split()) == ["a:1", "a:3", "b:2"]
    assert r.stdout.index("a:1") < r.stdout.index("a:3")
    lines = cli(srv, "groups", "describe", "g").stdout.splitlines()
    assert all(line.split()[-1] == "0" for line in lines[1:])
    assert "retention.ms=5000" in cli(srv, "topics", "describe", "t").stdout
    r = cli(srv, "topics", "create", "t", "--partitions", "1")
    assert r.returncode == 1 and "TOPIC_ALREADY_EXISTS" in r.stderr
    assert cli(srv, "groups", "reset", "g", "--topic", "t", "--to", "earliest", "--execute").returncode == 0
    assert sorted(cli(srv, "consume", "t", "--group", "g", "--max-messages", "3").stdout.split()) == ["1", "2", "3"]


def test_remote_store_commits_offsets_with_metadata(server: Callable[..., Server]) -> None:
    """``RemoteStore.commit_offsets`` takes ``metadata`` as ``LogStore``'s does (the ``Store`` protocol)."""
    srv = server()
    remote = RemoteStore(srv.url)
    remote.create_topic("t", 1)
    remote.commit_offsets("g", "t", {0: 0}, metadata="checkpoint 7")
    (commit,) = OffsetsStore(str(srv.root)).committed("g", "t").values()
    assert (commit.offset, commit.metadata) == (0, "checkpoint 7")
