"""/v1/metadata: the cluster's nodes, its controller and every partition's leader (docs/design.md §8).

Clients route by it: the Python Producer sends a partition's records to its
leader, ``logstore cluster status`` and the console show it. Kafka's Metadata
request, over HTTP: it needs DESCRIBE on the cluster, and lists only the
topics the caller may DESCRIBE.

In embedded mode (no ``zookeeper.connect``) the answer is a one-node cluster:
this node, id 0, at the URL the request reached it by, controller and leader
of everything at epoch 0.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from ingest_api.deps import AccessDep, BrokerDep, requires
from logstore.security import Operation, Resource, ResourceType

router = APIRouter(prefix="/v1/metadata", tags=["cluster"])


class NodeOut(BaseModel):
    node_id: int
    url: str = Field(description="base URL of the node's HTTP API")


class PartitionLeader(BaseModel):
    partition: int
    leader: int = Field(description="node id of the partition's leader, the only node that commits it; -1 = none live")
    leader_epoch: int = Field(description="bumped on every change of leader")


class TopicLeaders(BaseModel):
    name: str
    topic_id: str | None = Field(
        default=None,
        description="the topic's ID (Kafka's, 22 characters): a topic deleted and created again has a new one; "
        "null for a topic created before IDs existed",
    )
    partitions: list[PartitionLeader] = Field(description="by partition number")


class Metadata(BaseModel):
    controller: int | None = Field(description="the controller's node id; null while an election is under way")
    controller_epoch: int
    nodes: list[NodeOut] = Field(description="live nodes, by id")
    topics: list[TopicLeaders] = Field(description="topics the caller may DESCRIBE, by name")


@router.get("", response_model=Metadata, dependencies=[requires(Operation.DESCRIBE, ResourceType.CLUSTER)])
async def metadata(
    request: Request,
    broker: BrokerDep,
    access: AccessDep,
    topic: Annotated[
        list[str] | None, Query(description="only these topics (repeat the parameter); default: all")
    ] = None,
) -> Metadata:
    """Nodes, controller, and the leader and leader epoch of every partition the caller may DESCRIBE.

    Topics that do not exist, or that the caller may not DESCRIBE, are left out.
    """
    self_url = str(request.base_url).rstrip("/")
    cluster = await run_in_threadpool(broker.cluster_metadata, self_url)
    wanted = set(topic) if topic is not None else None
    by_topic: dict[str, list[PartitionLeader]] = defaultdict(list)
    for (name, partition), state in cluster.partitions.items():
        if wanted is None or name in wanted:
            by_topic[name].append(
                PartitionLeader(partition=partition, leader=state.leader, leader_epoch=state.leader_epoch)
            )
    return Metadata(
        controller=cluster.controller,
        controller_epoch=cluster.controller_epoch,
        nodes=[NodeOut(node_id=n.node_id, url=n.url) for n in sorted(cluster.nodes, key=lambda n: n.node_id)],
        topics=[
            TopicLeaders(
                name=name, topic_id=cluster.topic_ids.get(name), partitions=sorted(parts, key=lambda p: p.partition)
            )
            for name, parts in sorted(by_topic.items())
            if access.may(Operation.DESCRIBE, Resource.topic(name))
        ],
    )
