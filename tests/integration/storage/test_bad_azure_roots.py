"""An az:// root that cannot be used fails at once, with an error that names the setting or the container."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from logstore.config import load_config
from logstore.errors import KafkaStorageError
from logstore.store import LogStore
from tests.support.server import LOGSTORE


def logstore(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LOGSTORE_", "AZURE", "AZURITE"))}
    return subprocess.run([*LOGSTORE, *args], cwd=cwd, capture_output=True, text=True, env=base | env, timeout=120)


def test_a_container_that_does_not_exist_is_named(azurite_server: str, tmp_path: Path) -> None:
    config = load_config(environ={}, path=None, overrides={"logstore.root": "az://no-such-container/data"})
    with pytest.raises(KafkaStorageError, match="container 'no-such-container' does not exist") as e:
        LogStore(config)
    assert "logstore.root" in e.value.message
    env = {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": azurite_server}
    r = logstore(tmp_path, "--root", "az://no-such-container/data", "topics", "list", **env)
    assert r.returncode == 1
    assert r.stderr.startswith("KAFKA_STORAGE_ERROR: logstore.root: container 'no-such-container' does not exist")
    assert list(tmp_path.iterdir()) == []


def test_a_wrong_account_key_names_the_variables(az_container: str, azurite_server: str, tmp_path: Path) -> None:
    env = {
        "AZURE_STORAGE_USE_EMULATOR": "true",
        "AZURITE_BLOB_STORAGE_URL": azurite_server,
        "AZURE_STORAGE_ACCOUNT_KEY": "d3Jvbmcga2V5",  # base64 of "wrong key"
    }
    r = logstore(tmp_path, "--root", f"az://{az_container}/data", "topics", "list", **env)
    assert r.returncode == 1
    assert r.stderr.startswith("KAFKA_STORAGE_ERROR: logstore.root: Azure refused the credentials"), r.stderr
    assert "AZURE_STORAGE_ACCOUNT_KEY" in r.stderr


def test_a_connection_string_is_used_and_a_wrong_one_is_named(
    az_container: str, azurite_server: str, tmp_path: Path
) -> None:
    from logstore.storage._azure import EMULATOR_ACCOUNT, EMULATOR_KEY

    good = f"AccountName={EMULATOR_ACCOUNT};AccountKey={EMULATOR_KEY};BlobEndpoint={azurite_server}/{EMULATOR_ACCOUNT}"
    root = f"az://{az_container}/data"
    r = logstore(
        tmp_path, "--root", root, "topics", "create", "t", "--partitions", "1", AZURE_STORAGE_CONNECTION_STRING=good
    )
    assert r.returncode == 0, r.stderr
    r = logstore(tmp_path, "--root", root, "topics", "list", AZURE_STORAGE_CONNECTION_STRING=good)
    assert r.stdout.split() == ["TOPIC", "t"], r.stderr
    r = logstore(tmp_path, "--root", root, "topics", "list", AZURE_STORAGE_CONNECTION_STRING="AccountName=x")
    assert r.returncode == 1
    assert r.stderr.startswith("KAFKA_STORAGE_ERROR: logstore.root: AZURE_STORAGE_CONNECTION_STRING names no"), r.stderr
    assert list(tmp_path.iterdir()) == []


def test_no_credentials_and_no_server_are_named(az_container: str, tmp_path: Path) -> None:
    r = logstore(tmp_path, "--root", f"az://{az_container}/data", "topics", "list")
    assert r.returncode == 1
    assert r.stderr.startswith("KAFKA_STORAGE_ERROR: logstore.root: an az:// root needs credentials"), r.stderr
    assert "AZURE_STORAGE_ACCOUNT_NAME" in r.stderr and "AZURE_STORAGE_USE_EMULATOR" in r.stderr
    env = {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": "http://127.0.0.1:9"}
    r = logstore(tmp_path, "--root", f"az://{az_container}/data", "topics", "list", **env)
    assert r.returncode == 1
    assert r.stderr.startswith("KAFKA_STORAGE_ERROR: logstore.root: cannot reach Azure Blob Storage"), r.stderr
    assert "http://127.0.0.1:9/devstoreaccount1" in r.stderr
