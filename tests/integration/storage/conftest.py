"""The storage tests run each guarantee over every form of ``logstore.root``: a local directory, an ``s3://``
bucket on a real S3 server (moto's) and an ``az://`` container on a real Azure Blob server (Azurite), each
started once per run on 127.0.0.1.

``config`` here shadows the one of tests/conftest.py with a parametrised one, so the ``store`` and
``make_topic`` fixtures — and the tests of other tiers imported into these modules — run on every root.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logstore.config import LogstoreConfig, load_config
from tests.support.azurite import az_container as az_container
from tests.support.azurite import az_object_root as az_object_root
from tests.support.azurite import az_root as az_root
from tests.support.azurite import lossy_az_root as lossy_az_root
from tests.support.lossy_proxy import LossyProxy
from tests.support.s3 import lossy_s3_root as lossy_s3_root
from tests.support.s3 import object_root as object_root
from tests.support.s3 import s3_bucket as s3_bucket
from tests.support.s3 import s3_root as s3_root
from tests.support.s3 import server_on_root as server_on_root


@pytest.fixture(params=["local", "s3", "az"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty ``logstore.root``: a directory, a new bucket's ``s3://<bucket>/data`` (``object_root``) or a
    new container's ``az://<container>/data`` (``az_object_root``)."""
    if request.param == "local":
        return str(tmp_path / "data")
    if request.param == "az":
        return str(request.getfixturevalue("az_object_root"))
    return str(request.getfixturevalue("object_root"))


@pytest.fixture
def config(root: str) -> LogstoreConfig:
    """Defaults over ``root`` (no config file, no LOGSTORE_* variables)."""
    return load_config(environ={}, path=None, overrides={"logstore.root": root})


@pytest.fixture(params=["s3", "az"])
def lossy_root(request: pytest.FixtureRequest) -> tuple[str, LossyProxy]:
    """A new object-store root reached through a proxy that loses chosen replies (``lossy_s3_root``,
    ``lossy_az_root``); (root, proxy)."""
    return tuple(request.getfixturevalue(f"lossy_{request.param}_root"))  # type: ignore[return-value]
