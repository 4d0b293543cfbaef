"""TLS on the HTTP API (server.ssl.*), client certificates (server.ssl.client.auth), and refusing exposure.

Certificates are made in the test with the ``openssl`` command line.
"""

from __future__ import annotations

import os
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from logstore.client import Producer, RemoteStore
from logstore.security import (
    CLUSTER_NAME,
    AclBinding,
    FileSecurityStore,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    new_key,
)
from tests.support.pki import make_ca, make_cert
from tests.support.server import LOGSTORE, Server

StartServer = Callable[..., Server]


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    d = tmp_path / "pki"
    d.mkdir()
    ca = make_ca(d)
    server_cert, server_key = make_cert(d, ca, "server", "/CN=127.0.0.1", server=True)
    client_cert, client_key = make_cert(d, ca, "alice", "/C=US/O=Acme/OU=eng/CN=alice", server=False)
    bob_cert, bob_key = make_cert(d, ca, "bob", "/C=US/O=Acme/OU=ops/CN=bob", server=False)
    return {
        "ca": ca[1],
        "server_cert": server_cert,
        "server_key": server_key,
        "client_cert": client_cert,
        "client_key": client_key,
        "bob_cert": bob_cert,
        "bob_key": bob_key,
    }


def test_tls_round_trip_with_an_api_key(tmp_path: Path, server: StartServer, pki: dict[str, Path]) -> None:
    root = tmp_path / "data"
    record, key = new_key("User:admin")
    FileSecurityStore(str(root)).add_key(record)
    node = server(
        root,
        ca_file=str(pki["ca"]),
        **{
            "security.enabled": "true",
            "super.users": "User:admin",
            "server.ssl.certfile": str(pki["server_cert"]),
            "server.ssl.keyfile": str(pki["server_key"]),
        },
    )
    assert node.url.startswith("https://")
    store = RemoteStore(node.url, api_key=key, ca_file=str(pki["ca"]))
    store.create_topic("t", 1)
    with Producer(node.url, api_key=key, ca_file=str(pki["ca"])) as producer:
        producer.produce("t", b"over tls")
    assert store.fetch("t", 0, 0).records["value"].to_pylist() == [b"over tls"]
    with pytest.raises(httpx.ConnectError):  # the system's CAs do not know the test CA
        httpx.get(node.url + "/healthz")
    with pytest.raises(httpx.RemoteProtocolError):  # plain HTTP to a TLS port
        httpx.get(node.url.replace("https", "http") + "/healthz")


def mtls_config(pki: dict[str, Path], client_auth: str = "required", **extra: str) -> dict[str, str]:
    return {
        "security.enabled": "true",
        "super.users": "User:admin",
        "server.ssl.certfile": str(pki["server_cert"]),
        "server.ssl.keyfile": str(pki["server_key"]),
        "server.ssl.cafile": str(pki["ca"]),
        "server.ssl.client.auth": client_auth,
        **extra,
    }


def test_client_certificates_are_required_with_client_auth(
    tmp_path: Path, server: StartServer, pki: dict[str, Path]
) -> None:
    root = tmp_path / "data"
    record, key = new_key("User:admin")
    FileSecurityStore(str(root)).add_key(record)
    node = server(
        root, ca_file=str(pki["ca"]), client_cert=(str(pki["client_cert"]), str(pki["client_key"])), **mtls_config(pki)
    )
    with node.client(api_key=key) as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    without_cert = ssl.create_default_context(cafile=str(pki["ca"]))
    with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
        httpx.get(node.url + "/v1/topics", verify=without_cert, headers={"Authorization": f"Bearer {key}"})


