"""Refusing exposure: a node binds beyond loopback only with security on or with ``--insecure``."""

from __future__ import annotations

import pytest


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
