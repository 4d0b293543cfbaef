"""The committer of one topic: it holds the table's writer lock and commits what the accumulator gathered.

The committer takes every batch pending in the topic's
:class:`~logstore.node.accumulator.Accumulator` when it wakes (after
``linger.ms`` or once ``batch.size`` bytes wait) and commits them together
with the core's :class:`~logstore.log.writer.TopicWriter` — many requests per
Delta commit, in submit order — then answers them and moves the WAL on.

It is not a thread: it runs in turns, a serial task (:mod:`logstore.common.workers`)
on the node's committer pool of ``num.io.threads`` threads shared by every
topic. A topic commits on one worker at a time, so its commits stay one at a
time and in submit order; a turn never waits — not for ``linger.ms`` (the
pool's timer wakes it when the group is due), nor for a writer lock someone
else holds (it tries again on a later turn) — so one topic cannot hold up the
others. A topic with nothing pending costs no thread: while it holds the
writer lock it takes a turn every ``IDLE_TICK_S`` to look for a waiting
writer, less often the longer it stays idle (up to ``_IDLE_TICK_MAX_S``), and
after ``_IDLE_RELEASE_S`` it lets go of the lock and takes no turn until work
comes — so thousands of idle topics cost no CPU. The first acks=1 batches
after that wait for their commit instead of being promised offsets (rule 1
of :mod:`logstore.node.accumulator`): the lock is taken again when they arrive.

Why acks=1 promises made while it holds the lock are final (rule 1 of
:mod:`logstore.node.accumulator`): the committer holds the table's writer lock
and has caught up with the table since taking it (:meth:`TopicWriter.hold`,
:meth:`catch_up`) before it lets the accumulator promise. Every writer on this
host commits only under that lock — cooperative ones (the Spark sink,
``logstore produce --root``) and epoch-claiming ones alike — so nothing but
this pipeline moves the offsets while it holds it. A writer that wants the
lock announces itself (``others_waiting``); the committer then stops the
promises, commits every batch promised, and only then lets go.

No exception ends the committer: a commit that raises fails the requests of
that commit (each batch alone, so only the one that cannot be committed
fails) and the pipeline goes on; a retriable storage error keeps the group
for a later turn (backing off), ahead of anything newer.

Cluster mode (``cluster=True``): the committer holds the writer lock shared
with the topic's other leaders (:meth:`TopicWriter.hold`), and it also owns
this node's leadership of the topic's partitions. The node's cluster watch
hands it the partitions ZooKeeper says this node leads (:meth:`Committer.want`);
on its next turn, for partitions newly led, it takes the topic's failover lock,
replays every other node's logged acks=1 frames of the topic
(:func:`~logstore.node.recovery.replay_departed`), claims the partitions with
their epochs (:meth:`TopicWriter.claim`) and only then accepts produce for
them. A partition ZooKeeper moves away is no longer accepted at once; this
node stops committing it when the new leader's claim fences it (until then
its commits are legitimate, and what it promised is committed or replayed).
A fence of some partitions leaves the others led. Promise markers
(:mod:`logstore.log.promises`) are not used: the replay above covers a dead node.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from logstore.common.logs import describe
from logstore.common.workers import WorkerPool
from logstore.errors import (
    FencedLeaderEpochError,
    InconsistentTopicIdError,
    LogstoreError,
    NotLeaderOrFollowerError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from logstore.log import promises
from logstore.log.wal import WriteAheadLog
from logstore.log.writer import TopicWriter
from logstore.node.accumulator import IDLE_TICK_S, Accumulator, BufferPool, Pending
from logstore.node.metrics import Metrics
from logstore.structs import AppendResult

__all__ = ["Committer"]

log = logging.getLogger("logstore.ingest")

_HAND_OVER_S = 1.0
"""How long a blocking :meth:`Committer.acquire` waits for an announced writer to take the lock first."""
_LOCK_RETRY_S = 0.005
"""How soon a committer with work to do tries again for a writer lock someone else holds."""
_IDLE_TICK_MAX_S = 1.0
"""The longest an idle committer holding the writer lock goes without looking for a waiting writer."""
_IDLE_RELEASE_S = 10.0
"""How long a committer stays idle holding the writer lock before it lets go of it and takes no more turns."""


class Committer:
    """Commits one topic's accepted batches on this node, in turns on a shared pool, and holds its writer lock."""

    def __init__(
        self,
        accumulator: Accumulator,
        writer: TopicWriter,
        wal: WriteAheadLog,
        *,
        table_root: str,
        node_id: str,
        wal_dir: str,
        buffer: BufferPool,
        metrics: Metrics,
        on_commit: Callable[[], None],
        pool: WorkerPool,
        cluster: bool = False,
        failover: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
        on_stale: Callable[[], None] = lambda: None,
    ) -> None:
        self.topic = accumulator.topic
        self._on_stale = on_stale
        """Called (on a turn: it must not wait for the committer) when the topic was deleted or created again."""
        self._cluster = cluster
        self._failover = failover
        self._want_lock = threading.Lock()
        self._wanted: dict[int, int] | None = None
        self._wanted_at: float | None = None
        """When the oldest leadership not yet applied was given (``time.perf_counter()``), for the claim's log line."""
        self._lock_warned = False
        self._acc = accumulator
        self._writer = writer
        self._wal = wal
        self._table_root = table_root
        self._node_id = node_id
        self._wal_dir = wal_dir
        self._buffer = buffer
        self._metrics = metrics
        self._on_commit = on_commit
        self._hold = contextlib.ExitStack()
        self._held = False
        self._failures = 0
        """Turns in a row that raised (they back off)."""
        self._retry: list[Pending] = []
        """A group whose commit failed retriably: committed on a later turn, before anything newer."""
        self._retry_at = 0.0
        self._attempts = 0
        self._idle_since: float | None = None
        self._resting = False
        """Let go of the writer lock after ``_IDLE_RELEASE_S`` idle; taken again when work comes."""
        self._stopped = threading.Event()
        self._turns = pool.task(self._turn, f"committer of topic {self.topic}")
        accumulator.attach(self._turns)

    def start(self) -> None:
        """Take the first turn (the lock already taken and the WAL replayed)."""
        self._turns.run_soon()

    def join(self) -> None:
        """Wait until the committer has drained and stopped (after :meth:`Accumulator.close`)."""
        self._stopped.wait()

    # -- leadership (cluster mode) -------------------------------------------------

    def want(self, epochs: dict[int, int]) -> None:
        """Lead exactly these partitions, at these epochs (called from the cluster watch; applied on the next turn)."""
        with self._want_lock:  # with the lock: a claim finishing now cannot accept a partition dropped here
            self._acc.drop_led(set(self._acc.led or ()) - set(epochs))  # refuse at once what is no longer led
            self._wanted = dict(epochs)
            if self._wanted_at is None:
                self._wanted_at = time.perf_counter()
        self._acc.wake()

    def _apply_leadership(self) -> bool:
        """Claim newly led partitions (after replaying departed nodes' acks=1 frames); accept what is led.

        False when that needs the writer lock and another writer holds it: try again on a later turn.
        """
        with self._want_lock:
            wanted, self._wanted = self._wanted, None
            given = self._wanted_at if self._wanted_at is not None else time.perf_counter()
        if wanted is None:
            return True
        try:
            current = self._writer.leader_epochs
            gained = {p: e for p, e in wanted.items() if current.get(p) != e}
            if gained:
                if not self.acquire(wait=False):
                    with self._want_lock:
                        if self._wanted is None:
                            self._wanted = wanted
                    if not self._lock_warned and time.perf_counter() - given >= 1.0:
                        self._lock_warned = True
                        _say_lock_wait(self.topic, gained, time.perf_counter() - given, self._writer.others_waiting())
                    return False
                started = time.perf_counter()
                gained, replay_s = _claim_in_failover(self._writer, self._failover, gained)
                self._metrics.leadership_changes.labels(self.topic).inc(len(gained))
                took = time.perf_counter() - started
                self._metrics.failover_seconds.observe(took)
                _say_claimed(self.topic, gained, given, started, took, replay_s)
        except BaseException:
            with self._want_lock:
                if self._wanted is None:
                    self._wanted = wanted  # try again on the next turn
            raise
        now = self._writer.leader_epochs
        with self._want_lock:  # a newer want that dropped a partition wins over this claim
            if self._wanted is None:
                self._wanted_at, self._lock_warned = None, False
            latest = self._wanted if self._wanted is not None else wanted
            self._acc.set_led(frozenset(p for p, e in wanted.items() if now.get(p) == e and latest.get(p) == e))
        return True

    def _fenced(self, error: FencedLeaderEpochError) -> bool:
        """Cluster mode: a fence of some partitions; stop accepting them and go on with the others."""
        if not (self._cluster and error.partitions):
            return False
        log.warning("topic %s: %s", self.topic, error.message)
        self._acc.drop_led(error.partitions)
        return True

    # -- the writer lock ---------------------------------------------------------

    def acquire(self, *, wait: bool = True) -> bool:
        """Take the writer lock and catch up; from then on acks=1 batches may be promised offsets.

        ``wait=False`` (on a pool worker): return False instead of waiting while another
        writer holds the lock or has announced itself.
        """
        if self._held:
            return True
        if wait:
            # A writer that announced itself is let through before this node takes the lock again.
            deadline = time.monotonic() + _HAND_OVER_S
            while time.monotonic() < deadline and self._writer.others_waiting():
                time.sleep(0.001)
            self._hold.enter_context(self._writer.hold())
        else:
            held = None if self._writer.others_waiting() else self._writer.try_hold()
            if held is None:
                return False
            self._hold.enter_context(held)
        self._held = True
        self._resting = False
        try:
            self._writer.catch_up()
            if not self._cluster:
                # Another node that died holding promises on this topic: its records go first.
                promises.settle(self._writer, self._table_root, own_node=self._node_id)
                # Durably before the first promise: should this node die now, the next writer
                # replays its WAL before committing anything.
                promises.write_marker(self._table_root, self._node_id, self._wal_dir)
        except BaseException:
            self.release()
            raise
        self._acc.start_promising()
        return True

    def release(self) -> None:
        """Stop promising and let go of the writer lock (every promised batch must be committed)."""
        self._acc.pause_promising()
        if self._held:
            self._held = False
            try:
                if not self._cluster:
                    promises.remove_marker(self._table_root, self._node_id)
            except OSError:
                log.exception("topic %s: cannot remove this node's promise marker", self.topic)
            self._hold.close()
            self._hold = contextlib.ExitStack()

    def _hand_over_if_asked(self, *, idle: bool) -> None:
        if not self._held:
            return
        if not self._writer.others_waiting():
            if idle:
                self._catch_up_idle()
            return
        rest = self._acc.stop_promising()
        if rest:  # holds every batch promised offsets: they must land before anyone else commits
            self._commit(rest, wait=True)
        self.release()

    def _catch_up_idle(self) -> None:
        """Notice commits by others (a raised partition count) while no produce arrives."""
        try:
            self._writer.catch_up()
        except FencedLeaderEpochError as e:
            if not self._fenced(e):
                self._die(e, [])
            return
        except InconsistentTopicIdError:
            self._on_stale()
            return
        self._acc.resync()

    # -- committing --------------------------------------------------------------

    def _turn(self) -> None:
        """One turn on a pool worker: commit what is due, hand the writer lock over when asked; never raises.

        Schedules its own next turn: when the pending group is due, after a
        back-off, or the next idle tick; none while fenced with nothing pending.
        """
        try:
            next_turn = self._step()
            self._failures = 0
        except FencedLeaderEpochError as e:
            if not self._fenced(e):
                self._die(e, [])
            next_turn = time.monotonic()
        except FileNotFoundError as e:  # the table is gone (TableDeletedError): nothing here can be committed any more
            self._gone(e)
            next_turn = time.monotonic()
        except Exception:  # a bug or a storage fault must not stop the topic: log it, back off, go on
            self._failures += 1
            log.exception("topic %s: committer step failed (%d in a row), retrying", self.topic, self._failures)
            next_turn = time.monotonic() + min(5.0, 0.05 * 2**self._failures)
        if next_turn is not None:
            if next_turn <= time.monotonic():
                self._turns.run_soon()
            else:
                self._turns.run_at(next_turn)

    def _step(self) -> float | None:
        """Commit what is due; returns when the next turn is wanted (``time.monotonic()``), None for none."""
        now = time.monotonic()
        # A pipeline closing (retired: its topic deleted or created again) or dead claims nothing more.
        claims = self._cluster and self._acc.dead is None and not self._acc.closing
        if claims and not self._apply_leadership():
            return now + _LOCK_RETRY_S
        if self._retry:
            if now < self._retry_at:
                return self._retry_at
            if not self.acquire(wait=False):
                return now + _LOCK_RETRY_S
            items, self._retry = self._retry, []
            self._commit(items)
            return self._retry_at if self._retry else now
        pending = self._acc.due_at() is not None
        # After a hand-over (take turns again, so acks=1 can be promised), or resting with work here.
        needs_lock = not self._held and self._acc.dead is None and (pending or not (self._resting or self._acc.closing))
        if needs_lock and not self.acquire(wait=False):
            return now + (_LOCK_RETRY_S if pending else IDLE_TICK_S)
        group = self._acc.take(cut_short=lambda: self._held and self._writer.others_waiting())
        if group is None:
            self._stop()
            return None
        if group:
            self._idle_since = None
            self._commit(group)
            if self._retry:
                return self._retry_at
        due = self._acc.due_at()
        self._hand_over_if_asked(idle=not group and due is None)
        now = time.monotonic()
        if not self._held and self._acc.dead is None and not self._acc.closing and not self._resting:
            return now + (_LOCK_RETRY_S if due is not None else IDLE_TICK_S)
        if due is not None:
            return min(due, now + IDLE_TICK_S) if self._held else now + _LOCK_RETRY_S
        if self._acc.dead is not None or not self._held:
            return None  # nothing to commit, no lock to hand over: the next submit, wake or close wakes it
        # Idle with the lock: look for a waiting writer, less often the longer nothing comes; let go in the end.
        if self._idle_since is None:
            self._idle_since = now
        idle = now - self._idle_since
        if idle >= _IDLE_RELEASE_S and not group:
            self.release()
            self._resting = True
            return None
        return now + min(_IDLE_TICK_MAX_S, max(IDLE_TICK_S, idle / 2))

    def _stop(self) -> None:
        """Closed and drained: let go of the writer lock; no more turns."""
        self.release()
        self._turns.close()
        self._stopped.set()

    def _commit(self, items: list[Pending], *, wait: bool = False) -> None:
        """Commit ``items`` in order and answer them; never raises.

        A retriable storage error keeps them for a later turn (:attr:`_retry`,
        backing off), unless ``wait``: then it retries here until they land.
        """
        if not self._attempts:
            taken, stage = time.perf_counter(), self._metrics.produce_stage.labels("queue")
            for item in items:
                stage.observe(taken - item.times.queued)
        try:
            self.acquire()
            results = self._append(items, retry=wait)
        except FencedLeaderEpochError as e:
            self._attempts = 0
            if self._fenced(e):
                self._commit(items, wait=wait)  # again: the batches of the fenced partitions now fail alone
            else:
                self._die(e, items)
            return
        except InconsistentTopicIdError as e:
            # Never committable by this writer: they fail now (retriable), and the node opens the new topic.
            self._attempts = 0
            self._finish(items, [e] * len(items))
            self._on_stale()
            return
        except LogstoreError as e:
            self._attempts, self._acc.commit_error = self._attempts + 1, e  # the error, for requests that time out
            log.warning("commit to topic %s failed (attempt %d): %s", self.topic, self._attempts, describe(e))
            if self._acc.closing and self._attempts >= 5:
                self._attempts = 0
                self._finish(items, [e] * len(items))
            else:
                self._retry, self._retry_at = items, time.monotonic() + min(1.0, 0.01 * 2**self._attempts)
            return
        except FileNotFoundError as e:  # the table was deleted under this pipeline (TableDeletedError)
            self._attempts = 0
            self._gone(e, items)
            return
        except Exception:  # not a LogstoreError: a bug or a poisoned batch; find it, keep the others
            self._attempts = 0
            log.exception("topic %s: commit of %d batches failed unexpectedly", self.topic, len(items))
            self._append_one_by_one(items)
            return
        self._attempts, self._acc.commit_error = 0, None
        self._finish(items, results)

    def _append(self, items: list[Pending], *, retry: bool = True) -> list[AppendResult | LogstoreError]:
        """Commit ``items`` as one group; with ``retry``, a retriable storage error is retried here (backing off).

        Raises:
            FencedLeaderEpochError: always raised.
            LogstoreError: without ``retry``, a commit that failed.
        """
        attempt = 0
        while True:
            started = time.perf_counter()
            try:
                results = self._writer.append_held([i.batch for i in items])
            except FencedLeaderEpochError:
                raise
            except LogstoreError as e:
                if not retry:
                    raise
                attempt += 1
                log.warning("commit to topic %s failed (attempt %d): %s", self.topic, attempt, describe(e))
                if self._acc.closing and attempt >= 5:
                    return [e] * len(items)
                time.sleep(min(1.0, 0.01 * 2**attempt))
                continue
            elapsed = time.perf_counter() - started
            self._metrics.commit_latency.labels(self.topic).observe(elapsed)
            self._metrics.produce_stage.labels("commit").observe(elapsed)
            self._metrics.batch_records.observe(sum(len(i.batch.records) for i in items))
            return results

    def _append_one_by_one(self, items: list[Pending]) -> None:
        """After an unexpected error: commit each batch alone, so only a batch that cannot be committed fails."""
        results: list[AppendResult | LogstoreError] = []
        for item in items:
            try:
                self.acquire()
                results.extend(self._append([item]))
            except FencedLeaderEpochError as e:
                self._finish(items[: len(results)], results)
                self._die(e, items[len(results) :])
                return
            except Exception as e:
                log.exception(
                    "topic %s: a batch of %d records cannot be committed", self.topic, len(item.batch.records)
                )
                # An idempotent batch failed here leaves a gap in its producer's sequences, which the writer accepts.
                results.append(UnknownServerError(f"topic '{self.topic}': the batch could not be committed: {e!r}"))
        self._finish(items, results)

    def _finish(self, items: list[Pending], results: list[AppendResult | LogstoreError]) -> None:
        """Answer committed (or failed) items, release their bytes, move the LEO and the WAL on."""
        last_frame = _answer(self.topic, items, results, self._acc, self._buffer, self._metrics)
        self._acc.answered(items)
        for p in range(self._writer.num_partitions):
            self._metrics.high_watermark.labels(self.topic, str(p)).set(self._writer.high_watermark(p))
        if last_frame >= 0:
            self._wal.committed_through(last_frame)
        self._on_commit()

    def _gone(self, error: FileNotFoundError, items: list[Pending] | None = None) -> None:
        """The table was deleted under this pipeline: fail all it holds (retriable) and have the node retire it."""
        log.warning("topic %s: its table is gone (%s); closing the pipeline", self.topic, error)
        self._die(UnknownTopicOrPartitionError(f"topic '{self.topic}' was deleted: {error}"), items or [])
        self._on_stale()

    def _die(self, error: LogstoreError, items: list[Pending]) -> None:
        """Fenced: this node no longer commits the topic; fail ``items``, those kept for a retry, and everything
        pending (each is answered: a promise left unanswered would keep the node from registering again)."""
        items, self._retry = items + self._retry, []
        rest = self._acc.kill(error)
        self.release()
        failure = NotLeaderOrFollowerError(f"topic '{self.topic}': {error.message}")
        self._finish(items + rest, [failure] * len(items + rest))