def test_a_client_certificate_names_the_principal_as_kafka_does(
    tmp_path: Path, server: StartServer, pki: dict[str, Path]
) -> None:
    """No API key: the certificate's subject, RFC 2253 (most specific first), is ``User:<DN>`` (Kafka's DEFAULT)."""
    root = tmp_path / "data"
    admin, admin_key = new_key("User:admin")
    alice = "User:CN=alice,OU=eng,O=Acme,C=US"
    store = FileSecurityStore(str(root))
    store.add_key(admin)
    store.add_acls([AclBinding(alice, ResourceType.TOPIC, "t", PatternType.LITERAL, Operation.WRITE, Permission.ALLOW)])
    alice_cert = (str(pki["client_cert"]), str(pki["client_key"]))
    node = server(root, ca_file=str(pki["ca"]), client_cert=alice_cert, **mtls_config(pki))
    RemoteStore(node.url, api_key=admin_key, ca_file=str(pki["ca"]), client_cert=alice_cert).create_topic("t", 1)
    with Producer(node.url, api_key="", ca_file=str(pki["ca"]), client_cert=alice_cert) as producer:
        producer.produce("t", b"signed by alice")
    with node.client() as c:  # alice may write t, not read it
        assert c.get("/v1/topics/t/partitions/0/records?offset=0").status_code == 403
        assert c.post("/v1/topics/t/records", json={"records": [{"value": "eA=="}]}).status_code == 200
    # an API key, when sent, names the principal instead of the certificate
    with node.client(api_key=admin_key) as c:
        assert len(c.get("/v1/topics/t/partitions/0/records?offset=0").json()["records"]) == 2
    assert alice in node.log()  # the denied read was audited under the certificate's principal
    cli = [*LOGSTORE, "produce", "t", "--server", node.url, "--ca-file", str(pki["ca"])]
    cli += ["--client-cert", alice_cert[0], "--client-key", alice_cert[1]]
    env = {k: v for k, v in os.environ.items() if k != "LOGSTORE_API_KEY"}
    r = subprocess.run(cli, input="from the cli\n", capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr


def test_mapping_rules_turn_a_subject_into_a_short_principal(
    tmp_path: Path, server: StartServer, pki: dict[str, Path]
) -> None:
    root = tmp_path / "data"
    FileSecurityStore(str(root)).add_acls(
        [
            AclBinding(
                "User:alice", ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, Operation.ALL, Permission.ALLOW
            )
        ]
    )
    rules = "RULE:^CN=([^,]+),OU=eng,.*$/$1/L,RULE:^CN=([^,]+),OU=ops,.*$/ops-$1/U"
    node = server(
        root,
        ca_file=str(pki["ca"]),
        client_cert=(str(pki["client_cert"]), str(pki["client_key"])),
        **mtls_config(pki, **{"ssl.principal.mapping.rules": rules}),
    )
    with node.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    bob = ssl.create_default_context(cafile=str(pki["ca"]))
    bob.load_cert_chain(str(pki["bob_cert"]), str(pki["bob_key"]))
    r = httpx.post(node.url + "/v1/topics", json={"name": "u", "partitions": 1}, verify=bob)
    assert r.status_code == 403 and "User:OPS-BOB" in node.log()  # U upper-cases the whole name, as in Kafka


def test_requested_client_auth_takes_a_certificate_or_a_key(
    tmp_path: Path, server: StartServer, pki: dict[str, Path]
) -> None:
    root = tmp_path / "data"
    admin, admin_key = new_key("User:admin")
    FileSecurityStore(str(root)).add_key(admin)
    node = server(
        root,
        ca_file=str(pki["ca"]),
        **mtls_config(pki, "requested", **{"super.users": "User:CN=alice,OU=eng,O=Acme,C=US"}),
    )
    alice = ssl.create_default_context(cafile=str(pki["ca"]))
    alice.load_cert_chain(str(pki["client_cert"]), str(pki["client_key"]))
    assert httpx.post(node.url + "/v1/topics", json={"name": "t", "partitions": 1}, verify=alice).status_code == 201
    plain = ssl.create_default_context(cafile=str(pki["ca"]))
    assert httpx.get(node.url + "/v1/topics", verify=plain).status_code == 401
    r = httpx.get(node.url + "/v1/topics", verify=plain, headers={"Authorization": f"Bearer {admin_key}"})
    assert r.status_code == 200 and r.json() == {"topics": []}  # authenticated by its key; no ACL lets it see topic t


def test_serve_refuses_mapping_rules_that_do_not_parse(tmp_path: Path) -> None:
    r = serve(tmp_path, "--port", "0", **{"ssl.principal.mapping.rules": "RULE:^CN=(.*)$/$1/X"})
    assert r.returncode == 1 and "ssl.principal.mapping.rules" in r.stderr


def serve(root: Path, *args: str, **config: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}
    env |= {"LOGSTORE_" + k.upper().replace(".", "_"): v for k, v in config.items()}
    return subprocess.run(
        [*LOGSTORE, "--root", str(root), "serve", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_serve_refuses_a_non_loopback_host_with_security_off(tmp_path: Path) -> None:
    r = serve(tmp_path, "--host", "0.0.0.0", "--port", "0")
    assert r.returncode == 1
    assert "INVALID_CONFIG" in r.stderr and "security.enabled" in r.stderr and "--insecure" in r.stderr
    r = serve(tmp_path, "--port", "0", **{"server.host": "::"})
    assert r.returncode == 1 and "--insecure" in r.stderr


def test_serve_refuses_incomplete_tls_settings(tmp_path: Path) -> None:
    r = serve(tmp_path, "--port", "0", **{"server.ssl.client.auth": "required"})
    assert r.returncode == 1 and "server.ssl.certfile" in r.stderr
