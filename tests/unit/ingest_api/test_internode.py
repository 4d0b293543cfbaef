"""The identity a forward carries: any principal a certificate can name reaches the leader as it was."""

from __future__ import annotations

import contextvars

import httpx
import pytest

from ingest_api.internode import FORWARDED_PRINCIPAL, forwarded_principal, identity_headers, remember_caller


@pytest.mark.parametrize("principal", ["User:CN=alice", "User:CN=Jürgen,O=Zürich", "User:CN=李", "User:a%2Fb c"])
def test_a_certificate_principal_is_forwarded_in_a_header_http_can_carry(principal: str) -> None:
    def forwarded() -> dict[str, str]:
        remember_caller(None, principal)
        return identity_headers()

    headers = contextvars.copy_context().run(forwarded)
    request = httpx.Request("POST", "http://127.0.0.1/v1/topics/t/records", headers=headers)  # ASCII only
    assert forwarded_principal(request.headers[FORWARDED_PRINCIPAL]) == principal
