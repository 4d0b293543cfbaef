"""Group leases (one live reader per group and topic) on both roots: the unit tier's lease tests, run over a
local directory and an S3 bucket, where taking a generation is a put-if-absent (``If-None-Match: *``)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from tests.unit.groups import test_leases as unit


def test_lease_of_a_crashed_reader_expires(root: str) -> None:
    unit.test_lease_of_a_crashed_reader_expires(cast(Path, root))  # the unit test only takes str() of its root


@pytest.mark.parametrize("previous", ["none", "expired", "released"])
def test_exactly_one_of_many_racing_threads_takes_a_lease(root: str, previous: str) -> None:
    unit.test_exactly_one_of_many_racing_threads_takes_a_lease(cast(Path, root), previous)
