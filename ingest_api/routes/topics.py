"""/v1/topics: create, list, describe, alter, delete."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from ingest_api.deps import AccessDep, BrokerDep, requires
from ingest_api.models import AlterTopic, CreateTopic, TopicList, TopicOut
from logstore.security import Operation, Resource, ResourceType
from logstore.storage import absolute
from logstore.structs import TopicInfo

router = APIRouter(prefix="/v1/topics", tags=["topics"])


def topic_out(info: TopicInfo, root: str) -> TopicOut:
    """A topic as every answer shows it; ``root`` is the node's ``logstore.root`` made absolute."""
    return TopicOut.model_validate(
        {
            "name": info.name,
            "root": absolute(root),
            "topic_id": info.topic_id,
            "partitions": [
                {
                    "partition": p.partition,
                    "log_start_offset": p.log_start_offset,
                    "high_watermark": p.high_watermark,
                    "size_bytes": p.size_bytes,
                    "num_files": p.num_files,
                    "num_records": p.num_records,
                }
                for p in info.partitions
            ],
            "config": info.config.to_dict(),
        }
    )


@router.post("", status_code=201, response_model=TopicOut)
async def create_topic(body: CreateTopic, broker: BrokerDep, access: AccessDep) -> TopicOut:
    """Kafka's CreateTopics: CREATE on the topic or on the cluster."""
    access.require(Operation.CREATE, Resource.topic(body.name), Resource.cluster())
    info = await run_in_threadpool(broker.store.create_topic, body.name, body.partitions, body.config)
    await run_in_threadpool(broker.reconfigure, body.name)  # cluster mode: the controller gives it leaders
    return topic_out(info, broker.config.root)


@router.get("", response_model=TopicList)
async def list_topics(broker: BrokerDep, access: AccessDep) -> TopicList:
    """Kafka's Metadata: every authenticated caller may ask; only topics it may DESCRIBE are listed."""
    names = await run_in_threadpool(broker.store.list_topics)
    return TopicList(topics=[n for n in names if access.may(Operation.DESCRIBE, Resource.topic(n))])


@router.get(
    "/{topic}", response_model=TopicOut, dependencies=[requires(Operation.DESCRIBE, ResourceType.TOPIC, "topic")]
)
async def describe_topic(topic: str, broker: BrokerDep) -> TopicOut:
    return topic_out(await run_in_threadpool(broker.store.describe_topic, topic), broker.config.root)


@router.patch(
    "/{topic}", response_model=TopicOut, dependencies=[requires(Operation.ALTER, ResourceType.TOPIC, "topic")]
)
async def alter_topic(topic: str, body: AlterTopic, broker: BrokerDep) -> TopicOut:
    info = await run_in_threadpool(
        lambda: broker.store.catalog.alter_topic(topic, config=body.config, partitions=body.partitions)
    )
    await run_in_threadpool(broker.reconfigure, topic)
    return topic_out(info, broker.config.root)


@router.delete("/{topic}", status_code=204, dependencies=[requires(Operation.DELETE, ResourceType.TOPIC, "topic")])
async def delete_topic(topic: str, broker: BrokerDep) -> Response:
    await run_in_threadpool(broker.forget, topic)
    await run_in_threadpool(broker.store.delete_topic, topic)  # its group offsets too
    return Response(status_code=204)
