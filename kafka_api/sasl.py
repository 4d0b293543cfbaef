"""SASL/PLAIN on a ``SASL_PLAINTEXT`` or ``SASL_SSL`` listener: SaslHandshake (v0, v1) and SaslAuthenticate.

The exchange, as a Kafka broker runs it (``SaslServerAuthenticator``):

1. ApiVersions, any number of times (the client learns the versions);
2. SaslHandshake naming the mechanism: ``PLAIN`` is offered, anything else
   is answered ``UNSUPPORTED_SASL_MECHANISM`` with the list, and the
   connection is closed;
3. the PLAIN message (``authzid NUL username NUL password``): after a v1
   handshake inside SaslAuthenticate, answered ``SASL_AUTHENTICATION_FAILED``
   (then the connection closes) or success; after a v0 handshake as a bare
   frame with no request header, answered by an empty frame, or by closing the
   connection.

The username names the principal (``alice`` → ``User:alice``) and the password
is an API key of that principal (``logstore keys create --principal
User:alice``): a key of another principal fails as a wrong one does. Any other
request before authentication is answered ``ILLEGAL_SASL_STATE`` and the
connection closed. Sessions do not expire (``session_lifetime_ms`` 0), so
clients never re-authenticate (KIP-368).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafka_api.access import Session, error_response, parse_plain
from kafka_api.protocol import FrameHeader, build, error_frame, read_request, response_class, response_frame, supported
from logstore.errors import (
    IllegalSaslStateError,
    LogstoreError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from logstore.security.audit import audit

__all__ = ["MECHANISMS", "SaslGate", "refuse_sasl"]

log = logging.getLogger("logstore.kafka")

MECHANISMS = ("PLAIN",)
_HANDSHAKE, _AUTHENTICATE, _API_VERSIONS = 17, 36, 18


class SaslGate:
    """The SASL exchange of one connection of a ``SASL_*`` listener, until :attr:`Session.authenticated`."""

    def __init__(self, session: Session) -> None:
        assert session.guard is not None
        self.session = session
        self.session.authenticated = False
        self._mechanism: str | None = None
        self._raw = False
        self._header: FrameHeader | None = None

    @property
    def expects_raw_token(self) -> bool:
        """After a v0 handshake the next frame is the bare PLAIN message, without a request header."""
        return self._raw

    async def raw_token(self, frame: bytes) -> bytes | None:
        """Authenticate with a bare PLAIN message; the (empty) answer frame, or None: close the connection."""
        self._raw = False
        try:
            await self._verify(frame)
        except LogstoreError:
            return None
        return b"\0\0\0\0"

    async def request(self, header: FrameHeader, frame: bytes) -> tuple[bytes, bool]:
        """Answer a request of the exchange (not ApiVersions); returns the answer frame and whether to close after."""
        if not supported(header.api_key, header.api_version):
            return error_frame(header, IllegalSaslStateError.code), True
        if header.api_key == _HANDSHAKE and self._mechanism is None:
            req = read_request(header, frame)
            if req.mechanism not in MECHANISMS:
                e = UnsupportedSaslMechanismError(f"SASL mechanism {req.mechanism!r} is not offered; use PLAIN")
                return self._frame(header, {"error_code": e.code, "mechanisms": list(MECHANISMS)}), True
            self._mechanism = req.mechanism
            self._raw = header.api_version == 0
            return self._frame(header, {"error_code": 0, "mechanisms": list(MECHANISMS)}), False
        if header.api_key == _AUTHENTICATE and self._mechanism is not None and not self._raw:
            req = read_request(header, frame)
            try:
                await self._verify(req.auth_bytes)
            except LogstoreError as e:
                return self._authenticate(header, e.code, e.message), True
            return self._authenticate(header, 0, None), False
        what = "SaslAuthenticate before SaslHandshake" if header.api_key == _AUTHENTICATE else "a request"
        e2 = IllegalSaslStateError(
            f"{what} (api {header.api_key}) on a SASL listener before authenticating: send ApiVersions, "
            "SaslHandshake (PLAIN), then SaslAuthenticate"
        )
        log.warning("closing a Kafka connection: %s", e2)
        return response_frame(header, error_response(header.api_key, header.api_version, e2.code)), True

    async def _verify(self, token: bytes) -> None:
        """Check the PLAIN message; on success the session is authenticated as its principal.

        Raises:
            SaslAuthenticationFailedError: malformed, or the password is not a live API key of that principal.
        """
        principal, password = parse_plain(token)
        guard = self.session.guard
        assert guard is not None
        found = guard.authenticate_cached(password) or await asyncio.to_thread(guard.authenticate, password)
        if found != principal:
            if found is not None:
                audit("authenticate", principal=principal, decision="DENIED", reason="the key is another principal's")
            raise SaslAuthenticationFailedError(
                f"Authentication failed: Invalid username or password (for {principal} the password is an API key "
                "of that principal: logstore keys create --principal …)"
            )
        self.session.principal = principal
        self.session.authenticated = True

    @staticmethod
    def _frame(header: FrameHeader, values: dict[str, Any]) -> bytes:
        return response_frame(header, build(response_class(header.api_key, header.api_version), values))

    def _authenticate(self, header: FrameHeader, code: int, message: str | None) -> bytes:
        values = {"error_code": code, "error_message": message, "auth_bytes": b"", "session_lifetime": 0}
        return self._frame(header, values)


async def refuse_sasl(version: int, req: Any, *, api_key: int) -> Any:
    """SaslHandshake or SaslAuthenticate where none is expected (a ``PLAINTEXT`` listener, or once authenticated):
    ``ILLEGAL_SASL_STATE``, as Kafka answers."""
    message = "SASL is not expected here: the listener is PLAINTEXT, or the connection already authenticated"
    if api_key == _HANDSHAKE:
        return error_response(api_key, version, IllegalSaslStateError.code)
    return error_response(api_key, version, IllegalSaslStateError.code, message)
