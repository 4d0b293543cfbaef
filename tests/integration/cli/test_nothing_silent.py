"""The `logstore` command never answers a wrong setting with a silent success: it names the setting and exits 1."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.server import LOGSTORE


def logstore(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}
    return subprocess.run([*LOGSTORE, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


def test_a_root_uri_this_build_cannot_use_is_refused_and_makes_no_folder(tmp_path: Path) -> None:
    r = logstore(tmp_path, "--root", "s3://bucket/ls", "topics", "create", "x", "--partitions", "1")
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith("INVALID_CONFIG: logstore.root 's3://bucket/ls'"), r.stderr
    assert "Created" not in r.stdout
    assert list(tmp_path.iterdir()) == []  # no ./s3:/bucket/ls


@pytest.mark.parametrize("command", [["topics", "list"], ["topics", "describe", "t"], ["groups", "list"]])
def test_a_read_command_on_a_root_that_does_not_exist_names_the_root(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "nonexistent" / "x"
    r = logstore(tmp_path, "--root", str(missing), *command)
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith(f"INVALID_CONFIG: logstore.root '{missing}' is not a directory"), r.stderr
    assert not missing.exists()


def test_creating_a_topic_still_makes_a_new_store(tmp_path: Path) -> None:
    r = logstore(tmp_path, "--root", str(tmp_path / "new"), "topics", "create", "t", "--partitions", "1")
    assert r.returncode == 0, r.stderr
    assert logstore(tmp_path, "--root", str(tmp_path / "new"), "topics", "list").stdout.split() == ["t"]


@pytest.mark.parametrize("command", [["acls", "list"], ["keys", "list"], ["quotas", "list"]])
def test_security_commands_refuse_a_server_they_would_not_use(tmp_path: Path, command: list[str]) -> None:
    r = logstore(tmp_path, "--root", str(tmp_path), *command, "--server", "http://127.0.0.1:9")
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith("INVALID_CONFIG: keys, ACLs and quotas are managed on the store itself"), r.stderr