def _answer(
    topic: str,
    items: list[Pending],
    results: list[AppendResult | LogstoreError],
    acc: Accumulator,
    buffer: BufferPool,
    metrics: Metrics,
) -> int:
    """Answer each item with its result and release its bytes; the last write-ahead log frame among them (-1: none)."""
    last_frame = -1
    answered = time.perf_counter()
    for item, result in zip(items, results, strict=True):
        item.times.answered = answered
        buffer.release(item.nbytes)
        if item.frame is not None:
            last_frame = max(last_frame, item.frame)
        if isinstance(result, AppendResult):
            if item.promised is not None and not np.array_equal(result.offsets.to_numpy(), item.promised):
                log.error("topic %s: records committed at other offsets than promised to acks=1", topic)
            pid, seq = item.batch.producer_id, item.batch.sequence
            if pid is not None and seq is not None and pid != acc.wal_pid:
                acc.committed_sequence(pid, seq, np.unique(result.partitions.to_numpy(zero_copy_only=False)).tolist())
            metrics.records_in.labels(topic).inc(len(item.batch.records))
            metrics.bytes_in.labels(topic).inc(item.nbytes)
            item.future.set_result(result)
        else:
            if item.promised is not None:
                log.error("topic %s: a batch promised offsets to acks=1 failed: %s", topic, result)
            item.future.set_exception(result)
    return last_frame


