"""The Python :class:`Consumer`: a member of a consumer group on a logstore server, shaped like confluent-kafka's."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx

from logstore.client._http import raise_for
from logstore.client._membership import GroupMembership
from logstore.client.message import TIMESTAMP_CREATE_TIME, Message, messages_of
from logstore.common.logs import describe
from logstore.errors import (
    IllegalGenerationError,
    InvalidConfigError,
    InvalidRequestError,
    LogstoreError,
    NotCoordinatorError,
    UnknownMemberIdError,
    UnknownServerError,
)
from logstore.structs import TopicPartition
from logstore.wire.arrow_fetch import ARROW_STREAM, GENERATION_HEADER, decode_member_records

__all__ = ["TIMESTAMP_CREATE_TIME", "Consumer", "Message", "RebalanceCallback"]

log = logging.getLogger("logstore.client")


RebalanceCallback = Callable[["Consumer", list[TopicPartition]], None]
"""``on_assign(consumer, partitions)`` / ``on_revoke(consumer, partitions)``: run inside :meth:`Consumer.poll`."""

_CONSUMER_DEFAULTS: dict[str, Any] = {
    "bootstrap.servers": None,
    "group.id": None,
    "auto.offset.reset": "latest",
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5_000,
    "session.timeout.ms": 45_000,
    "heartbeat.interval.ms": 3_000,
    "max.poll.interval.ms": 300_000,
    "partition.assignment.strategy": "range",
    "max.poll.records": 500,
    "api.key": None,
    "ssl.ca.location": None,
    "ssl.certificate.location": None,
    "ssl.key.location": None,
}


class Consumer:
    """A member of a consumer group on a logstore server, shaped like confluent-kafka's ``Consumer``.

    Config is a dict of Kafka's dotted keys (keyword arguments with ``_`` for
    ``.`` are merged over it): ``bootstrap.servers`` (the server URL, also
    ``url``), ``group.id`` (required), ``auto.offset.reset`` (``latest``),
    ``enable.auto.commit`` (True: positions are committed every
    ``auto.commit.interval.ms`` and before a partition is given up),
    ``session.timeout.ms`` (45000), ``heartbeat.interval.ms`` (3000),
    ``max.poll.interval.ms`` (300000: see below),
    ``partition.assignment.strategy`` (``range``, ``roundrobin`` or
    ``cooperative-sticky``), ``max.poll.records`` (500 per fetch), ``api.key``
    (a secured server's API key; default ``$LOGSTORE_API_KEY``) and
    ``ssl.ca.location`` (a PEM CA bundle for an ``https://`` server), ``ssl.certificate.location`` and
    ``ssl.key.location`` (a client certificate and its key, for a server that asks for one).

    Threads: a heartbeat thread keeps the session alive and learns assignment
    changes; everything else — rebalance callbacks, revocation, auto commit —
    runs in the caller's thread inside :meth:`poll`, as in confluent-kafka.
    Commits run on one committer thread, in order. An error of either thread
    is raised by the next :meth:`poll` or :meth:`commit`; neither thread ends
    before :meth:`close`.

    Revocation is cooperative: a revoked partition's buffered records are
    dropped, ``on_revoke`` runs (commit there, or rely on auto commit), and
    only then does the next heartbeat acknowledge it, letting the coordinator
    give it to its new owner. So a consumer that commits after processing
    each message hands partitions over without duplicates. ``on_assign`` gets
    the partitions added (incremental, as with ``cooperative-sticky`` in
    confluent-kafka).

    ``max.poll.interval.ms`` bounds the time the application spends between
    calls of :meth:`poll` / :meth:`consume`: past it, the heartbeat thread
    leaves the group (its partitions go to the others), and the next poll
    gives up the partitions (``on_revoke``) and raises
    :class:`~logstore.errors.UnknownMemberIdError`; the poll after that joins
    again. The server enforces the same bound from the member's last fetch,
    for clients that stop without leaving; a consumer that is draining
    buffered records fetches once per half interval so that it is not taken
    for a stopped one.

    Raises:
        InvalidConfigError: an unknown key, or no ``bootstrap.servers`` / ``group.id``.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        conf = dict(config or {}) | {k.replace("_", "."): v for k, v in kwargs.items()}
        if "url" in conf:
            conf["bootstrap.servers"] = conf.pop("url")
        unknown = sorted(set(conf) - set(_CONSUMER_DEFAULTS))
        if unknown:
            raise InvalidConfigError(
                f"unknown consumer config {', '.join(unknown)}; known: {', '.join(sorted(_CONSUMER_DEFAULTS))}"
            )
        conf = _CONSUMER_DEFAULTS | conf
        for required in ("bootstrap.servers", "group.id"):
            if not conf[required]:
                raise InvalidConfigError(f"consumer config '{required}' is required")
        self._conf = conf
        self.group: str = conf["group.id"]
        self._m = GroupMembership(conf, stopped_polling=self._stopped_polling, record_error=self._record)
        self._committer = ThreadPoolExecutor(1, thread_name_prefix="logstore-commit")
        self._commits: list[Future[None]] = []
        self._errors_lock = threading.Lock()
        self._errors: list[LogstoreError] = []
        self._topics: list[str] = []
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._applied = -1
        """The generation whose assignment :attr:`_assignment` is."""
        self._assignment: set[TopicPartition] = set()
        self._positions: dict[TopicPartition, int] = {}
        self._buffer: deque[Message] = deque()
        self._next_auto_commit = time.monotonic() + conf["auto.commit.interval.ms"] / 1000
        self._closed = False
        self._max_poll_s = conf["max.poll.interval.ms"] / 1000
        self._polled_at = time.monotonic()
        """When the application last called (or returned from) poll/consume."""
        self._in_poll = False
        self._fetched_at = time.monotonic()

    @property
    def member_id(self) -> str | None:
        """This consumer's id in the group (None before :meth:`subscribe`)."""
        return self._m.member_id

    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> None:
        """Join the group for ``topics``; partitions arrive (and ``on_assign`` runs) inside :meth:`poll`.

        Raises:
            UnknownTopicOrPartitionError: a topic does not exist.
            GroupSubscribedToTopicError: a Spark query of the group reads one of the topics.
        """
        self._topics, self._on_assign, self._on_revoke = list(topics), on_assign, on_revoke
        self._join()
        self._m.start_heartbeats()

    def assignment(self) -> list[TopicPartition]:
        """The partitions this consumer reads now (as applied by the last :meth:`poll`)."""
        return sorted(self._assignment)

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next record, waiting up to ``timeout`` seconds (None: forever); None when none came.

        Runs rebalance callbacks and auto commits.

        Raises:
            LogstoreError: a commit or heartbeat failed for a reason retrying does not fix.
        """
        msgs = self.consume(1, timeout)
        return msgs[0] if msgs else None

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        """Up to ``num_messages`` records, waiting up to ``timeout`` seconds for the first (None: forever)."""
        if self._m.member_id is None:
            raise InvalidRequestError("subscribe() before poll()")
        if self._stopped_polling():
            self._m.leave_for_poll_interval()  # late: the heartbeat thread had not got round to leaving
        self._in_poll = True
        try:
            return self._consume(num_messages, timeout)
        finally:
            self._polled_at = time.monotonic()
            self._in_poll = False

    def _consume(self, num_messages: int, timeout: float | None) -> list[Message]:
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while True:
            self._raise_errors()
            self._apply_assignment()
            self._maybe_auto_commit()
            if self._buffer:
                self._keep_fetching()
                out = [self._buffer.popleft() for _ in range(min(num_messages, len(self._buffer)))]
                last = {(m._topic, m._partition): m._offset for m in out}  # offsets ascend within a partition
                for (topic, partition), offset in last.items():
                    self._positions[TopicPartition(topic, partition)] = offset + 1
                return out
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self._keep_fetching()  # e.g. a rebalance took the whole timeout
                return []
            wait_s = 0.5 if left is None else min(left, 0.5)  # short: assignment changes are applied between
            self._fetch(int(wait_s * 1000))

    def commit(
        self,
        message: Message | None = None,
        offsets: Mapping[TopicPartition, int] | None = None,
        asynchronous: bool = True,
    ) -> None:
        """Commit the consumed positions (default), ``message``'s offset + 1, or ``offsets`` (next offset to read).

        ``asynchronous=True`` (confluent-kafka's default) returns at once; its
        error, if any, is raised by the next :meth:`poll` or :meth:`commit`.

        Raises:
            IllegalGenerationError: the consumer no longer owns a partition (the group rebalanced).
            UnknownMemberIdError: the consumer's session expired.
        """
        self._raise_errors()
        if message is not None:
            todo = {TopicPartition(message.topic(), message.partition()): message.offset() + 1}
        elif offsets is not None:
            todo = dict(offsets)
        else:
            todo = {tp: o for tp, o in self._positions.items() if tp in self._assignment}
        if not todo:
            return
        future = self._committer.submit(self._commit_now, todo)
        if asynchronous:
            self._commits = [f for f in self._commits if not f.done()] + [future]
            future.add_done_callback(self._record_error)
            return
        future.result()

    def close(self) -> None:
        """Commit (with auto commit), let queued commits finish, then leave the group (the others rebalance at once).

        As Kafka's ``close()``: a commit another thread queued before the committer stops lands before the
        member leaves, never refused as a departed member's. A commit asked for after that raises ``RuntimeError``.
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._m.member_id is not None and self._conf["enable.auto.commit"] and not self._m.lost:
                with contextlib.suppress(LogstoreError):
                    self.commit(asynchronous=False)
            self._wait_commits()
        finally:
            self._committer.shutdown(wait=True)
            self._m.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------

    def _join(self) -> None:
        self._m.join(self._topics)
        self._applied = -1

    def _stopped_polling(self) -> bool:
        """The application has not polled for longer than ``max.poll.interval.ms`` (and is not polling now)."""
        return not self._in_poll and time.monotonic() - self._polled_at > self._max_poll_s

    def _apply_assignment(self) -> None:
        """Apply what the coordinator sent: revoke (callbacks, commits), then assign; acknowledge."""
        if self._m.lost:
            lost = sorted(self._assignment)
            self._buffer.clear()
            self._assignment.clear()
            self._positions.clear()
            if lost and self._on_revoke is not None:
                self._on_revoke(self, lost)  # fenced already: its commits would be refused
            exceeded = self._m.take_poll_exceeded()
            if exceeded is not None:
                raise UnknownMemberIdError(exceeded)  # still lost: the next poll joins again
            self._join()
        with self._m.lock:
            generation, target = self._m.latest
        if generation == self._applied:
            return
        revoked = self._assignment - target
        added = target - self._assignment
        if revoked:
            self._buffer = deque(m for m in self._buffer if TopicPartition(m.topic(), m.partition()) not in revoked)
            self._wait_commits()
            if self._on_revoke is not None:
                self._on_revoke(self, sorted(revoked))
            if self._conf["enable.auto.commit"]:
                owed = {tp: o for tp, o in self._positions.items() if tp in revoked}
                try:
                    if owed:
                        self.commit(offsets=owed, asynchronous=False)
                except LogstoreError as e:
                    # The hand-over goes on: the new owner starts from the previous commit (at least once).
                    log.warning("group '%s': commit of revoked partitions failed: %s", self.group, describe(e))
            self._wait_commits()
            for tp in revoked:
                self._positions.pop(tp, None)
        self._assignment = set(target)
        self._applied = generation
        with self._m.lock:
            self._m.acked = generation
        if revoked:
            self._m.heartbeat_soon()  # acknowledge now: the new owners are waiting for it
        if added and self._on_assign is not None:
            self._on_assign(self, sorted(added))

    def _keep_fetching(self) -> None:
        """Fetch (without waiting) when the last fetch is half ``max.poll.interval.ms`` old.

        The coordinator removes a member that does not fetch within
        ``max.poll.interval.ms``; a poll answered from the buffer, or one whose
        timeout a rebalance used up, tells it this member still consumes.
        """
        if time.monotonic() - self._fetched_at > self._max_poll_s / 2:
            self._fetch(0, max_records=1)

    def _fetch(self, wait_ms: int, max_records: int | None = None) -> None:
        """One fetch of the member's records into the buffer, in the Arrow form (no per-record JSON)."""
        self._fetched_at = time.monotonic()
        try:
            r = self._m.client.get(
                f"/v1/groups/{self.group}/members/{self._m.member_id}/records",
                params={"max_records": max_records or int(self._conf["max.poll.records"]), "wait_ms": wait_ms},
                headers={"Accept": ARROW_STREAM},
            )
        except httpx.TransportError as e:
            raise self._m.unreachable(e) from e
        try:
            raise_for(r)
        except UnknownMemberIdError:
            self._m.lost = True
            return
        except NotCoordinatorError:
            return  # the group's coordinator is moving (a node left): the next poll asks again
        records = decode_member_records(r.content)
        if self._m.rebalance_waiting(r.headers.get(GENERATION_HEADER)):
            self._m.heartbeat()  # learn the new assignment now, not at the next heartbeat.interval.ms
        # Apply any change first: records of a partition revoked meanwhile are never delivered.
        self._apply_assignment()
        if not len(records):
            return
        topics = records["topic"].to_pylist()
        partitions = records["partition"].to_pylist()
        fetched = {TopicPartition(t, p) for t, p in set(zip(topics, partitions, strict=True))}
        if not fetched <= self._assignment:
            # The coordinator gave us a partition our heartbeat has not told us of yet: learn it now
            # rather than drop its records (the group's position has already moved past them).
            self._m.heartbeat()
            self._apply_assignment()
        dropped = {(tp.topic, tp.partition) for tp in fetched - self._assignment}
        self._buffer.extend(messages_of(records, topics, partitions, dropped))

    def _commit_now(self, offsets: Mapping[TopicPartition, int]) -> None:
        """One commit on the committer thread; retried once with a fresh generation after a rebalance."""
        for attempt in range(2):
            with self._m.lock:
                member, generation = self._m.member_id, self._m.latest[0]
            try:
                self._m.call(
                    self._m.commit_client,
                    "POST",
                    f"/v1/groups/{self.group}/members/{member}/offsets",
                    json={
                        "generation": generation,
                        "offsets": [
                            {"topic": tp.topic, "partition": tp.partition, "offset": o} for tp, o in offsets.items()
                        ],
                    },
                )
                return
            except IllegalGenerationError:
                if attempt:
                    raise
                # The group moved on since our last heartbeat: learn the new generation (the partitions may
                # still be ours, revoked but not yet acknowledged) and try once more.
                self._m.heartbeat()

    def _maybe_auto_commit(self) -> None:
        if not self._conf["enable.auto.commit"] or time.monotonic() < self._next_auto_commit:
            return
        self._next_auto_commit = time.monotonic() + self._conf["auto.commit.interval.ms"] / 1000
        self.commit(asynchronous=True)

    def _wait_commits(self) -> None:
        pending, self._commits = self._commits, []
        for f in pending:
            with contextlib.suppress(LogstoreError):
                f.result()  # its error was recorded by _record_error

    def _record_error(self, future: Future[None]) -> None:
        e = future.exception()
        if isinstance(e, LogstoreError):
            self._record(e)
        elif e is not None:
            self._record(UnknownServerError(f"commit failed: {e!r}"))

    def _record(self, error: LogstoreError) -> None:
        with self._errors_lock:
            self._errors.append(error)

    def _raise_errors(self) -> None:
        with self._errors_lock:
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]
