"""The `logstore` console script on a root directory: topics, produce, consume, groups."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.support.server import LOGSTORE, Server


def run(root: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}
    return subprocess.run(
        [*LOGSTORE, "--root", str(root), *args], input=stdin, capture_output=True, text=True, env=env, timeout=120
    )


def test_produce_consume_with_a_group(tmp_path: Path) -> None:
    assert (
        run(tmp_path, "topics", "create", "orders", "--partitions", "2", "--config", "retention.ms=1000").returncode
        == 0
    )
    assert run(tmp_path, "topics", "list").stdout.split() == ["TOPIC", "orders"]
    r = run(tmp_path, "produce", "orders", "--key-separator", ":", stdin="k1:one\nk2:two\nk1:three\n")
    assert r.returncode == 0, r.stderr
    r = run(tmp_path, "consume", "orders", "--group", "billing", "--from-beginning", "--print-key",
            "--key-separator", ":", "--max-messages", "3")  # fmt: skip
    assert sorted(r.stdout.splitlines()) == ["k1:one", "k1:three", "k2:two"]
    # k1's records stay in order on their partition
    lines = r.stdout.splitlines()
    assert lines.index("k1:one") < lines.index("k1:three")
    # the group resumes where it stopped
    run(tmp_path, "produce", "orders", stdin="four\n")
    assert run(tmp_path, "consume", "orders", "--group", "billing", "--max-messages", "1").stdout == "four\n"
    d = run(tmp_path, "groups", "describe", "billing").stdout.splitlines()
    assert d[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert all(line.split()[-1] == "0" for line in d[1:])
    assert run(tmp_path, "groups", "list").stdout.split() == ["GROUP", "billing"]
    desc = run(tmp_path, "topics", "describe", "orders").stdout
    assert "PartitionCount: 2" in desc and "retention.ms=1000" in desc


def test_consume_max_records_and_latest_default(tmp_path: Path) -> None:
    run(tmp_path, "topics", "create", "t", "--partitions", "1")
    run(tmp_path, "produce", "t", stdin="".join(f"v{i}\n" for i in range(10)))
    assert run(tmp_path, "consume", "t", "--from-beginning", "--max-records", "3").stdout.split() == ["v0", "v1", "v2"]
    # no group, no --from-beginning: start at the end
    assert run(tmp_path, "consume", "t", "--timeout-ms", "0").stdout == ""


def test_errors_are_kafka_names_on_stderr(tmp_path: Path) -> None:
    cases = [
        (("topics", "create", "bad name", "--partitions", "1"), "INVALID_TOPIC_EXCEPTION"),
        (("topics", "create", "t", "--partitions", "0"), "INVALID_PARTITIONS"),
        (
            ("topics", "create", "t", "--partitions", "1", "--config", "nope=1"),
            "INVALID_CONFIG: unknown topic config key 'nope'",
        ),
        (("topics", "describe", "missing"), "UNKNOWN_TOPIC_OR_PARTITION"),
        (("groups", "describe", "missing"), "GROUP_ID_NOT_FOUND"),
    ]
    for args, expected in cases:
        r = run(tmp_path, *args)
        assert r.returncode == 1 and expected in r.stderr, (args, r.stderr)
    run(tmp_path, "topics", "create", "t", "--partitions", "2")
    r = run(tmp_path, "topics", "alter", "t", "--partitions", "1")
    assert r.returncode == 1 and "INVALID_PARTITIONS" in r.stderr
    r = run(tmp_path, "produce", "t", "--key-separator", ":", stdin="no separator here\n")
    assert r.returncode == 1 and "key separator" in r.stderr
    r = run(tmp_path, "topics", "create", "t", "--partitions", "1")
    assert r.returncode == 1 and "TOPIC_ALREADY_EXISTS" in r.stderr


def test_groups_reset(tmp_path: Path) -> None:
    run(tmp_path, "topics", "create", "t", "--partitions", "1")
    run(tmp_path, "produce", "t", stdin="a\nb\nc\n")
    run(tmp_path, "consume", "t", "--group", "g", "--from-beginning", "--max-messages", "3")
    r = run(tmp_path, "groups", "reset", "g", "--topic", "t", "--to", "1", "--execute")
    assert r.stdout.splitlines()[1].split() == ["g", "t", "0", "3", "1"]
    assert run(tmp_path, "consume", "t", "--group", "g", "--max-messages", "2").stdout.split() == ["b", "c"]
    reset = ("groups", "reset", "g", "--topic", "t", "--execute")
    assert run(tmp_path, *reset, "--to", "earliest").stdout.split()[-1] == "0"
    assert run(tmp_path, *reset, "--to", "2999-01-01T00:00:00").stdout.split()[-1] == "3"
    r = run(tmp_path, *reset, "--to", "someday")
    assert r.returncode == 1 and "INVALID_REQUEST" in r.stderr


def test_consume_as_a_group_member_through_a_server_and_describe_members(server: Callable[..., Server]) -> None:
    srv = server()
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
    records = [{"partition": i % 2, "value": f"v{i}"} for i in range(6)]
    assert c.post("/v1/topics/t/records", json={"records": records}).status_code == 200
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}
    r = subprocess.run(
        [*LOGSTORE, "consume", "t", "--group", "g", "--server", srv.url, "--from-beginning", "--max-messages", "6"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == [f"v{i}" for i in range(6)]
    # the member left on exit; its commits stay
    member = c.post("/v1/groups/g/members", json={"topics": ["t"]}).json()
    d = subprocess.run(
        [*LOGSTORE, "groups", "describe", "g", "--server", srv.url], capture_output=True, text=True, env=env, timeout=60
    ).stdout.splitlines()
    assert d[0].split()[-2:] == ["CONSUMER-ID", "GENERATION"]
    rows = [line.split() for line in d[1:]]
    assert sorted((row[2], row[3], row[5], row[6]) for row in rows) == [
        ("0", "3", "0", member["member_id"]),
        ("1", "3", "0", member["member_id"]),
    ]