def _claim_in_failover(
    writer: TopicWriter, failover: Callable[[], contextlib.AbstractContextManager[None]], gained: dict[int, int]
) -> tuple[dict[int, int], float]:
    """Claim ``gained`` inside the topic's failover lock, departed nodes' frames replayed first (``failover``).

    Returns the partitions claimed (those a newer epoch fenced left out) and the seconds the lock and the replay took.
    """
    started = time.perf_counter()
    with failover():
        replayed = time.perf_counter()
        while gained:
            try:
                writer.claim(gained)
                break
            except FencedLeaderEpochError as e:
                if not e.partitions:
                    raise
                log.warning("topic %s: %s", writer.topic, e.message)
                gained = {p: ep for p, ep in gained.items() if p not in e.partitions}
    return gained, replayed - started


def _say_claimed(
    topic: str, gained: dict[int, int], given: float, started: float, took: float, replay_s: float
) -> None:
    """Log a claim and where its time went (``given``, ``started``: ``time.perf_counter()``; the rest seconds)."""
    log.info(
        "topic %s: leading %s %.2f s after it was given: %.2f s for the writer lock, then %.2f s "
        "(%.2f s failover lock and replay, then the claim)",
        topic,
        gained,
        time.perf_counter() - given,
        started - given,
        took,
        replay_s,
    )


def _say_lock_wait(topic: str, gained: dict[int, int], waited_s: float, others_waiting: bool) -> None:
    """Warn (once per leadership change) that partitions given to this node wait for the writer lock."""
    why = "another writer on this host waits for it" if others_waiting else "another writer holds it"
    log.warning(
        "topic %s: partitions %s given %.1f s ago wait for the writer lock (%s)", topic, sorted(gained), waited_s, why
    )
