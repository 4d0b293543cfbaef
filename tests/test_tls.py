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
from logstore.security import FileSecurityStore, new_key
from tests.server import LOGSTORE, Server

StartServer = Callable[..., Server]


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(d: Path) -> tuple[Path, Path]:
    key, cert = d / "ca.key", d / "ca.pem"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
            "-days", "1", "-subj", "/CN=logstore test CA")  # fmt: skip
    return key, cert


def make_cert(d: Path, ca: tuple[Path, Path], name: str, subject: str, *, server: bool) -> tuple[Path, Path]:
    key, csr, cert, ext = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem", d / f"{name}.ext"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", subject)
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
        if server
        else "extendedKeyUsage=clientAuth\n"
    )
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[1]), "-CAkey", str(ca[0]), "-CAcreateserial",
            "-out", str(cert), "-days", "1", "-extfile", str(ext))  # fmt: skip
    return cert, key


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    d = tmp_path / "pki"
    d.mkdir()
    ca = make_ca(d)
    server_cert, server_key = make_cert(d, ca, "server", "/CN=127.0.0.1", server=True)
    client_cert, client_key = make_cert(d, ca, "alice", "/CN=alice", server=False)
    return {
        "ca": ca[1],
        "server_cert": server_cert,
        "server_key": server_key,
        "client_cert": client_cert,
        "client_key": client_key,
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


def test_client_certificates_are_required_with_client_auth(
    tmp_path: Path, server: StartServer, pki: dict[str, Path]
) -> None:
    root = tmp_path / "data"
    record, key = new_key("User:admin")
    FileSecurityStore(str(root)).add_key(record)
    node = server(
        root,
        ca_file=str(pki["ca"]),
        client_cert=(str(pki["client_cert"]), str(pki["client_key"])),
        **{
            "security.enabled": "true",
            "super.users": "User:admin",
            "server.ssl.certfile": str(pki["server_cert"]),
            "server.ssl.keyfile": str(pki["server_key"]),
            "server.ssl.cafile": str(pki["ca"]),
            "server.ssl.client.auth": "required",
        },
    )
    with node.client(api_key=key) as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    without_cert = ssl.create_default_context(cafile=str(pki["ca"]))
    with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
        httpx.get(node.url + "/v1/topics", verify=without_cert, headers={"Authorization": f"Bearer {key}"})
    # the certificate proves the client's CA, not who it is: the API key still names the principal
    with node.client() as c:
        assert c.get("/v1/topics").status_code == 401


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


def test_exposure_check_allows_loopback_security_or_insecure() -> None:
    from ingest_api.serve import check_exposure, is_loopback
    from logstore.config import load_config
    from logstore.errors import InvalidConfigError

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com"))
    exposed = load_config(environ={}, path=None, overrides={"server.host": "0.0.0.0"})
    with pytest.raises(InvalidConfigError):
        check_exposure(exposed, insecure=False)
    check_exposure(exposed, insecure=True)
    check_exposure(exposed.with_overrides({"security.enabled": True}), insecure=False)
