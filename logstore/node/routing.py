"""Cluster mode: a produce request's records grouped by the node that leads their partitions.

The receiving node (:meth:`~logstore.node.broker.Broker.route`) chooses every
record's partition, then splits the request into one :class:`Share` per
leader: its own share it appends, the others' it forwards. Each share is
atomic at its leader; an idempotent request's shares all carry its
``(producer_id, sequence)``, which each leader checks per partition.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from logstore.cluster import ClusterMetadata, NodeInfo
from logstore.errors import NotLeaderOrFollowerError
from logstore.wire.json_produce import ParsedRecords

__all__ = ["Share", "shares_by_leader"]


@dataclasses.dataclass(frozen=True)
class Share:
    """The records of one produce request that one node leads (cluster mode)."""

    leader: NodeInfo | None
    """The node to forward them to; None = this node."""
    index: np.ndarray
    """Their positions in the request."""
    parsed: ParsedRecords
    """Those records, each with its partition set."""


def _subset(parsed: ParsedRecords, index: np.ndarray, parts: np.ndarray) -> ParsedRecords:
    chosen = pa.array(parts[index], pa.int32())
    if len(index) == len(parsed):
        return dataclasses.replace(parsed, partitions=chosen)
    take = pa.array(index)
    return dataclasses.replace(
        parsed,
        keys=parsed.keys.take(take),
        values=parsed.values.take(take),
        headers=parsed.headers.take(take),
        timestamps=parsed.timestamps.take(take),
        partitions=chosen,
    )


def shares_by_leader(
    topic: str, parsed: ParsedRecords, parts: np.ndarray, meta: ClusterMetadata, me: int
) -> list[Share]:
    """``parsed`` (whose records go to ``parts``) as one share per leading node, in node id order.

    Raises:
        NotLeaderOrFollowerError: a partition has no live leader yet (retriable).
    """
    by_leader: dict[int, list[int]] = {}
    for p in np.unique(parts).tolist():
        state = meta.leader(topic, p)
        if state is None or state.leader < 0 or (state.leader != me and meta.node(state.leader) is None):
            raise NotLeaderOrFollowerError(f"partition {p} of topic '{topic}' has no live leader yet; retry")
        by_leader.setdefault(state.leader, []).append(p)
    shares = []
    for leader, leader_parts in sorted(by_leader.items()):
        index = np.flatnonzero(np.isin(parts, leader_parts))
        node = None if leader == me else meta.node(leader)
        shares.append(Share(node, index, _subset(parsed, index, parts)))
    return shares
