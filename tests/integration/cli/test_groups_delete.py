"""``logstore groups delete``: Kafka's DeleteGroups, refused with NON_EMPTY_GROUP while the group has a reader."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from logstore.groups.leases import GroupLease
from tests.support.cli import cli
from tests.support.server import LOGSTORE, Server

StartServer = Callable[..., Server]


def produce(root: Path, topic: str, lines: str) -> None:
    r = subprocess.run([*LOGSTORE, "--root", str(root), "produce", topic], input=lines, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_deleting_a_group_removes_its_offsets_and_keeps_the_others(tmp_path: Path) -> None:
    root = tmp_path / "data"
    assert cli(root, "topics", "create", "t", "--partitions", "2").returncode == 0
    produce(root, "t", "a\nb\n")
    for group in ("g", "other"):
        r = cli(root, "consume", "t", "--group", group, "--from-beginning", "--timeout-ms", "0")
        assert r.returncode == 0, r.stderr
    r = cli(root, "groups", "delete", "g")
    assert r.returncode == 0 and r.stdout == "Deleted consumer group 'g'.\n", r.stderr
    assert cli(root, "groups", "list").stdout.split() == ["GROUP", "other"]
    r = cli(root, "groups", "describe", "g")
    assert r.returncode == 1 and r.stderr.startswith("GROUP_ID_NOT_FOUND"), r.stderr
    r = cli(root, "groups", "delete", "g")
    assert r.returncode == 1 and r.stderr.startswith("GROUP_ID_NOT_FOUND"), r.stderr
    # a group of that name starts over
    r = cli(root, "consume", "t", "--group", "g", "--from-beginning", "--timeout-ms", "0")
    assert sorted(r.stdout.split()) == ["a", "b"], r.stderr
    assert cli(root, "groups", "list").stdout.split() == ["GROUP", "g", "other"]


def test_a_group_whose_lease_a_reader_holds_is_not_deleted(tmp_path: Path) -> None:
    root = tmp_path / "data"
    assert cli(root, "topics", "create", "t", "--partitions", "1").returncode == 0
    produce(root, "t", "a\n")
    assert cli(root, "consume", "t", "--group", "g", "--from-beginning", "--timeout-ms", "0").returncode == 0
    reader = GroupLease(str(root), "g")  # what a running Spark query of group g holds
    reader.acquire({"t"})
    try:
        r = cli(root, "groups", "delete", "g")
        assert r.returncode == 1, r.stdout
        assert r.stderr.startswith("NON_EMPTY_GROUP: consumer group 'g' is not empty"), r.stderr
    finally:
        reader.release()
    assert cli(root, "groups", "list").stdout.split() == ["GROUP", "g"]  # still there
    assert cli(root, "groups", "delete", "g").returncode == 0


def test_a_group_with_live_members_is_not_deleted_through_a_server(tmp_path: Path, server: StartServer) -> None:
    node = server()
    on = ("--server", node.url.removeprefix("http://"))
    with node.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
        assert c.post("/v1/groups/g/offsets", json={"topic": "t", "partitions": {"0": 0}}).status_code == 200
        member = c.post("/v1/groups/g/members", json={"topics": ["t"]}).json()["member_id"]
        r = cli(tmp_path, "groups", "delete", "g", *on)
        assert r.returncode == 1 and r.stderr.startswith("NON_EMPTY_GROUP: consumer group 'g' has 1 live"), r.stderr
        resp = c.delete("/v1/groups/g")
        assert resp.status_code == 409 and resp.json()["error_code"] == "NON_EMPTY_GROUP"
        assert c.delete(f"/v1/groups/g/members/{member}").status_code == 204
        r = cli(tmp_path, "groups", "delete", "g", *on)
        assert r.returncode == 0, r.stderr
        assert c.get("/v1/groups/g").status_code == 404
        assert c.get("/v1/groups").json()["groups"] == []
