"""A real Azure Blob server for the object-storage tests: Azurite (npm ``azurite``, installed by ``make setup``)
on 127.0.0.1, one per test run, Blob service only.

``azurite_server`` starts it (and stops it at the end of the run) and points the ``AZURE_STORAGE_*`` variables of
this process — and so of the ``logstore serve`` processes the tests start — at it, as delta-rs reads them
(``AZURE_STORAGE_USE_EMULATOR=true``, ``AZURITE_BLOB_STORAGE_URL``); ``az_root`` gives each test a container of its
own and returns ``az://<container>/data``. Nothing here mocks the client: azure-storage-blob, pyarrow and delta-rs
talk HTTP to the server.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.storage.blob import BlobServiceClient

from logstore.storage._azure import EMULATOR_ACCOUNT, EMULATOR_KEY
from tests.support.emulators import behind_lossy_proxy, in_empty_cwd, serving, start_emulator
from tests.support.lossy_proxy import LossyProxy
from tests.support.server import free_port

AZURITE = Path(__file__).resolve().parents[2] / "node_modules" / ".bin" / "azurite-blob"
_FLAGS = ["--skipApiVersionCheck", "--loose", "--silent"]
"""Any client API version (delta-rs and pyarrow may send a newer one than this Azurite knows); no access log."""
_VARS = [
    "AZURE_STORAGE_USE_EMULATOR",
    "AZURITE_BLOB_STORAGE_URL",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ENDPOINT",
]


def start_azurite(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Azurite's Blob service on a free loopback port, once it answers; (process, blob service URL)."""
    if not AZURITE.exists():
        raise RuntimeError(f"{AZURITE} is missing: `make setup` installs Azurite (package.json's devDependencies)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(data_dir), *_FLAGS]
    return start_emulator("azurite", argv, data_dir / f"azurite-{port}.log", f"{url}/{EMULATOR_ACCOUNT}?comp=list"), url


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Azurite for the whole run; its Blob URL, also in ``AZURITE_BLOB_STORAGE_URL`` while it runs."""
    proc, url = start_azurite(tmp_path_factory.mktemp("azurite"))
    with serving(proc, {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": url}, unset=_VARS):
        yield url


def service(url: str) -> BlobServiceClient:
    """A client of the Azurite at ``url`` (its Blob URL), with the emulator's account."""
    return BlobServiceClient(
        f"{url}/{EMULATOR_ACCOUNT}", credential={"account_name": EMULATOR_ACCOUNT, "account_key": EMULATOR_KEY}
    )


def create_container(url: str, name: str) -> None:
    """Create container ``name`` on the Azurite at ``url``."""
    service(url).create_container(name)


def blob_names(root: str) -> list[str]:
    """Every blob name under ``az://container/prefix`` on the Azurite of this run, read without logstore."""
    container, _, prefix = root.removeprefix("az://").partition("/")
    found = service(os.environ["AZURITE_BLOB_STORAGE_URL"]).get_container_client(container)
    return [b.name for b in found.list_blobs(name_starts_with=prefix)]


@pytest.fixture
def az_container(azurite_server: str) -> str:
    """A new, empty container."""
    name = f"logstore-{uuid.uuid4().hex[:12]}"
    create_container(azurite_server, name)
    return name


@pytest.fixture
def az_root(az_container: str) -> str:
    """``logstore.root`` in a new container: ``az://<container>/data``."""
    return f"az://{az_container}/data"


@pytest.fixture
def az_object_root(az_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``az_root`` for a test that runs in an empty working directory (so do the nodes it starts); the test fails
    if a local folder named after the URI appears there (:func:`~tests.support.emulators.in_empty_cwd`)."""
    yield from in_empty_cwd(az_root, tmp_path, monkeypatch)


@pytest.fixture
def lossy_az_root(
    az_container: str, azurite_server: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, LossyProxy]]:
    """``az://<container>/data`` reached through a :class:`LossyProxy` to Azurite; (root, proxy).

    ``AZURITE_BLOB_STORAGE_URL`` points at the proxy for the test (the container is new, so the storage built for
    it talks to the proxy); add :class:`~tests.support.lossy_proxy.Rule` s to ``proxy.rules`` to lose replies.
    """
    yield from behind_lossy_proxy(f"az://{az_container}/data", azurite_server, "AZURITE_BLOB_STORAGE_URL", monkeypatch)
