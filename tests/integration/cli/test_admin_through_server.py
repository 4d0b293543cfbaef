"""Keys, ACLs and quotas managed through a running server (``--server``, the ``/v1/admin`` routes), as
``kafka-acls --bootstrap-server`` manages them through the AdminClient: ALTER on the cluster to change, DESCRIBE to
list, CLUSTER_AUTHORIZATION_FAILED (403) without; the store path (``--root``) makes the first super user's key."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.support.cli import cli
from tests.support.server import Server

StartServer = Callable[..., Server]
SECURE = {"security.enabled": "true", "super.users": "User:admin"}


def last_line(r: object) -> str:
    out: str = r.stdout  # type: ignore[attr-defined]
    return out.splitlines()[-1]


def bootstrap(tmp_path: Path, server: StartServer) -> tuple[Path, Server, str, str]:
    """A secured server, the super user's key (made on the store) and the server's address without a scheme."""
    root = tmp_path / "data"
    r = cli(root, "keys", "create", "--principal", "User:admin")
    assert r.returncode == 0, r.stderr
    node = server(root, **SECURE)
    return root, node, last_line(r), node.url.removeprefix("http://")


def test_an_administrator_manages_keys_acls_and_quotas_through_the_server(tmp_path: Path, server: StartServer) -> None:
    _, node, admin, address = bootstrap(tmp_path, server)
    elsewhere = tmp_path / "elsewhere"  # no store here: everything goes through the server
    over_http = ("--server", address, "--api-key", admin)

    r = cli(elsewhere, "keys", "create", "--principal", "User:alice", *over_http)
    assert r.returncode == 0, r.stderr
    alice = last_line(r)
    secret = alice.rsplit("_", 1)[1]
    listed = cli(elsewhere, "keys", "list", *over_http)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split() == ["KEY-ID", "PRINCIPAL", "CREATED"]
    assert "User:alice" in listed.stdout and secret not in listed.stdout
    with node.client(api_key=admin) as c:
        assert secret not in c.get("/v1/admin/keys").text  # shown once, at creation

    r = cli(elsewhere, "acls", "add", "--allow-principal", "User:alice", "--operation", "DESCRIBE",
            "--topic", "orders", *over_http)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].split()[0] == "Added"
    listed = cli(elsewhere, "acls", "list", *over_http).stdout.splitlines()
    assert listed[0].split() == ["PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE-TYPE", "PATTERN-TYPE",
                                 "RESOURCE-NAME"]  # fmt: skip
    assert listed[1].split() == ["User:alice", "ALLOW", "DESCRIBE", "topic", "literal", "orders"]

    with node.client(api_key=admin) as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
    with node.client(api_key=alice) as c:
        assert c.get("/v1/topics/orders").status_code == 200  # the ACL made through the server is enforced

    r = cli(elsewhere, "quotas", "set", "--principal", "User:alice", "--producer-byte-rate", "1024", *over_http)
    assert r.returncode == 0, r.stderr
    quotas = cli(elsewhere, "quotas", "list", *over_http).stdout.splitlines()
    assert [line.split() for line in quotas] == [
        ["PRINCIPAL", "CLIENT-ID", "PRODUCER-BYTE-RATE", "CONSUMER-BYTE-RATE"],
        ["User:alice", "-", "1024", "-"],
    ]
    assert cli(elsewhere, "quotas", "remove", "--principal", "User:alice", *over_http).returncode == 0
    assert len(cli(elsewhere, "quotas", "list", *over_http).stdout.splitlines()) == 1
    r = cli(elsewhere, "quotas", "remove", "--principal", "User:alice", *over_http)
    assert r.returncode == 1 and r.stderr.startswith("INVALID_REQUEST: User:alice has no quota"), r.stderr

    r = cli(elsewhere, "acls", "remove", "--allow-principal", "User:alice", "--operation", "DESCRIBE",
            "--topic", "orders", *over_http)  # fmt: skip
    assert r.returncode == 0 and r.stdout.splitlines()[1].split()[0] == "Removed", r.stderr
    with node.client(api_key=alice) as c:
        assert c.get("/v1/topics/orders").status_code == 403

    key_id = alice.split("_")[1]
    r = cli(elsewhere, "keys", "revoke", "--key-id", key_id, *over_http)
    assert r.returncode == 0 and key_id in r.stdout, r.stderr
    with node.client(api_key=alice) as c:
        assert c.get("/v1/topics").status_code == 401

    audit = [json.loads(line) for line in node.log().splitlines() if line.startswith('{"ts_ms"')]
    changes = [(a["event"], a["principal"]) for a in audit if a["decision"] == "CHANGED"]
    assert changes == [
        ("key.create", "User:admin"),
        ("acl.add", "User:admin"),
        ("quota.set", "User:admin"),
        ("quota.remove", "User:admin"),
        ("acl.remove", "User:admin"),
        ("key.revoke", "User:admin"),
    ]
    assert not list(elsewhere.parent.glob("elsewhere"))  # nothing was written where the CLI ran


def test_changing_needs_alter_and_listing_needs_describe_on_the_cluster(tmp_path: Path, server: StartServer) -> None:
    root, node, admin, address = bootstrap(tmp_path, server)
    alice = last_line(cli(root, "keys", "create", "--principal", "User:alice"))
    as_alice = ("--server", address, "--api-key", alice)
    for command in (
        ("acls", "add", "--allow-principal", "User:alice", "--operation", "ALL", "--topic", "*"),
        ("keys", "create", "--principal", "User:alice"),
        ("quotas", "set", "--principal", "User:alice", "--consumer-byte-rate", "1"),
        ("acls", "list"),
        ("keys", "list"),
        ("quotas", "list"),
    ):
        r = cli(tmp_path / "elsewhere", *command, *as_alice)
        assert r.returncode == 1, (command, r.stdout)
        assert r.stderr.startswith("CLUSTER_AUTHORIZATION_FAILED: User:alice is not allowed"), (command, r.stderr)
    with node.client(api_key=alice) as c:
        for method, path, body in (
            ("POST", "/v1/admin/acls", {"acls": []}),
            ("POST", "/v1/admin/keys", {"principal": "User:alice"}),
            ("PUT", "/v1/admin/quotas", {"principal": "User:alice", "producer_byte_rate": 1}),
            ("DELETE", "/v1/admin/keys/abc", None),
            ("GET", "/v1/admin/acls", None),
        ):
            resp = c.request(method, path, json=body)
            assert resp.status_code == 403, (method, path, resp.text)
            assert resp.json()["error_code"] == "CLUSTER_AUTHORIZATION_FAILED"

    # DESCRIBE on the cluster lists, and only ALTER changes
    grant = ("acls", "add", "--allow-principal", "User:alice", "--cluster", "--server", address, "--api-key", admin)
    assert cli(root, *grant, "--operation", "DESCRIBE").returncode == 0
    assert cli(root, "acls", "list", *as_alice).returncode == 0
    r = cli(root, "keys", "create", "--principal", "User:bob", *as_alice)
    assert r.stderr.startswith("CLUSTER_AUTHORIZATION_FAILED"), r.stderr
    assert cli(root, *grant, "--operation", "ALTER").returncode == 0
    r = cli(root, "keys", "create", "--principal", "User:bob", *as_alice)
    assert r.returncode == 0, r.stderr


def test_a_server_without_security_says_so(tmp_path: Path, server: StartServer) -> None:
    node = server(tmp_path / "data")
    r = cli(tmp_path / "elsewhere", "acls", "list", "--server", node.url)
    assert r.returncode == 1 and r.stderr.startswith("SECURITY_DISABLED: security.enabled is false"), r.stderr
    with node.client() as c:
        resp = c.post("/v1/admin/keys", json={"principal": "User:alice"})
        assert resp.status_code == 400 and resp.json()["error_code"] == "SECURITY_DISABLED"


def test_bad_admin_requests_are_refused_by_name(tmp_path: Path, server: StartServer) -> None:
    _, node, admin, _ = bootstrap(tmp_path, server)
    with node.client(api_key=admin) as c:
        resp = c.put("/v1/admin/quotas", json={"principal": "User:alice"})
        assert resp.status_code == 400 and resp.json()["error_code"] == "INVALID_REQUEST", resp.text
        assert "producer_byte_rate or consumer_byte_rate" in resp.json()["message"]
        resp = c.post("/v1/admin/keys", json={"principal": "alice"})
        assert resp.status_code == 400 and resp.json()["error_code"] == "INVALID_REQUEST", resp.text
        resp = c.post("/v1/admin/acls", json={"acls": [{"principal": "User:a", "resource_type": "topic",
                                                        "resource_name": "t", "operation": "FLY"}]})  # fmt: skip
        assert resp.status_code == 422 and resp.json()["error_code"] == "INVALID_REQUEST", resp.text


def test_a_key_made_through_the_server_works_at_once(tmp_path: Path, server: StartServer) -> None:
    _, node, admin, address = bootstrap(tmp_path, server)
    r = cli(tmp_path, "keys", "create", "--principal", "User:admin", "--server", address, "--api-key", admin)
    assert r.returncode == 0, r.stderr
    with node.client(api_key=last_line(r)) as c:  # the node that made the change sees it at once
        assert c.get("/v1/topics").status_code == 200
