"""Cluster mode: ingest nodes coordinated through Apache ZooKeeper (docs/design.md §8).

:class:`ZooKeeperController` registers a node, elects the one controller and
keeps partition leaders (with their epochs) placed on live nodes;
:func:`place_leaders` is the placement rule, :func:`preferred_leaders` where each
partition should be (:mod:`logstore.cluster.rebalance` moves partitions back there), and :func:`group_coordinator`
chooses each consumer group's coordinator node; :class:`ZooKeeperServer` runs the
real ZooKeeper server from the project's jar cache; :func:`ensure_chroot`
creates the chroot every client of the cluster connects under.
:func:`open_security_store` opens the keys, ACLs and quotas of a config (in
ZooKeeper in cluster mode). Embedded mode (empty ``zookeeper.connect``) needs
none of the rest.
"""

from logstore.cluster.connect import ensure_chroot, split_connect
from logstore.cluster.controller import (
    FAILOVER_LOCKS,
    ClusterMetadata,
    NodeInfo,
    ZooKeeperController,
)
from logstore.cluster.placement import PartitionState, Placement, group_coordinator, place_leaders, preferred_leaders
from logstore.cluster.security_store import ZooKeeperSecurityStore, open_security_store
from logstore.cluster.zookeeper_server import ZooKeeperServer

__all__ = [
    "FAILOVER_LOCKS",
    "ClusterMetadata",
    "NodeInfo",
    "PartitionState",
    "Placement",
    "ZooKeeperController",
    "ZooKeeperSecurityStore",
    "ZooKeeperServer",
    "ensure_chroot",
    "group_coordinator",
    "open_security_store",
    "place_leaders",
    "preferred_leaders",
    "split_connect",
]
