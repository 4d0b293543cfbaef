"""The storage tests run each guarantee over both forms of ``logstore.root``: a local directory and an
``s3://`` bucket on a real S3 server (moto's, started once per run on 127.0.0.1).

``config`` here shadows the one of tests/conftest.py with a parametrised one, so the ``store`` and
``make_topic`` fixtures — and the tests of other tiers imported into these modules — run on both roots.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logstore.config import LogstoreConfig, load_config
from tests.support.s3 import object_root as object_root
from tests.support.s3 import s3_bucket as s3_bucket
from tests.support.s3 import s3_root as s3_root
from tests.support.s3 import s3_server as s3_server
from tests.support.s3 import server_on_root as server_on_root


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty ``logstore.root``: a directory, or a new bucket's ``s3://<bucket>/data`` (``object_root``)."""
    if request.param == "local":
        return str(tmp_path / "data")
    return str(request.getfixturevalue("object_root"))


@pytest.fixture
def config(root: str) -> LogstoreConfig:
    """Defaults over ``root`` (no config file, no LOGSTORE_* variables)."""
    return load_config(environ={}, path=None, overrides={"logstore.root": root})
