"""Fixtures of the system tier's storage tests: the crash tests of tests/system on an ``s3://`` root (moto's S3
server) and an ``az://`` root (Azurite), each started once per run on 127.0.0.1; ``server`` starts
``logstore serve`` there."""

from __future__ import annotations

import pytest

from tests.support.azurite import az_container as az_container
from tests.support.azurite import az_object_root as az_object_root
from tests.support.azurite import az_root as az_root
from tests.support.s3 import object_root as object_root
from tests.support.s3 import s3_bucket as s3_bucket
from tests.support.s3 import s3_root as s3_root
from tests.support.s3 import server_on_root as server_on_root


@pytest.fixture(params=["s3", "az"])
def root(request: pytest.FixtureRequest) -> str:
    """A new bucket's ``s3://<bucket>/data`` or a new container's ``az://<container>/data``."""
    return str(request.getfixturevalue("object_root" if request.param == "s3" else "az_object_root"))
