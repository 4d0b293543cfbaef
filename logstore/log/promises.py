"""acks=1 promises that outlive their node: markers in the table, replay by the next writer.

An ingest node answers acks=1 requests with offsets before the records are in
Delta (they are in its write-ahead log, WAL). It makes such promises only
while it holds the table's writer lock (see ``logstore.node.broker``), and for
that time it leaves a marker, ``<table>/_logstore_promises/<node id>.json``,
naming its WAL directory. It deletes the marker when it lets go of the lock,
after committing everything it promised.

A marker found by a writer that has just taken the writer lock therefore
belongs to a node that died holding promises (kill -9, power loss). Before
that writer commits anything, :func:`settle` takes the dead node's WAL
directory (its :class:`~logstore.log.wal.DirectoryLock`, free once the node is
gone) and replays the node's frames of this topic in frame order through the
writer's idempotent path — exactly what the node itself does on restart — so
the promised records land at their promised offsets. The frames stay in the
node's WAL: when it restarts, its own replay finds them committed and writes
nothing twice.

Runs in the writer's process, under the writer lock; a marker whose node is
alive (its WAL directory lock is held) is left to that node.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import orjson

from logstore.common.fsync import fsync_path
from logstore.errors import KafkaStorageError, LogstoreError
from logstore.log.wal import DirectoryLock, WriteAheadLog
from logstore.storage import absolute, is_object_store, join, storage_for
from logstore.structs import AppendResult, ProducerBatch

__all__ = [
    "Replayer",
    "frame_header",
    "of_other_incarnation",
    "remove_marker",
    "replay_batches",
    "settle",
    "wal_producer_id",
    "write_marker",
]

log = logging.getLogger("logstore.log.promises")

_MARKERS = "_logstore_promises"
_REPLAY_CHUNK = 1000


class Replayer(Protocol):
    """What :func:`settle` needs of a topic's writer (:class:`~logstore.log.writer.TopicWriter` is one)."""

    @property
    def topic(self) -> str: ...

    @property
    def topic_id(self) -> str | None:
        """The ID of the topic the writer writes (None: created before topic IDs)."""
        ...

    def landed(self, batch: ProducerBatch) -> bool:
        """Whether an idempotent batch is committed on every partition its records go to."""
        ...

    def append_held(self, batches: Sequence[ProducerBatch]) -> list[AppendResult | LogstoreError]:
        """Commit ``batches`` idempotently (the caller holds the writer lock)."""
        ...


def wal_producer_id(node_id: str) -> str:
    """The producer id a node's WAL gives batches that came without one (replay dedupes by it)."""
    return f"__wal.{node_id}"


def frame_header(producer_id: str | None, sequence: int | None, topic_id: str | None) -> dict[str, object]:
    """A write-ahead log frame's header: the batch's idempotence key and the topic incarnation it was accepted for."""
    return {"producer_id": producer_id, "sequence": sequence, "topic_id": topic_id}


def of_other_incarnation(header: Mapping[str, object], topic_id: str | None) -> bool:
    """Whether a logged frame was accepted for an earlier topic of the same name (deleted, then created again).

    Such a frame is never replayed: its records belong to a topic that no longer exists. A frame logged
    before frames carried the topic's ID (no ``topic_id`` key) counts as this topic's.
    """
    return "topic_id" in header and header["topic_id"] != topic_id


def write_marker(table_root: str, node_id: str, wal_dir: str) -> None:
    """Record (durably) that ``node_id`` may hold acks=1 promises on this table, logged in ``wal_dir``."""
    info = {"node_id": node_id, "wal_dir": absolute(wal_dir), "pid": os.getpid(), "host": socket.gethostname()}
    storage_for(table_root).put(join(table_root, _MARKERS, f"{node_id}.json"), orjson.dumps(info))


def remove_marker(table_root: str, node_id: str) -> None:
    """``node_id`` holds no promises on this table any more (all of them are committed)."""
    storage = storage_for(table_root)
    storage.delete(join(table_root, _MARKERS, f"{node_id}.json"))
    if not is_object_store(table_root):
        with contextlib.suppress(FileNotFoundError):
            fsync_path(os.path.join(table_root, _MARKERS))


def settle(writer: Replayer, table_root: str, *, own_node: str | None = None) -> None:
    """Replay the promised records of every dead node with a marker on this table (caller holds the writer lock).

    Raises:
        KafkaStorageError: a dead node's WAL could not be read or replayed; nothing may be
            committed before it is (retry once the storage is back).
    """
    storage = storage_for(table_root)
    directory = join(table_root, _MARKERS)
    names = [n for n in storage.list_names(directory) if n.endswith(".json")]
    for name in names:
        node_id = name.removesuffix(".json")
        if node_id == own_node:
            continue
        try:
            info = orjson.loads(storage.read(join(directory, name)))
        except (FileNotFoundError, orjson.JSONDecodeError):
            continue  # removed meanwhile, or a torn write of a marker that never guarded anything
        wal_dir = str(info["wal_dir"])
        if not storage_for(wal_dir).exists(wal_dir):
            remove_marker(table_root, node_id)  # its WAL is gone: nothing to replay
            continue
        try:
            lock = DirectoryLock(wal_dir, "the write-ahead log directory")
        except KafkaStorageError:
            continue  # its node is alive: it commits what it promised itself
        try:
            _replay(writer, join(wal_dir, writer.topic), node_id)
            remove_marker(table_root, node_id)
        finally:
            lock.release()


def replay_batches(
    append: Callable[[Sequence[ProducerBatch]], list[AppendResult | LogstoreError]],
    batches: Sequence[ProducerBatch],
    *,
    topic: str,
    source: str,
) -> tuple[int, int]:
    """Commit another node's logged batches with ``append``, in order, ``_REPLAY_CHUNK`` per commit.

    A batch the writer answers with an error is logged (naming ``source``, the
    node whose log it came from) and skipped; the others are committed.
    Returns (records newly committed — duplicates count 0, batches skipped).

    Raises:
        LogstoreError: ``append`` raised: the table cannot be written now.
    """
    replayed = skipped = 0
    for start in range(0, len(batches), _REPLAY_CHUNK):
        chunk = batches[start : start + _REPLAY_CHUNK]
        for batch, result in zip(chunk, append(chunk), strict=True):
            if isinstance(result, AppendResult):
                replayed += 0 if result.duplicate else len(result.offsets)
                continue
            skipped += 1
            log.error(
                "topic %s: a write-ahead log frame of %s (producer %s, sequence %s) cannot be replayed: %s",
                topic,
                source,
                batch.producer_id,
                batch.sequence,
                result,
            )
    return replayed, skipped


def _replay(writer: Replayer, topic_wal: str, node_id: str) -> None:
    if not storage_for(topic_wal).exists(topic_wal):
        return
    wal = WriteAheadLog(topic_wal)
    try:
        frames = [f for f in wal.recovered() if not of_other_incarnation(f.header, writer.topic_id)]
        logged = (ProducerBatch(f.records, f.header["producer_id"], f.header["sequence"]) for f in frames)
        batches = [b for b in logged if not writer.landed(b)]
        replayed, _skipped = replay_batches(writer.append_held, batches, topic=writer.topic, source=f"node {node_id}")
        if replayed:
            log.warning("topic %s: replayed %d acks=1 records of stopped node %s", writer.topic, replayed, node_id)
    finally:
        wal.close()
