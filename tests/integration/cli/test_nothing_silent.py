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
    r = logstore(tmp_path, "--root", "az://container/ls", "topics", "create", "x", "--partitions", "1")
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith("INVALID_CONFIG: logstore.root 'az://container/ls'"), r.stderr
    assert "Created" not in r.stdout
    assert list(tmp_path.iterdir()) == []  # no ./az:/container/ls


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
    assert logstore(tmp_path, "--root", str(tmp_path / "new"), "topics", "list").stdout.split() == ["TOPIC", "t"]


@pytest.mark.parametrize("command", [["acls", "list"], ["keys", "list"], ["quotas", "list"]])
def test_security_commands_go_to_the_server_they_are_given(tmp_path: Path, command: list[str]) -> None:
    """Not the root's store: nothing listens on port 9, and the command says so."""
    r = logstore(tmp_path, "--root", str(tmp_path), *command, "--server", "http://127.0.0.1:9")
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith("NETWORK_EXCEPTION: cannot reach any server (http://127.0.0.1:9: "), r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["serve"], ["maintain", "retention"], ["demo"], ["zookeeper", "start"]])
def test_a_connection_option_before_a_command_that_uses_none_is_refused(tmp_path: Path, command: list[str]) -> None:
    r = logstore(tmp_path, "--root", str(tmp_path), "--server", "127.0.0.1:9", *command)
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith(f"INVALID_CONFIG: --server is not an option of 'logstore {command[0]}"), r.stderr
    r = logstore(tmp_path, "--root", str(tmp_path), *command, "--server", "127.0.0.1:9")
    assert r.returncode == 2 and "unrecognized arguments: --server" in r.stderr, r.stderr
