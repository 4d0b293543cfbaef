"""Certificates for the TLS tests, made with the ``openssl`` command line: a CA and the certificates it signs."""

from __future__ import annotations

import subprocess
from pathlib import Path


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(d: Path) -> tuple[Path, Path]:
    """A self-signed CA in ``d``: (key, certificate)."""
    key, cert = d / "ca.key", d / "ca.pem"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
            "-days", "1", "-subj", "/CN=logstore test CA")  # fmt: skip
    return key, cert


def make_cert(
    d: Path, ca: tuple[Path, Path], name: str, subject: str, *, server: bool, client: bool | None = None
) -> tuple[Path, Path]:
    """A certificate of ``subject`` signed by ``ca``: (certificate, key).

    ``server``: for 127.0.0.1 and localhost, with the serverAuth usage; ``client``
    (default: not ``server``) adds the clientAuth usage — both for a node that
    also calls other nodes with its own certificate.
    """
    client = not server if client is None else client
    key, csr, cert, ext = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem", d / f"{name}.ext"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", subject)
    usages = [u for u, wanted in (("serverAuth", server), ("clientAuth", client)) if wanted]
    san = "subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server else ""
    ext.write_text(f"{san}extendedKeyUsage={','.join(usages)}\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[1]), "-CAkey", str(ca[0]), "-CAcreateserial",
            "-out", str(cert), "-days", "1", "-extfile", str(ext))  # fmt: skip
    return cert, key
