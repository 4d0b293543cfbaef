"""Fixtures of the integration tier: a real ``logstore serve`` over loopback (``server``); the SparkSession is
the run's one, from tests/conftest.py."""

from __future__ import annotations

from tests.support.server import server as server  # the fixture, shared with the other tier
