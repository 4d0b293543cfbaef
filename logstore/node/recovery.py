"""Replay of a topic's write-ahead log at start-up, before its committer commits anything else.

After a crash the WAL is replayed in frame order through the idempotent
writer before this node commits anything else, and (by rule 1 of
:mod:`logstore.node.accumulator`) no other writer on this host committed in
between while the node held the lock at the crash — so replay puts every
promised acks=1 record at its promised offset. Commits by writers on other
hosts, which do not share the lock, are outside the promise.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

from logstore.common.logs import describe
from logstore.errors import LogstoreError, UnknownServerError
from logstore.log import promises
from logstore.log.wal import Frame, WriteAheadLog, read_frames
from logstore.log.writer import TopicWriter
from logstore.node.metrics import Metrics
from logstore.storage import absolute, join, storage_for
from logstore.structs import AppendResult, ProducerBatch

__all__ = ["replay", "replay_departed"]

log = logging.getLogger("logstore.ingest")

_CHUNK_FRAMES = 1000
"""Frames committed per replay commit."""


def replay(writer: TopicWriter, wal: WriteAheadLog, metrics: Metrics) -> None:
    """Commit the WAL's frames left by a previous run, in frame order (the caller holds the writer lock).

    Frames the table already holds (:meth:`TopicWriter.landed`: their sequence
    is committed on each of their partitions) are skipped. A frame that cannot be committed is
    skipped — logged and counted in ``logstore_wal_frames_skipped`` — rather
    than stopping the node from starting.

    Raises:
        LogstoreError: the table cannot be written now; every frame is kept for the next start.
    """
    frames = _of_this_topic(writer, wal.recovered(), "this node's previous run")
    if not frames:
        wal.discard_recovered()
        return
    logged = (ProducerBatch(f.records, f.header["producer_id"], f.header["sequence"]) for f in frames)
    batches = [b for b in logged if not writer.landed(b)]  # the others are in the table already
    replayed = 0
    for start in range(0, len(batches), _CHUNK_FRAMES):
        chunk = batches[start : start + _CHUNK_FRAMES]
        try:
            results = writer.append_held(chunk)
        except LogstoreError:
            raise  # the table cannot be written now: keep every frame and let start-up fail
        except Exception as e:  # a frame the writer cannot take at all
            log.exception(
                "topic %s: replaying %d frames failed (%s); retrying one by one", writer.topic, len(chunk), describe(e)
            )
            results = [UnknownServerError("replay failed")]
        if not all(isinstance(r, AppendResult) for r in results):
            # One frame at a time, so a bad frame takes neither its group nor the sequences
            # behind it down; frames of the chunk that did land answer as duplicates.
            results = [_replay_one(writer, b, metrics) for b in chunk]
        for r in results:
            if isinstance(r, AppendResult):
                replayed += 0 if r.duplicate else len(r.offsets)
    log.info("topic %s: replayed %d records from the write-ahead log", writer.topic, replayed)
    wal.discard_recovered()


def _replay_one(writer: TopicWriter, batch: ProducerBatch, metrics: Metrics) -> AppendResult | LogstoreError:
    """Commit one frame at replay; a frame that cannot be committed is skipped and counted."""
    try:
        result = writer.append_held([batch])[0]
    except LogstoreError:
        raise
    except Exception as e:
        result = UnknownServerError(f"cannot commit: {e!r}")
    if not isinstance(result, AppendResult):
        log.error(
            "topic %s: skipped a write-ahead log frame of %d records (producer %s, sequence %s): %s",
            writer.topic,
            len(batch.records),
            batch.producer_id,
            batch.sequence,
            result,
        )
        metrics.wal_frames_skipped.labels(writer.topic).inc()
    return result


def replay_departed(
    writer: TopicWriter,
    wal_root: str,
    own_dir: str,
    own_frames: Sequence[Frame],
    metrics: Metrics,
    *,
    live: Collection[str] = (),
) -> int:
    """Cluster mode: commit every other node's logged acks=1 frames of this topic, before this node claims partitions.

    Reads ``<wal_root>/<node.id>/<topic>/`` of every other node not in ``live`` read-only
    (:func:`~logstore.log.wal.read_frames`: the node may be a paused zombie still
    holding its directory; its segments are never deleted here) — a shared directory, or a prefix in the
    bucket of an object-store root, listed and read through :mod:`logstore.storage` — plus
    ``own_frames`` (this node's own frames from before a restart), and commits
    them whole — all their partitions, whoever leads them now — in frame order
    through the idempotent writer (:meth:`TopicWriter.append_foreign`), so
    promised records land at their promised offsets. A frame whose
    ``(producer_id, sequence)`` the table already holds is skipped: replay
    twice, or by two new leaders one after the other, writes each frame once.

    A live node (registered in ZooKeeper now) commits its own frames, and a
    partition moves only away from a node that is not live (dead, paused past
    its session, or shut down after committing everything), so the frames of
    the partitions being taken over are all in directories read here.
    Caller holds the topic's failover lock (:meth:`~logstore.node.membership.ClusterMembership.failover_lock`)
    and the writer lock.
    Returns the records committed.

    Raises:
        LogstoreError: the table cannot be written now (nothing may be claimed).
    """
    replayed = 0
    sources: list[tuple[str, list[Frame]]] = [
        ("this node's previous run", _of_this_topic(writer, own_frames, "this node's previous run"))
    ]
    own = absolute(own_dir)
    for name in storage_for(wal_root).list_names(wal_root):
        directory = join(wal_root, name)
        if name in live or absolute(directory) == own:
            continue
        try:
            frames = read_frames(
                join(directory, writer.topic),
                skip=lambda h: (
                    promises.of_other_incarnation(h, writer.topic_id)
                    or writer.landed_everywhere(h.get("producer_id"), h.get("sequence"))
                ),
            )
        except NotADirectoryError:
            continue  # a file beside the nodes' directories, on a local root: no node's log
        sources.append((f"node {name}", frames))
    for who, frames in sources:
        logged = (ProducerBatch(f.records, f.header["producer_id"], f.header["sequence"]) for f in frames)
        batches = [b for b in logged if not writer.landed(b)]
        records, skipped = promises.replay_batches(writer.append_foreign, batches, topic=writer.topic, source=who)
        replayed += records
        if skipped:
            metrics.wal_frames_skipped.labels(writer.topic).inc(skipped)
    if replayed:
        log.warning("topic %s: replayed %d acks=1 records of departed leaders", writer.topic, replayed)
    return replayed


def _of_this_topic(writer: TopicWriter, frames: Sequence[Frame], source: str) -> list[Frame]:
    """``frames`` without those logged for an earlier topic of the same name (deleted and created again since)."""
    kept = [f for f in frames if not promises.of_other_incarnation(f.header, writer.topic_id)]
    if len(kept) < len(frames):
        log.warning(
            "topic %s: %d write-ahead log frames of %s belong to an earlier topic of that name (deleted and created "
            "again since): not replayed",
            writer.topic,
            len(frames) - len(kept),
            source,
        )
    return kept
