"""The HTTP plumbing the clients share: one configured ``httpx`` client, errors back into exceptions, headers."""

from __future__ import annotations

import os
import ssl
from typing import Any

import httpx

from logstore.errors import (
    ERRORS_BY_NAME,
    UnknownServerError,
)
from logstore.structs import TopicPartition
from logstore.wire.json_bytes import decode_bytes


def json_headers(h: dict[str, Any] | list[dict[str, Any]]) -> list[tuple[str, bytes | None]]:
    """A fetched record's headers in order: the API sends an object, or a list of ``{key, value}`` if a key repeats."""
    if isinstance(h, dict):
        return [(k, decode_bytes(f"header {k}", v)) for k, v in h.items()]
    return [(x["key"], decode_bytes(f"header {x['key']}", x["value"])) for x in h]


def http_client(
    url: str,
    *,
    timeout_s: float,
    api_key: str | None,
    ca_file: str | None,
    client_cert: tuple[str, str] | None = None,
) -> httpx.Client:
    """An HTTP client for ``url``: the API key as a bearer token, TLS verified against ``ca_file`` if given.

    ``api_key`` None falls back to ``LOGSTORE_API_KEY``; no key at all sends none (an open server).
    ``client_cert`` = (certificate PEM, private key PEM) is presented to a server that asks for one
    (``server.ssl.client.auth``); without an API key, the certificate's subject is the principal.
    """
    key = api_key if api_key is not None else os.environ.get("LOGSTORE_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else None
    verify: ssl.SSLContext | bool = True
    if ca_file or client_cert:
        verify = ssl.create_default_context(cafile=ca_file)
        if client_cert:
            verify.load_cert_chain(*client_cert)
    return httpx.Client(base_url=url, timeout=timeout_s, headers=headers, verify=verify)


def raise_for(r: httpx.Response) -> None:
    if r.status_code < 400:
        return
    try:
        body = r.json()
        cls = ERRORS_BY_NAME.get(body.get("error_code", ""), UnknownServerError)
        raise cls(body.get("message", r.text))
    except ValueError:
        raise UnknownServerError(f"HTTP {r.status_code}: {r.text[:200]}") from None


def assigned_partitions(assignment: list[dict[str, Any]]) -> frozenset[TopicPartition]:
    """A member's assignment as the server sends it (``[{"topic", "partition"}]``) as topic-partitions."""
    return frozenset(TopicPartition(a["topic"], a["partition"]) for a in assignment)
