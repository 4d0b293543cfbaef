"""Client certificates into the request: the ASGI TLS extension on uvicorn's HTTP protocol.

uvicorn verifies a client certificate (``server.ssl.client.auth``) but does not
pass it to the application. :class:`ClientCertProtocol` is its HTTP
protocol with one addition: on a TLS connection whose client presented a
verified certificate, every request's scope carries the ASGI TLS extension,
``scope["extensions"]["tls"]`` with ``client_cert_name`` (the subject's RFC 2253
DN) and ``client_cert_chain`` (the leaf certificate, PEM). The certificate is
read once per connection, when the handshake is done.

Runs on the event loop (protocol callbacks); nothing here blocks.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from logstore.security.principal import rfc2253

__all__ = ["ClientCertProtocol", "client_cert_name"]


def client_cert_name(scope: Mapping[str, Any]) -> str | None:
    """The verified client certificate's subject DN of a request, if its connection presented one."""
    tls = scope.get("extensions", {}).get("tls")
    return None if tls is None else tls.get("client_cert_name")


class ClientCertProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, adding the ASGI TLS extension (see the module docstring)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        ssl_object: ssl.SSLObject | None = transport.get_extra_info("ssl_object")
        if ssl_object is None:
            return  # plain HTTP
        cert, der = ssl_object.getpeercert(), ssl_object.getpeercert(binary_form=True)
        if not cert:
            return  # no certificate presented (client auth "requested")
        subject = cast("tuple[tuple[tuple[str, str], ...], ...]", cert.get("subject", ()))
        tls = {
            "server_cert": None,
            "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
            "client_cert_name": rfc2253(subject),
            "client_cert_error": None,
            "tls_version": None,  # (the extension's numeric codes; not needed here)
            "cipher_suite": None,
        }
        inner = self.app

        async def app(scope: Any, receive: Any, send: Any) -> None:
            scope.setdefault("extensions", {})["tls"] = tls
            await inner(scope, receive, send)

        self.app = app
