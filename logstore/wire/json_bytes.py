"""Bytes in JSON, as the HTTP API writes them (docs/design.md §3): a UTF-8 string, ``{"b64": "…"}`` or null.

One codec for both ends: the server (``ingest_api``) decodes what producers
send and encodes what it fetches; :mod:`logstore.client` does the reverse.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from logstore.errors import InvalidRequestError

__all__ = ["decode_bytes", "encode_bytes"]


def encode_bytes(b: bytes | str | None) -> str | dict[str, str] | None:
    """Bytes as JSON: a string when valid UTF-8, else ``{"b64": …}``; a ``str`` passes through, None stays null."""
    if b is None or isinstance(b, str):
        return b
    try:
        return b.decode()
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(b).decode()}


def decode_bytes(field: str, v: Any) -> bytes | None:
    """A key, value or header value from JSON: a UTF-8 string, ``{"b64": …}`` or null.

    Raises:
        InvalidRequestError: anything else, or invalid base64 (``field`` names the culprit).
    """
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, dict) and set(v) == {"b64"} and isinstance(v["b64"], str):
        try:
            return base64.b64decode(v["b64"], validate=True)
        except binascii.Error:
            raise InvalidRequestError(f"{field} is not valid base64") from None
    raise InvalidRequestError(f'{field} must be a string, {{"b64": "…"}} or null')
