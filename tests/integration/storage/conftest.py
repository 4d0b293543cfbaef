"""The storage tests run each guarantee over both forms of ``logstore.root``: a local directory and an
``s3://`` bucket on a real S3 server (moto's, started once per run on 127.0.0.1).

``config`` here shadows the one of tests/conftest.py with a parametrised one, so the ``store`` and
``make_topic`` fixtures — and the tests of other tiers imported into these modules — run on both roots.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logstore.config import LogstoreConfig, load_config
from tests.support.s3 import s3_bucket as s3_bucket
from tests.support.s3 import s3_root as s3_root
from tests.support.s3 import s3_server as s3_server
from tests.support.server import Server, started_servers


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh, empty ``logstore.root``: a directory, or a new bucket's ``s3://<bucket>/data``.

    An s3 test runs in an empty working directory (so do the nodes it starts), and fails if a folder named after
    the URI appeared there: a URI taken for a local path would pass every test while writing nothing to S3.
    """
    if request.param == "local":
        yield str(tmp_path / "data")
        return
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    yield str(request.getfixturevalue("s3_root"))
    assert not (cwd / "s3:").exists(), "the store wrote to a local folder named after the s3:// URI"


@pytest.fixture
def config(root: str) -> LogstoreConfig:
    """Defaults over ``root`` (no config file, no LOGSTORE_* variables)."""
    return load_config(environ={}, path=None, overrides={"logstore.root": root})


@pytest.fixture
def server(root: str, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``logstore serve`` on ``root`` (the integration tier's fixture, on this folder's roots)."""

    def new(on: str | None = None, **config: object) -> Server:
        return Server(on or root, log_dir=tmp_path, **config)

    yield from started_servers(new)
