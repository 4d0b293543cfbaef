"""Replay of a topic's write-ahead log at start-up, before its committer commits anything else.

After a crash the WAL is replayed in frame order through the idempotent
writer before this node commits anything else, and (by rule 1 of
:mod:`logstore.node.accumulator`) no other writer on this host committed in
between while the node held the lock at the crash — so replay puts every
promised acks=1 record at its promised offset. Commits by writers on other
hosts, which do not share the lock, are outside the promise.

Cluster mode: a node replays its own previous run's frames when it opens the topic, under the topic's
failover lock, and opens every topic with frames before it registers in ZooKeeper
(:meth:`~logstore.node.broker.Broker.start`); until then the other nodes count it departed and
replay its frames themselves (:func:`replay_departed`) before they claim its partitions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence

from logstore.common.logs import describe
from logstore.errors import LogstoreError, UnknownServerError
from logstore.log import promises
from logstore.log.wal import Frame, WriteAheadLog, read_frames
from logstore.log.writer import TopicWriter
from logstore.node.metrics import Metrics
from logstore.storage import absolute, join, storage_for
from logstore.structs import AppendResult, ProducerBatch

__all__ = ["replay", "replay_before_registering", "replay_departed"]

log = logging.getLogger("logstore.ingest")

_CHUNK_FRAMES = 1000
"""Frames committed per replay commit."""
_RETRY_MAX_S = 5.0
"""Longest wait between two attempts at a topic :func:`replay_before_registering` could not replay (seconds)."""


def replay(writer: TopicWriter, wal: WriteAheadLog, metrics: Metrics, *, foreign: bool = False) -> None:
    """Commit the WAL's frames left by a previous run, in frame order (the caller holds the writer lock).

    Frames the table already holds (:meth:`TopicWriter.landed`: their sequence
    is committed on each of their partitions) are skipped. A frame that cannot be committed is
    skipped — logged and counted in ``logstore_wal_frames_skipped`` — rather
    than stopping the node from starting.

    ``foreign`` (cluster mode, before this node registers in ZooKeeper; the caller holds the topic's
    failover lock too): commit through :meth:`TopicWriter.append_foreign`, carrying no leader epochs,
    whoever leads the partitions now. Since the previous run died, a partition it led was either
    committed by nobody, or claimed by a new leader that replayed these frames first — this node was
    not registered, so :func:`replay_departed` read its directory — and they are skipped here as landed.

    Raises:
        LogstoreError: the table cannot be written now; every frame is kept for the next start.
    """
    frames = _of_this_topic(writer, wal.recovered(), "this node's previous run")
    if not frames:
        wal.discard_recovered()
        return
    append = writer.append_foreign if foreign else writer.append_held
    logged = (ProducerBatch(f.records, f.header["producer_id"], f.header["sequence"]) for f in frames)
    batches = [b for b in logged if not writer.landed(b)]  # the others are in the table already
    replayed = 0
    for start in range(0, len(batches), _CHUNK_FRAMES):
        chunk = batches[start : start + _CHUNK_FRAMES]
        try:
            results = append(chunk)
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
            results = [_replay_one(append, writer.topic, b, metrics) for b in chunk]
        for r in results:
            if isinstance(r, AppendResult):
                replayed += 0 if r.duplicate else len(r.offsets)
    log.info("topic %s: replayed %d records from the write-ahead log", writer.topic, replayed)
    wal.discard_recovered()


def replay_before_registering(topics: Sequence[str], open_topic: Callable[[str], bool]) -> None:
    """Cluster mode, at start: open each topic the previous run left frames of (``open_topic`` replays them), until
    every one is open or deleted; only then does the node register in ZooKeeper.

    Other nodes replay only the logs of nodes not registered (:func:`replay_departed`). Were this node
    registered first, a new leader of a partition it led before a crash could claim it without these
    frames and commit other records at the offsets they were promised; the frames would land later at
    other offsets, or never. So the node stays unregistered — not live, not serving — while a topic
    cannot be written: ``open_topic`` logs why and returns False, and it is tried again, backing off up
    to ``_RETRY_MAX_S``; meanwhile the new leaders of its partitions replay its frames themselves.
    """
    failures = 0
    while topics:
        topics = [t for t in topics if not open_topic(t)]
        if topics:
            failures += 1
            time.sleep(min(_RETRY_MAX_S, 0.1 * 2**failures))


def _replay_one(
    append: Callable[[Sequence[ProducerBatch]], list[AppendResult | LogstoreError]],
    topic: str,
    batch: ProducerBatch,
    metrics: Metrics,
) -> AppendResult | LogstoreError:
    """Commit one frame at replay; a frame that cannot be committed is skipped and counted."""
    try:
        result = append([batch])[0]
    except LogstoreError:
        raise
    except Exception as e:
        result = UnknownServerError(f"cannot commit: {e!r}")
    if not isinstance(result, AppendResult):
        log.error(
            "topic %s: skipped a write-ahead log frame of %d records (producer %s, sequence %s): %s",
            topic,
            len(batch.records),
            batch.producer_id,
            batch.sequence,
            result,
        )
        metrics.wal_frames_skipped.labels(topic).inc()
    return result


def replay_departed(
    writer: TopicWriter,
    wal_root: str,
    own_dir: str,
    metrics: Metrics,
    *,
    live: Collection[str] = (),
) -> int:
    """Cluster mode: commit every other node's logged acks=1 frames of this topic, before this node claims partitions.

    Reads ``<wal_root>/<node.id>/<topic>/`` of every other node not in ``live`` read-only
    (:func:`~logstore.log.wal.read_frames`: the node may be a paused zombie still
    holding its directory; its segments are never deleted here) — a shared directory, or a prefix in the
    bucket of an object-store root, listed and read through :mod:`logstore.storage` — and commits
    them whole — all their partitions, whoever leads them now — in frame order
    through the idempotent writer (:meth:`TopicWriter.append_foreign`), so
    promised records land at their promised offsets. A frame whose
    ``(producer_id, sequence)`` the table already holds is skipped: replay
    twice, or by two new leaders one after the other, writes each frame once.

    A live node (registered in ZooKeeper now) commits its own frames, and a
    partition moves only away from a node that is not live (dead, paused past
    its session, or shut down after committing everything), so the frames of
    the partitions being taken over are all in directories read here. A node
    restarted after a crash is live again only once it has committed its
    previous run's frames itself (:meth:`~logstore.node.broker.Broker.start`
    replays them before it registers), and a node whose session expired while it
    lived on registers again only once every acks=1 batch it promised is committed
    or fenced (:mod:`logstore.node.membership`), so skipping its directory loses nothing.
    Caller holds the topic's failover lock (:meth:`~logstore.node.membership.ClusterMembership.failover_lock`)
    and the writer lock.
    Returns the records committed.

    Raises:
        LogstoreError: the table cannot be written now (nothing may be claimed).
    """
    replayed = 0
    sources: list[tuple[str, list[Frame]]] = []
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
