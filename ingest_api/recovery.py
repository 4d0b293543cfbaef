"""Replay of a topic's write-ahead log at start-up, before its committer commits anything else.

After a crash the WAL is replayed in frame order through the idempotent
writer before this node commits anything else, and (by rule 1 of
:mod:`ingest_api.accumulator`) no other writer on this host committed in
between while the node held the lock at the crash — so replay puts every
promised acks=1 record at its promised offset. Commits by writers on other
hosts, which do not share the lock, are outside the promise.
"""

from __future__ import annotations

import logging

from ingest_api.committer import skip_sequence
from ingest_api.metrics import Metrics
from logstore.errors import LogstoreError, UnknownServerError
from logstore.structs import AppendResult, ProducerBatch
from logstore.wal import WriteAheadLog
from logstore.writer import TopicWriter

__all__ = ["replay"]

log = logging.getLogger("logstore.ingest")

_CHUNK_FRAMES = 1000
"""Frames committed per replay commit."""


def replay(writer: TopicWriter, wal: WriteAheadLog, wal_pid: str, metrics: Metrics) -> None:
    """Commit the WAL's frames left by a previous run, in frame order (the caller holds the writer lock).

    Frames logged under ``wal_pid`` (acks=1 batches without a producer id) that
    the table already holds are skipped. A frame that cannot be committed is
    skipped — logged and counted in ``logstore_wal_frames_skipped`` — rather
    than stopping the node from starting.

    Raises:
        LogstoreError: the table cannot be written now; every frame is kept for the next start.
    """
    frames = wal.recovered()
    if not frames:
        return
    committed = writer.producer_sequence(wal_pid)
    batches = []
    for f in frames:
        pid, seq = f.header["producer_id"], f.header["sequence"]
        if pid == wal_pid and committed is not None and seq <= committed:
            continue  # already in the table
        batches.append(ProducerBatch(f.records, pid, seq))
    replayed = 0
    for start in range(0, len(batches), _CHUNK_FRAMES):
        chunk = batches[start : start + _CHUNK_FRAMES]
        try:
            results = writer.append_held(chunk)
        except LogstoreError:
            raise  # the table cannot be written now: keep every frame and let start-up fail
        except Exception:  # a frame the writer cannot take at all
            log.exception("topic %s: replaying %d frames failed; retrying one by one", writer.topic, len(chunk))
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
        skip_sequence(writer, batch)
    return result
