"""API keys: created, listed and revoked with the CLI, stored only as salted hashes, refused soon after revocation."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from logstore.client import RemoteStore
from logstore.errors import SaslAuthenticationFailedError
from logstore.security import FileSecurityStore
from logstore.security.keys import split_key
from tests.support.cli import cli
from tests.support.server import Server

StartServer = Callable[..., Server]
SECURE = {"security.enabled": "true", "super.users": "User:admin"}


def create_key(root: Path, principal: str) -> str:
    r = cli(root, "keys", "create", "--principal", principal)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()[-1]


def test_create_prints_the_key_alone_on_its_last_line_and_list_never_shows_it(tmp_path: Path) -> None:
    root = tmp_path / "data"
    key = create_key(root, "User:alice")
    parts = split_key(key)
    assert parts is not None and key.strip() == key
    key_id, secret = parts
    listed = cli(root, "keys", "list")
    assert listed.returncode == 0
    assert key_id in listed.stdout and "User:alice" in listed.stdout and secret not in listed.stdout
    assert cli(root, "keys", "create", "--principal", "alice").returncode == 1  # not TYPE:NAME


def test_keys_are_stored_only_as_salted_hashes(tmp_path: Path) -> None:
    root = tmp_path / "data"
    keys = [create_key(root, "User:alice") for _ in range(2)]
    stored = b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())
    for key in keys:
        assert key.split("_", 2)[2].encode() not in stored
    records = list(FileSecurityStore(str(root)).snapshot().keys.values())
    assert len({r.salt for r in records}) == 2  # a salt per key


def test_revoke_by_key_id_and_by_principal(tmp_path: Path) -> None:
    root = tmp_path / "data"
    a1, a2, b = create_key(root, "User:alice"), create_key(root, "User:alice"), create_key(root, "User:bob")
    a1_id = a1.split("_")[1]
    r = cli(root, "keys", "revoke", "--key-id", a1_id)
    assert r.returncode == 0 and a1_id in r.stdout
    assert set(FileSecurityStore(str(root)).snapshot().keys) == {a2.split("_")[1], b.split("_")[1]}
    assert cli(root, "keys", "revoke", "--principal", "User:alice").returncode == 0
    assert set(FileSecurityStore(str(root)).snapshot().keys) == {b.split("_")[1]}
    assert cli(root, "keys", "revoke", "--principal", "User:alice").returncode == 1  # nothing left to revoke
    assert "User:bob" in cli(root, "keys", "list").stdout


def test_a_revoked_key_is_refused_on_every_node_within_5_seconds(tmp_path: Path, server: StartServer) -> None:
    root = tmp_path / "data"
    key = create_key(root, "User:admin")
    # two nodes on one root (one security store), each with its own write-ahead log directory
    nodes = [server(root, **SECURE), server(root, **SECURE, **{"wal.dir": str(tmp_path / "wal-2")})]
    for node in nodes:
        with node.client(api_key=key) as c:
            assert c.get("/v1/topics").status_code == 200
    revoked_at = time.monotonic()
    assert cli(root, "keys", "revoke", "--principal", "User:admin").returncode == 0
    for node in nodes:
        with node.client(api_key=key) as c:
            while (status := c.get("/v1/topics").status_code) != 401 and time.monotonic() - revoked_at < 5:
                time.sleep(0.1)
        assert status == 401, "the revoked key was still accepted 5 s later"


def test_a_key_created_while_serving_is_accepted(tmp_path: Path, server: StartServer) -> None:
    root = tmp_path / "data"
    node = server(root, **SECURE)
    key = create_key(root, "User:admin")
    deadline = time.monotonic() + 5
    with node.client(api_key=key) as c:
        while (status := c.get("/v1/topics").status_code) != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert status == 200


def test_clients_send_the_key_from_the_option_or_the_environment(
    tmp_path: Path, server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "data"
    key = create_key(root, "User:admin")
    node = server(root, **SECURE)
    with pytest.raises(SaslAuthenticationFailedError):
        RemoteStore(node.url).list_topics()
    RemoteStore(node.url, api_key=key).create_topic("t", 1)
    monkeypatch.setenv("LOGSTORE_API_KEY", key)
    assert RemoteStore(node.url).list_topics() == ["t"]
    r = cli(root, "--server", node.url, "topics", "list", LOGSTORE_API_KEY=key)
    assert r.returncode == 0 and r.stdout.split() == ["TOPIC", "t"], r.stderr
    r = cli(root, "--server", node.url, "topics", "list")
    assert r.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in r.stderr
    r = cli(root, "--server", node.url, "--api-key", key, "topics", "list")
    assert r.returncode == 0 and r.stdout.split() == ["TOPIC", "t"], r.stderr
