"""The ZooKeeper security store (cluster mode) with no ZooKeeper to reach: a storage error, not kazoo's own timeout."""

from __future__ import annotations

import pytest

from logstore.cluster.security_store import ZooKeeperSecurityStore
from logstore.errors import KafkaStorageError
from tests.support.server import free_port


def test_an_unreachable_zookeeper_is_a_storage_error_not_kazoos_timeout() -> None:
    # nothing listens on the port: kazoo's connect times out with its own exception class, not a KazooException
    with pytest.raises(KafkaStorageError, match="cannot reach ZooKeeper"):
        ZooKeeperSecurityStore(f"127.0.0.1:{free_port()}/t", timeout_s=0.5)
