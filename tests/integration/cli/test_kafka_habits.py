"""The ``logstore`` command with a Kafka user's habits: ``--server host:port``, connection errors named as such,
``consume`` that follows until Ctrl-C, resets that are dry runs without ``--execute``, tables with headers."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.cli import cli
from tests.support.pki import make_ca, make_cert
from tests.support.server import LOGSTORE, Server, free_port

StartServer = Callable[..., Server]


def produce(root: Path, topic: str, lines: str, *args: str) -> None:
    r = subprocess.run(
        [*LOGSTORE, "--root", str(root), "produce", topic, *args], input=lines, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


def read_lines(proc: subprocess.Popen[str], count: int, timeout_s: float = 60) -> list[str]:
    """``count`` lines of ``proc``'s stdout, failing (not hanging) when they do not come within ``timeout_s``.

    A thread reads the lines (select() on the pipe would not see lines already in the text stream's buffer:
    two lines arriving in one write would read as one).
    """
    assert proc.stdout is not None
    lines: queue.Queue[str] = getattr(proc, "_lines", None) or queue.Queue()
    if not hasattr(proc, "_lines"):
        proc._lines = lines  # type: ignore[attr-defined]
        stdout = proc.stdout
        threading.Thread(target=lambda: [lines.put(line.rstrip("\n")) for line in stdout], daemon=True).start()
    got: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        try:
            got.append(lines.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            raise AssertionError(f"only {got} within {timeout_s} s") from None
    return got


def test_a_server_without_a_scheme_is_http(tmp_path: Path, server: StartServer) -> None:
    node = server()
    address = node.url.removeprefix("http://")
    r = cli(tmp_path, "topics", "create", "t", "--partitions", "1", "--server", address)
    assert r.returncode == 0, r.stderr
    assert cli(tmp_path, "topics", "list", "--bootstrap-server", address).stdout.split() == ["TOPIC", "t"]


def test_a_server_without_a_scheme_is_https_when_tls_files_are_given(tmp_path: Path, server: StartServer) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    ca = make_ca(pki)
    cert, key = make_cert(pki, ca, "server", "/CN=127.0.0.1", server=True)
    tls = {"server.ssl.certfile": str(cert), "server.ssl.keyfile": str(key)}
    node = server(tmp_path / "data", ca_file=str(ca[1]), **tls)
    address = node.url.removeprefix("https://")
    r = cli(tmp_path, "topics", "create", "t", "--partitions", "1", "--server", address, "--ca-file", str(ca[1]))
    assert r.returncode == 0, r.stderr
    r = cli(tmp_path, "topics", "list", "--server", address)  # no TLS file: plain http to a TLS port
    assert r.returncode == 1 and r.stderr.startswith(f"NETWORK_EXCEPTION: cannot reach any server (http://{address}")


def test_a_refused_connection_is_a_network_exception_naming_the_url(tmp_path: Path) -> None:
    port = free_port()
    for command in (
        ("topics", "list"),
        ("groups", "describe", "g"),
        ("acls", "list"),
        ("produce", "t"),  # not after the producer's delivery timeout: at once
        ("consume", "t", "--group", "g"),
    ):
        r = cli(tmp_path, *command, "--server", f"127.0.0.1:{port}")
        assert r.returncode == 1, r.stdout
        assert r.stderr.startswith(f"NETWORK_EXCEPTION: cannot reach any server (http://127.0.0.1:{port}: "), r.stderr
        assert "refused" in r.stderr.lower(), r.stderr


def test_consume_follows_new_records_until_ctrl_c_and_commits_what_it_printed(tmp_path: Path) -> None:
    root = tmp_path / "data"
    assert cli(root, "topics", "create", "t", "--partitions", "1").returncode == 0
    produce(root, "t", "a\nb\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}
    proc = subprocess.Popen(
        [*LOGSTORE, "--root", str(root), "consume", "t", "--group", "g", "--from-beginning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert read_lines(proc, 2) == ["a", "b"]
        produce(root, "t", "c\n")  # after it caught up: it is still there to print it
        assert read_lines(proc, 1) == ["c"]
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)  # stdout is the reader thread's; stderr is small
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and err.strip().endswith("Processed a total of 3 messages"), err
    described = cli(root, "groups", "describe", "g").stdout.splitlines()
    assert described[1].split() == ["g", "t", "0", "3", "3", "0"]


def test_consume_exits_after_timeout_ms_without_a_record_or_max_messages(tmp_path: Path) -> None:
    root = tmp_path / "data"
    assert cli(root, "topics", "create", "t", "--partitions", "2").returncode == 0
    produce(root, "t", "".join(f"v{i}\n" for i in range(6)))
    r = cli(root, "consume", "t", "--from-beginning", "--timeout-ms", "300")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == [f"v{i}" for i in range(6)]
    r = cli(root, "consume", "t", "--from-beginning", "--max-messages", "4")
    assert r.returncode == 0 and len(r.stdout.split()) == 4, r.stderr


def test_consume_prints_what_the_properties_ask_for(tmp_path: Path) -> None:
    root = tmp_path / "data"
    assert cli(root, "topics", "create", "t", "--partitions", "1").returncode == 0
    produce(root, "t", "k1:one\nk2:two\n", "--key-separator", ":")
    props = ("--property", "print.partition=true", "--property", "print.offset=true", "--property", "print.key=true")
    r = cli(root, "consume", "t", "--from-beginning", "--max-messages", "2", *props, "--property", "key.separator=|")
    assert r.stdout.splitlines() == ["Partition:0|Offset:0|k1|one", "Partition:0|Offset:1|k2|two"], r.stderr
    r = cli(root, "consume", "t", "--from-beginning", "--max-messages", "1", "--property", "print.timestamp=true",
            "--print-key")  # fmt: skip
    assert re.fullmatch(r"CreateTime:\d{13}\tk1\tone\n", r.stdout), r.stdout
    r = cli(root, "consume", "t", "--max-messages", "1", "--property", "print.colour=true")
    assert r.returncode == 1 and r.stderr.startswith("INVALID_CONFIG: unknown --property 'print.colour'"), r.stderr


def test_groups_reset_is_a_dry_run_unless_execute(tmp_path: Path, server: StartServer) -> None:
    node = server()
    with node.client() as c:
        for topic in ("a", "b"):
            assert c.post("/v1/topics", json={"name": topic, "partitions": 2}).status_code == 201
            records = [{"partition": i % 2, "value": f"v{i}", "timestamp": 1_000 * (i + 1)} for i in range(8)]
            assert c.post(f"/v1/topics/{topic}/records", json={"records": records}).status_code == 200
            committed = {"topic": topic, "partitions": {"0": 4, "1": 4}}
            assert c.post("/v1/groups/g/offsets", json=committed).status_code == 200
    on = ("--server", node.url.removeprefix("http://"))
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]

    def table(r: subprocess.CompletedProcess[str]) -> list[list[str]]:
        assert r.returncode == 0, r.stderr
        return [line.split() for line in r.stdout.splitlines()]

    def described() -> list[list[str]]:
        return [line.split()[:4] for line in cli(tmp_path, "groups", "describe", "g", *on).stdout.splitlines()[1:]]

    before = described()
    r = cli(tmp_path, "groups", "reset", "g", "--topic", "a", "--to-earliest", *on)
    assert table(r) == [header, ["g", "a", "0", "4", "0"], ["g", "a", "1", "4", "0"]]
    assert "Dry run" in r.stderr and described() == before  # nothing moved
    r = cli(tmp_path, "groups", "reset", "g", "--all-topics", "--shift-by", "-3", *on)
    assert table(r)[1:] == [["g", t, p, "4", "1"] for t in "ab" for p in "01"]
    assert described() == before
    r = cli(tmp_path, "groups", "reset", "g", "--all-topics", "--shift-by", "-3", "--execute", *on)
    assert "Dry run" not in r.stderr and described() == [["g", t, p, "1"] for t in "ab" for p in "01"]
    # the record at 4 s is offset 1 of partition 1 (timestamps 2, 4, 6, 8 s there) and none of partition 0's
    r = cli(tmp_path, "groups", "reset", "g", "--topic", "b", "--to-datetime", "1970-01-01T00:00:04", "--execute", *on)
    assert table(r)[1:] == [["g", "b", "0", "1", "2"], ["g", "b", "1", "1", "1"]]
    r = cli(tmp_path, "groups", "reset", "g", "--topic", "b", "--to-offset", "99", "--execute", *on)
    assert table(r)[1:] == [["g", "b", "0", "2", "4"], ["g", "b", "1", "1", "4"]]  # clamped to the high watermark
    r = cli(tmp_path, "groups", "reset", "g", "--topic", "b", "--to-latest", "--to-earliest", *on)
    assert r.returncode == 2 and "not allowed with argument" in r.stderr


def test_quotas_set_without_a_rate_is_an_error_and_remove_removes(tmp_path: Path) -> None:
    root = tmp_path / "data"
    assert cli(root, "quotas", "set", "--principal", "User:alice", "--producer-byte-rate", "1024").returncode == 0
    r = cli(root, "quotas", "set", "--principal", "User:alice")
    assert r.returncode == 1 and r.stderr.startswith("INVALID_REQUEST: quotas set needs --producer-byte-rate"), r.stderr
    assert cli(root, "quotas", "list").stdout.splitlines()[1].split() == ["User:alice", "-", "1024", "-"]  # kept
    r = cli(root, "quotas", "remove", "--principal", "User:alice")
    assert r.returncode == 0 and "Removed quota of User:alice" in r.stdout, r.stderr
    assert cli(root, "quotas", "list").stdout.split() == [
        "PRINCIPAL",
        "CLIENT-ID",
        "PRODUCER-BYTE-RATE",
        "CONSUMER-BYTE-RATE",
    ]


def test_lists_have_headers_even_when_empty(tmp_path: Path) -> None:
    root = tmp_path / "data"
    assert cli(root, "topics", "create", "t", "--partitions", "1").returncode == 0
    assert cli(root, "groups", "list").stdout.split() == ["GROUP"]
    assert cli(root, "keys", "list").stdout.split() == ["KEY-ID", "PRINCIPAL", "CREATED"]
    assert cli(root, "acls", "list").stdout.split()[0] == "PRINCIPAL"
    described = cli(root, "topics", "describe", "t").stdout.splitlines()
    assert described[1].split() == ["PARTITION", "LOG-START-OFFSET", "HIGH-WATERMARK", "SIZE-BYTES", "FILES"]


def test_topics_describe_through_a_server_counts_the_files(tmp_path: Path, server: StartServer) -> None:
    node = server()
    with node.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
        for i in range(2):
            assert c.post("/v1/topics/t/records", json={"records": [{"value": f"v{i}"}]}).status_code == 200
        files = c.get("/v1/topics/t").json()["partitions"][0]["num_files"]
    assert files >= 1
    r = cli(tmp_path, "topics", "describe", "t", "--server", node.url)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[2].split()[-1] == str(files)
