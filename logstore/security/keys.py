"""API keys: ``lsk_<key id>_<secret>``, stored only as a salted scrypt hash.

The key id is public (``keys list`` shows it, the store is indexed by it); the
secret is shown once, when the key is created, and never stored: the store
keeps ``scrypt(secret, salt)`` with a random 16-byte salt. scrypt is
memory-hard (n=2^14, r=8: 16 MiB and tens of ms per check), so a copy of the
store does not give keys away cheaply; :class:`KeyVerifier` runs it once per
key and then remembers, in memory only, a SHA-256 of the secret that was
accepted, so a request does not pay the KDF again. Comparisons are constant
time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from logstore.common.lru import LruDict

__all__ = ["KEY_PREFIX", "ApiKey", "KeyVerifier", "new_key", "split_key"]

KEY_PREFIX = "lsk"
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1
_SCRYPT_MAXMEM = 64 * 1024 * 1024


@dataclass(frozen=True)
class ApiKey:
    """A stored key: who it authenticates and the hash of its secret (never the secret).

    Attributes:
        key_id: the public part of the key (hex), unique.
        principal: the principal a request with this key acts as (``User:alice``).
        salt: random bytes (hex) hashed with the secret.
        hash: ``scrypt(secret, salt, n, r, p)`` (hex).
        n, r, p: the scrypt cost parameters the hash was made with.
        created_ms: creation time, ms since the epoch.
    """

    key_id: str
    principal: str
    salt: str
    hash: str
    n: int
    r: int
    p: int
    created_ms: int

    def verify(self, secret: str) -> bool:
        """Whether ``secret`` is this key's secret (runs scrypt: tens of ms; constant-time compare)."""
        return hmac.compare_digest(_scrypt(secret, bytes.fromhex(self.salt), self.n, self.r, self.p), self.hash)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "principal": self.principal,
            "salt": self.salt,
            "hash": self.hash,
            "n": self.n,
            "r": self.r,
            "p": self.p,
            "created_ms": self.created_ms,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ApiKey:
        return cls(
            str(d["key_id"]),
            str(d["principal"]),
            str(d["salt"]),
            str(d["hash"]),
            int(d["n"]),
            int(d["r"]),
            int(d["p"]),
            int(d["created_ms"]),
        )


def _scrypt(secret: str, salt: bytes, n: int, r: int, p: int) -> str:
    return hashlib.scrypt(secret.encode(), salt=salt, n=n, r=r, p=p, maxmem=_SCRYPT_MAXMEM, dklen=32).hex()


def new_key(principal: str) -> tuple[ApiKey, str]:
    """A fresh key for ``principal``: the record to store, and the full key to show once."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_bytes(16)
    record = ApiKey(
        key_id,
        principal,
        salt.hex(),
        _scrypt(secret, salt, _SCRYPT_N, _SCRYPT_R, _SCRYPT_P),
        _SCRYPT_N,
        _SCRYPT_R,
        _SCRYPT_P,
        int(time.time() * 1000),
    )
    return record, f"{KEY_PREFIX}_{key_id}_{secret}"


def split_key(key: str) -> tuple[str, str] | None:
    """``(key id, secret)`` of a presented key, or None when it is not shaped like one."""
    prefix, sep, rest = key.partition("_")
    key_id, sep2, secret = rest.partition("_")
    if prefix != KEY_PREFIX or not sep or not sep2 or not key_id or not secret:
        return None
    return key_id, secret


class KeyVerifier:
    """Checks presented keys against stored ones, running scrypt at most once per (key, secret).

    Thread-safe. The cache holds a SHA-256 of each accepted secret by key id and
    the stored hash it was checked against, so a key that is revoked (or
    replaced) is no longer accepted as soon as the store no longer has it. The
    last ``max_rejected`` wrong secrets are remembered too, so a client
    repeating a bad key does not make the node run scrypt on every request.
    """

    def __init__(self, *, max_rejected: int = 4096) -> None:
        self._accepted: dict[str, tuple[str, bytes]] = {}
        self._rejected: LruDict[tuple[str, str, bytes], None] = LruDict(max_rejected)
        self._lock = threading.Lock()

    def cached(self, record: ApiKey, secret: str) -> bool | None:
        """True when this secret was accepted for ``record`` before; None when scrypt must decide."""
        with self._lock:
            hit = self._accepted.get(record.key_id)
        if hit is None or hit[0] != record.hash:
            return None
        return hmac.compare_digest(hashlib.sha256(secret.encode()).digest(), hit[1]) or None

    def verify(self, record: ApiKey, secret: str) -> bool:
        """Whether ``secret`` belongs to ``record``; the slow path (scrypt) runs once per accepted key."""
        if self.cached(record, secret):
            return True
        digest = hashlib.sha256(secret.encode()).digest()
        with self._lock:
            if (record.key_id, record.hash, digest) in self._rejected:
                return False
        if not record.verify(secret):
            with self._lock:
                self._rejected[(record.key_id, record.hash, digest)] = None
            return False
        with self._lock:
            self._accepted[record.key_id] = (record.hash, digest)
        return True
