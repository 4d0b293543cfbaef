"""One node per root: a second ``logstore serve`` on a root whose write-ahead log is held refuses to start until
the first is killed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.server import Server


def test_second_server_on_one_root_refuses_to_start_until_the_first_is_killed(
    server: Callable[..., Server], tmp_path: Path
) -> None:
    first = server()
    assert first.proc is not None
    second = Server(first.root)
    with pytest.raises(
        RuntimeError, match=f"KAFKA_STORAGE_ERROR: .* in use by another process \\(pid {first.proc.pid} on host"
    ):
        second.start()
    assert second.proc is not None and second.proc.returncode == 1
    first.kill()  # the kernel drops the lock with the process
    second.start()
    try:
        assert second.client().get("/readyz").status_code == 200
    finally:
        second.kill()
