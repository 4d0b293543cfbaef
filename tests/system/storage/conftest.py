"""Fixtures of the system tier's storage tests: the crash tests of tests/system on an ``s3://`` root (moto's S3
server, started once per run on 127.0.0.1); ``server`` starts ``logstore serve`` there."""

from __future__ import annotations

import pytest

from tests.support.s3 import object_root as object_root
from tests.support.s3 import s3_bucket as s3_bucket
from tests.support.s3 import s3_root as s3_root
from tests.support.s3 import s3_server as s3_server
from tests.support.s3 import server_on_root as server_on_root


@pytest.fixture
def root(object_root: str) -> str:
    """A new bucket's ``s3://<bucket>/data``."""
    return object_root
