"""Fixtures of the system tier: a real ``logstore serve`` over loopback (``server``), killed with SIGKILL by the
crash tests; ZooKeeper and cluster nodes are in tests/system/cluster/conftest.py, the SparkSession is the run's
one, from tests/conftest.py."""

from __future__ import annotations

from tests.support.server import server as server  # the fixture, shared with the other tier
