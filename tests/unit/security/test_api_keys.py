"""Verifying an API key: the key derivation runs once per key, a cache answers after it, and a wrong secret
is never accepted from it (the CLI and the server's side are in ``tests/integration/security/test_api_keys.py``)."""

from __future__ import annotations

import time

from logstore.security import new_key
from logstore.security.keys import KeyVerifier, split_key


def test_the_kdf_runs_once_per_key_then_a_cache_answers() -> None:
    record, key = new_key("User:alice")
    parts = split_key(key)
    assert parts is not None
    verifier = KeyVerifier()
    assert verifier.cached(record, parts[1]) is None
    assert not verifier.verify(record, parts[1] + "x")
    assert verifier.verify(record, parts[1])
    assert verifier.cached(record, parts[1]) is True
    assert verifier.cached(record, parts[1] + "x") is None  # a wrong secret is never accepted from the cache


def test_a_repeated_wrong_secret_does_not_run_the_kdf_again() -> None:
    record, _ = new_key("User:alice")
    verifier = KeyVerifier()
    started = time.perf_counter()
    assert not verifier.verify(record, "wrong")
    first = time.perf_counter() - started
    started = time.perf_counter()
    assert all(not verifier.verify(record, "wrong") for _ in range(20))
    assert time.perf_counter() - started < first  # 20 rejections cost less than one scrypt
