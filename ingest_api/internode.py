"""Node-to-node calls in cluster mode: their TLS client settings, and whom a forwarded request acts for.

A node forwards a request (records to their partition's leader, a group call
to its coordinator, a list of groups to every node) as a client of the other
node, as Kafka's brokers talk to each other over their inter-broker listener:

* **TLS.** :func:`node_client_tls` verifies the other node's certificate with
  ``inter.node.ssl.ca.location`` (else ``server.ssl.cafile``, else the
  system's CAs) and presents ``inter.node.ssl.certificate.location`` and
  ``inter.node.ssl.key.location`` (else the node's own ``server.ssl.certfile``
  and ``server.ssl.keyfile``), so a cluster on a private CA, and one with
  ``server.ssl.client.auth=required``, can forward.
* **Identity.** A client that sent an API key is forwarded with its
  ``Authorization`` header: the other node authenticates the key itself. A
  client authenticated by its certificate cannot be forwarded that way (the
  certificate stays on the first connection), so the forwarding node, which
  authenticated it, names its principal in :data:`FORWARDED_PRINCIPAL`. The
  other node honours that header only on a connection whose verified client
  certificate maps to a principal in ``super.users`` (a node's certificate)
  and that sends no API key; from any other request it is ignored, and a
  node never copies it from a client's request onto a forward. A client
  sending it itself is therefore still itself.

:func:`get_access <ingest_api.deps.get_access>` records, per request, what a
forward must carry (:func:`remember_caller`); the forwarders read it back
with :func:`identity_headers` (a context variable: the request's task and the
tasks it gathers see it, other requests do not).
"""

from __future__ import annotations

import ssl
from contextvars import ContextVar
from urllib.parse import quote, unquote

from logstore.config import LogstoreConfig

__all__ = [
    "ANONYMOUS",
    "FORWARDED_PRINCIPAL",
    "forwarded_principal",
    "identity_headers",
    "node_client_tls",
    "remember_caller",
]

ANONYMOUS = "User:ANONYMOUS"
"""The principal of every request when ``security.enabled`` is false (as Kafka names it)."""

FORWARDED_PRINCIPAL = "x-logstore-forwarded-principal"
"""Header naming the principal a node forwards a certificate-authenticated client's request for,
percent-encoded (UTF-8): a certificate's subject may hold any character, a header only ASCII."""

_caller: ContextVar[tuple[str | None, str | None]] = ContextVar("logstore_forwarded_caller", default=(None, None))
"""(Authorization header, certificate principal) of the request being served: what a forward of it carries."""


def node_client_tls(config: LogstoreConfig) -> ssl.SSLContext:
    """The TLS context a node's forwards use (see the module docstring).

    Raises:
        OSError, ssl.SSLError: a configured file cannot be read or does not hold what it should.
    """
    ca = config.inter_node_ssl_ca_location or config.server_ssl_cafile
    context = ssl.create_default_context(cafile=ca or None)
    cert = config.inter_node_ssl_certificate_location or config.server_ssl_certfile
    if cert:
        key = config.inter_node_ssl_key_location or (
            config.server_ssl_keyfile if not config.inter_node_ssl_certificate_location else ""
        )
        context.load_cert_chain(cert, key or None)
    return context


def remember_caller(authorization: str | None, certified: str | None) -> None:
    """Note who the current request is: its API key's header, else the principal its certificate names."""
    _caller.set((authorization, certified))


def identity_headers() -> dict[str, str]:
    """The headers that make a forward of the current request act for its client.

    A request whose client is not known (security off, or a route that does
    not authenticate) is forwarded as ``User:ANONYMOUS``, never as the node:
    the node's certificate alone would make it a super user at the other end.
    """
    authorization, certified = _caller.get()
    if authorization:
        return {"authorization": authorization}
    return {FORWARDED_PRINCIPAL: quote(certified or ANONYMOUS, safe="")}


def forwarded_principal(value: str | None) -> str | None:
    """The principal a :data:`FORWARDED_PRINCIPAL` header names (None or empty: none)."""
    return unquote(value) if value else None
