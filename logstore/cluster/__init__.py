"""Cluster mode: ingest nodes coordinated through Apache ZooKeeper (DESIGN §8).

:class:`ZooKeeperCoordinator` registers a node, elects the one controller and
keeps partition leaders (with their epochs) placed on live nodes;
:func:`place_leaders` is the placement rule; :class:`ZooKeeperServer` runs the
real ZooKeeper server from the project's jar cache. Embedded mode (empty
``zookeeper.connect``) needs none of it.
"""

from logstore.cluster.coordinator import ClusterMetadata, NodeInfo, ZooKeeperCoordinator, split_connect
from logstore.cluster.placement import PartitionState, Placement, group_coordinator, place_leaders
from logstore.cluster.zkserver import ZooKeeperServer

__all__ = [
    "ClusterMetadata",
    "NodeInfo",
    "PartitionState",
    "Placement",
    "ZooKeeperCoordinator",
    "ZooKeeperServer",
    "group_coordinator",
    "place_leaders",
    "split_connect",
]
