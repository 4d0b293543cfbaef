"""Looking into a topic's log: the offset for a timestamp (Kafka's ListOffsets) and the maintenance history.

Both need DESCRIBE on the topic, as Kafka's ListOffsets and DescribeConfigs do.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from ingest_api.deps import BrokerDep, requires
from ingest_api.models import INT64_MAX
from logstore.errors import UnknownTopicOrPartitionError
from logstore.log.reader import offset_for_timestamp
from logstore.security import Operation, ResourceType
from logstore.store import LogStore

router = APIRouter(prefix="/v1/topics", tags=["topics"])

MAINTENANCE_METADATA = "logstore.maintenance"
"""The commitInfo key under which maintenance jobs describe their commits (operation, files removed and added)."""

HISTORY_SCAN = 1000
"""Delta commits read, newest first, when looking for maintenance: older maintenance is not listed."""


class OffsetForTime(BaseModel):
    partition: int
    timestamp: int
    """The timestamp asked for, Unix milliseconds."""
    offset: int
    """The first offset whose record timestamp is at or after ``timestamp``; the high watermark when none is."""


class MaintenanceEntry(BaseModel):
    version: int
    """The Delta table version of the commit."""
    time_ms: int
    operation: str
    """retention, segment-compaction, key-compaction, vacuum-start or vacuum-end."""
    files_removed: int
    files_added: int


class MaintenanceHistory(BaseModel):
    topic: str
    operations: list[MaintenanceEntry]
    """Newest first."""


@router.get(
    "/{topic}/partitions/{partition}/offsets",
    response_model=OffsetForTime,
    dependencies=[requires(Operation.DESCRIBE, ResourceType.TOPIC, "topic")],
)
async def offset_for_time(
    topic: str,
    partition: Annotated[int, Path(ge=0, le=2**31 - 1)],
    broker: BrokerDep,
    timestamp: Annotated[int, Query(ge=0, le=INT64_MAX // 1000, description="Unix milliseconds")],
) -> OffsetForTime:
    """Kafka's ListOffsets by timestamp: the first offset at or after ``timestamp`` in the partition.

    Raises:
        UnknownTopicOrPartitionError: no such topic or partition.
    """
    offset = await run_in_threadpool(_offset_for_time, broker.store, topic, partition, timestamp)
    return OffsetForTime(partition=partition, timestamp=timestamp, offset=offset)


def _offset_for_time(store: LogStore, topic: str, partition: int, timestamp: int) -> int:
    count, _ = store.catalog.topic_config(topic)
    if partition >= count:
        raise UnknownTopicOrPartitionError(f"topic '{topic}' has {count} partitions, no partition {partition}")
    reader = store.reader(topic)
    reader.refresh()
    return offset_for_timestamp(reader.partition_view(partition), timestamp)


@router.get(
    "/{topic}/maintenance",
    response_model=MaintenanceHistory,
    dependencies=[requires(Operation.DESCRIBE, ResourceType.TOPIC, "topic")],
)
async def maintenance_history(
    topic: str, broker: BrokerDep, limit: Annotated[int, Query(ge=1, le=HISTORY_SCAN)] = 50
) -> MaintenanceHistory:
    """Retention, compaction and vacuum commits of the topic's Delta log, newest first, from its last 1000 commits.

    Raises:
        UnknownTopicOrPartitionError: no such topic.
    """
    history = await run_in_threadpool(lambda: broker.store.catalog.table(topic).history(HISTORY_SCAN))
    out = []
    for info in history:
        entry = _maintenance_entry(info)
        if entry is not None:
            out.append(entry)
            if len(out) == limit:
                break
    return MaintenanceHistory(topic=topic, operations=out)


def _maintenance_entry(info: dict[str, Any]) -> MaintenanceEntry | None:
    """The maintenance a commit made, or None for produce appends, config changes and the like."""
    version, time_ms = int(info.get("version", -1)), int(info.get("timestamp", 0))
    meta = info.get(MAINTENANCE_METADATA)
    if isinstance(meta, dict):
        return MaintenanceEntry(
            version=version,
            time_ms=time_ms,
            operation=str(meta.get("operation", "maintenance")),
            files_removed=int(meta.get("removed", 0)),
            files_added=int(meta.get("added", 0)),
        )
    operation = str(info.get("operation", ""))
    if operation.startswith("VACUUM"):
        metrics = info.get("operationMetrics") or {}
        removed = metrics.get("numDeletedFiles", metrics.get("numFilesToDelete", 0))
        return MaintenanceEntry(
            version=version,
            time_ms=time_ms,
            operation=operation.lower().replace(" ", "-"),
            files_removed=int(removed or 0),
            files_added=0,
        )
    return None
