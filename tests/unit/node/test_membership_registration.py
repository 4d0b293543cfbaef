"""A cluster node accepts produce only with its ZooKeeper session up *and* itself registered in it.

After a lost session the node registers again only once its acks=1 promises are answered (docs/cluster.md,
failover); until then neither produce nor the acks=1 lease may come back, whatever order the session's events
(``connected``, ``suspended``) and the registration's (``registered``) arrive in. Here the events are given to
the membership directly, as its ZooKeeper controller gives them, and no ZooKeeper is started.
"""

from __future__ import annotations

import dataclasses
import time

from logstore.config import LogstoreConfig
from logstore.node.membership import ClusterMembership


def _membership(config: LogstoreConfig, calls: list[bool]) -> ClusterMembership:
    clustered = dataclasses.replace(config, zookeeper_connect="127.0.0.1:1", node_id=1)
    return ClusterMembership(clustered, on_change=lambda _meta: None, on_session=calls.append)


def test_produce_comes_back_only_with_both_the_session_and_the_registration(config: LogstoreConfig) -> None:
    calls: list[bool] = []
    m = _membership(config, calls)
    for event in ("lost", "connected", "suspended", "registered", "connected"):
        m._session_changed(event)
    # lost; a new session but not registered; suspended; registered while suspended; connected again
    assert calls == [False, False, False, False, True]
    m._session_changed("suspended")  # the same session back: still registered in it
    m._session_changed("connected")
    assert calls[-2:] == [False, True]


def test_the_lease_does_not_hold_while_the_node_is_not_registered_again(config: LogstoreConfig) -> None:
    m = _membership(config, [])
    m._session_changed("lost")
    m._session_changed("connected")
    m._lease_from = time.monotonic()  # a round trip of the new session just came back
    assert not m.lease_valid()  # was valid: promises answered while a new leader may skip this node's frames
    m._session_changed("registered")
    assert m.lease_valid()
