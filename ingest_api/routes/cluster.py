"""/v1/cluster: operations on the cluster as a whole — a preferred-leader election (docs/cluster.md).

Kafka's ElectLeaders (``kafka-leader-election --election-type preferred``),
over HTTP: it needs ALTER on the cluster. Any node takes it: it writes the
request for the controller, which hands each partition that is not on its
preferred leader over to it (:mod:`logstore.cluster.rebalance`), and answers
once the leaders settled or ``timeout_ms`` passed.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from ingest_api.deps import BrokerDep, requires
from logstore.cluster.placement import Placement
from logstore.node.leader_election import elect_preferred_leaders
from logstore.security import Operation, ResourceType

router = APIRouter(prefix="/v1/cluster", tags=["cluster"])


class TopicPartitionIn(BaseModel):
    topic: str
    partition: int | None = Field(default=None, ge=0, description="one partition; null = every partition of the topic")


class ElectLeadersIn(BaseModel):
    partitions: list[TopicPartitionIn] | None = Field(
        default=None, description="the partitions to elect; null = every partition of every topic"
    )


class ElectionOut(BaseModel):
    topic: str
    partition: int
    leader: int = Field(description="its leader when the answer was made; -1 = none")
    preferred: int = Field(description="its preferred leader among the live nodes; -1 = none")
    error: str | None = Field(
        description="null: moved to its preferred leader; ELECTION_NOT_NEEDED: it was there already; "
        "PREFERRED_LEADER_NOT_AVAILABLE; UNKNOWN_TOPIC_OR_PARTITION; REQUEST_TIMED_OUT: not moved by the deadline"
    )


class ElectLeadersOut(BaseModel):
    partitions: list[ElectionOut] = Field(description="by topic and partition")


@router.post(
    "/elect-leaders",
    response_model=ElectLeadersOut,
    dependencies=[requires(Operation.ALTER, ResourceType.CLUSTER)],
)
async def elect_leaders(
    broker: BrokerDep,
    body: ElectLeadersIn | None = None,
    timeout_ms: Annotated[int, Query(ge=0, le=600_000, description="how long to wait for the hand-overs")] = 30_000,
) -> ElectLeadersOut:
    """Move partitions to their preferred leaders (a balanced placement over the live nodes), as Kafka's ElectLeaders.

    Each partition not on its preferred leader is handed over by its live
    leader after it committed everything it accepted: nothing acknowledged is
    lost, and producers meet ``NOT_LEADER_OR_FOLLOWER`` (retriable) for the
    moment of the move. Embedded mode: one node leads everything, no election is needed.
    """
    meta = await run_in_threadpool(broker.cluster_metadata)
    wanted: list[tuple[str, int]] | None = None
    if body is not None and body.partitions is not None:
        wanted = []
        for item in body.partitions:
            if item.partition is not None:
                wanted.append((item.topic, item.partition))
            else:
                of_topic = sorted(tp for tp in meta.partitions if tp[0] == item.topic)
                wanted += of_topic or [(item.topic, 0)]  # an unknown topic answers UNKNOWN_TOPIC_OR_PARTITION
    placement: Placement = "topic" if broker.config.leader_placement == "topic" else "partition"
    results = await run_in_threadpool(
        elect_preferred_leaders, broker.cluster, meta, placement, wanted, timeout_s=timeout_ms / 1000
    )
    return ElectLeadersOut(
        partitions=[
            ElectionOut(topic=r.topic, partition=r.partition, leader=r.leader, preferred=r.preferred, error=r.error)
            for r in results
        ]
    )
