"""Property-based fuzzing of every endpoint from /openapi.json: no 5xx, no hang; with security on, no route open."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.server import Server


def _schemathesis(srv: Server, checks: str, max_examples: int, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run schemathesis against ``srv`` (examples and fuzzing phases, a fixed seed); its output is returned."""
    exe = Path(sys.executable).parent / "schemathesis"
    args = [str(exe), "run", f"{srv.url}/openapi.json", *extra, "--checks", checks]
    args += ["--max-examples", str(max_examples), "--request-timeout", "30", "--seed", "7"]
    args += ["--phases", "examples,fuzzing"]
    return subprocess.run(args, capture_output=True, text=True, timeout=900)


def test_openapi_fuzz_finds_no_server_errors(server: Callable[..., Server]) -> None:
    srv = server(**{"auto.create.topics.enable": "true"})
    with srv.client() as c:
        c.post("/v1/topics", json={"name": "t", "partitions": 2})
    r = _schemathesis(srv, "not_a_server_error", 40)
    assert r.returncode == 0, r.stdout[-4000:]
    assert "passed" in r.stdout
    assert srv.client().get("/healthz").status_code == 200  # still alive


def test_openapi_fuzz_with_security_finds_no_server_errors_and_no_route_open_without_a_key(
    server: Callable[..., Server],
) -> None:
    from logstore.security import FileSecurityStore, new_key

    srv = server(**{"security.enabled": "true", "super.users": "User:admin", "auto.create.topics.enable": "true"})
    record, key = new_key("User:admin")
    FileSecurityStore(str(srv.root)).add_key(record)  # picked up by the running server within a second or two
    with srv.client(api_key=key) as c:
        deadline = time.monotonic() + 5
        while c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 401:
            assert time.monotonic() < deadline, "the new key was not accepted within 5 s"
            time.sleep(0.1)
    # ignored_auth: each request is also sent without the key and must not succeed
    r = _schemathesis(srv, "not_a_server_error,ignored_auth", 15, "--header", f"Authorization: Bearer {key}")
    assert r.returncode == 0, r.stdout[-4000:]
    assert "passed" in r.stdout
    assert key.split("_", 2)[2] not in srv.log()
