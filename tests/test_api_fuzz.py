"""Property-based fuzzing of every endpoint from /openapi.json: no 5xx, no hang."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.server import Server


def test_openapi_fuzz_finds_no_server_errors(server: Callable[..., Server]) -> None:
    srv = server(**{"auto.create.topics.enable": "true"})
    with srv.client() as c:
        c.post("/v1/topics", json={"name": "t", "partitions": 2})
    exe = Path(sys.executable).parent / "schemathesis"
    r = subprocess.run(
        [
            str(exe),
            "run",
            f"{srv.url}/openapi.json",
            "--checks",
            "not_a_server_error",
            "--max-examples",
            "40",
            "--request-timeout",
            "30",
            "--seed",
            "7",
            "--phases",
            "examples,fuzzing",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-4000:]
    assert "passed" in r.stdout
    assert srv.client().get("/healthz").status_code == 200  # still alive
