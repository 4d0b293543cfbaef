"""``logstore acls``: bindings added, listed and removed with the CLI, each change audited on stderr."""

from __future__ import annotations

import json
from pathlib import Path


def test_acls_add_list_remove_with_the_cli(tmp_path: Path) -> None:
    from tests.support.cli import cli

    root = tmp_path / "data"
    r = cli(root, "acls", "add", "--allow-principal", "User:alice", "--operation", "read", "--operation", "WRITE",
            "--topic", "orders-", "--resource-pattern-type", "prefixed")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("Added") == 2
    audit = [json.loads(line) for line in r.stderr.splitlines()]
    assert [a["event"] for a in audit] == ["acl.add", "acl.add"] and audit[0]["decision"] == "CHANGED"
    assert cli(root, "acls", "add", "--deny-principal", "User:*", "--operation", "ALL", "--group", "g").returncode == 0
    assert (
        cli(root, "acls", "add", "--allow-principal", "User:ops", "--operation", "DESCRIBE", "--cluster").returncode
        == 0
    )
    again = cli(root, "acls", "add", "--deny-principal", "User:*", "--operation", "ALL", "--group", "g")
    assert again.returncode == 0 and "Already present" in again.stdout
    listed = cli(root, "acls", "list").stdout.splitlines()
    assert [line.split() for line in listed] == [
        ["PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE-TYPE", "PATTERN-TYPE", "RESOURCE-NAME"],
        ["User:alice", "ALLOW", "READ", "topic", "prefixed", "orders-"],
        ["User:alice", "ALLOW", "WRITE", "topic", "prefixed", "orders-"],
        ["User:*", "DENY", "ALL", "group", "literal", "g"],
        ["User:ops", "ALLOW", "DESCRIBE", "cluster", "literal", "kafka-cluster"],
    ]
    r = cli(root, "acls", "remove", "--allow-principal", "User:alice", "--operation", "READ",
            "--topic", "orders-", "--resource-pattern-type", "prefixed")  # fmt: skip
    assert r.returncode == 0 and "Removed" in r.stdout
    assert len(cli(root, "acls", "list").stdout.splitlines()) == 1 + 3
    # exactly one resource, a known operation, a principal
    assert cli(root, "acls", "add", "--allow-principal", "User:a", "--operation", "READ").returncode == 2
    assert cli(root, "acls", "add", "--allow-principal", "User:a", "--operation", "FLY", "--topic", "t").returncode == 2
    r = cli(root, "acls", "add", "--operation", "READ", "--topic", "t")
    assert r.returncode == 1 and "INVALID_REQUEST" in r.stderr


def test_an_acl_on_a_transactional_id(tmp_path: Path) -> None:
    from tests.support.cli import cli

    root = tmp_path / "data"
    r = cli(root, "acls", "add", "--allow-principal", "User:etl", "--operation", "WRITE",
            "--transactional-id", "etl-", "--resource-pattern-type", "prefixed")  # fmt: skip
    assert r.returncode == 0, r.stderr
    listed = [line.split() for line in cli(root, "acls", "list").stdout.splitlines()]
    assert listed[1] == ["User:etl", "ALLOW", "WRITE", "transactional_id", "prefixed", "etl-"]
