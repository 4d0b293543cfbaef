"""The Python :class:`Consumer`, shaped like confluent-kafka's: a group member, or a reader of assigned partitions.

Two ways to read, as in Kafka: :meth:`Consumer.subscribe` joins the group and
the coordinator assigns partitions (and keeps the group's fetch positions);
:meth:`Consumer.assign` takes partitions by hand and the consumer keeps its own
positions (:mod:`logstore.client._partition_reader`), committing to the group
without membership. Either way :meth:`~Consumer.seek`, :meth:`~Consumer.position`,
:meth:`~Consumer.pause` / :meth:`~Consumer.resume`, :meth:`~Consumer.committed`
and :meth:`~Consumer.offsets_for_times` work on the partitions it reads.

Config is a dict of Kafka's dotted keys (keyword arguments with ``_`` for
``.`` are merged over it): ``bootstrap.servers`` (``host:port`` or URLs,
several separated by commas; also ``url``; without a scheme ``http://``, or
``https://`` with ``security.protocol=SSL``), ``group.id`` (required), ``auto.offset.reset`` (``latest``),
``enable.auto.commit`` (True: positions are committed every
``auto.commit.interval.ms`` and before a partition is given up),
``session.timeout.ms`` (45000), ``heartbeat.interval.ms`` (3000),
``max.poll.interval.ms`` (300000: see below),
``partition.assignment.strategy`` (``range``, ``roundrobin`` or
``cooperative-sticky``), ``max.poll.records`` (500 per fetch), ``api.key``
(a secured server's API key; default ``$LOGSTORE_API_KEY``) and
``ssl.ca.location`` (a PEM CA bundle for an ``https://`` server), ``ssl.certificate.location`` and
``ssl.key.location`` (a client certificate and its key, for a server that asks for one), and
``isolation.level`` (``read_committed``, or ``read_uncommitted``: the same here, since a transaction's records
reach a topic only when it commits; docs/transactions.md).

Threads: a heartbeat thread keeps the session alive and learns assignment
changes; everything else — rebalance callbacks, revocation, auto commit —
runs in the caller's thread inside :meth:`Consumer.poll`, as in confluent-kafka.
Commits run on one committer thread, in order. An error of either thread
is raised by the next :meth:`Consumer.poll` or :meth:`Consumer.commit`; neither thread ends
before :meth:`Consumer.close`.

Revocation is cooperative: a revoked partition's buffered records are
dropped, ``on_revoke`` runs (commit there, or rely on auto commit), and
only then does the next heartbeat acknowledge it, letting the coordinator
give it to its new owner. So a consumer that commits after processing
each message hands partitions over without duplicates. ``on_assign`` gets
the partitions added (incremental, as with ``cooperative-sticky`` in
confluent-kafka).

``max.poll.interval.ms`` bounds the time the application spends between
calls of :meth:`Consumer.poll` / :meth:`Consumer.consume`: past it, the heartbeat thread
leaves the group (its partitions go to the others), and the next poll
gives up the partitions (``on_revoke``) and raises
:class:`~logstore.errors.UnknownMemberIdError`; the poll after that joins
again. The server enforces the same bound from the member's last fetch,
for clients that stop without leaving; a consumer that is draining
buffered records fetches once per half interval so that it is not taken
for a stopped one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from logstore.client._config import client_config
from logstore.client._http import raise_for
from logstore.client._membership import GroupMembership
from logstore.client._partition_reader import PartitionReader
from logstore.client._subscription import SubscriptionState, key_of
from logstore.client.message import TIMESTAMP_CREATE_TIME, Message, messages_of
from logstore.client.remote import RemoteStore
from logstore.common.logs import describe
from logstore.errors import (
    InvalidConfigError,
    InvalidRequestError,
    LogstoreError,
    NotCoordinatorError,
    UnknownMemberIdError,
    UnknownServerError,
)
from logstore.structs import TopicPartition
from logstore.wire.arrow_fetch import ARROW_STREAM, GENERATION_HEADER, decode_member_records

__all__ = ["TIMESTAMP_CREATE_TIME", "Consumer", "GroupMetadata", "Message", "RebalanceCallback"]

log = logging.getLogger("logstore.client")


RebalanceCallback = Callable[["Consumer", list[TopicPartition]], None]
"""``on_assign(consumer, partitions)`` / ``on_revoke(consumer, partitions)``: run inside :meth:`Consumer.poll`."""

_CONSUMER_DEFAULTS: dict[str, Any] = {
    "bootstrap.servers": None,
    "security.protocol": "PLAINTEXT",
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
    "isolation.level": "read_committed",
}
_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


@dataclass(frozen=True)
class GroupMetadata:
    """A consumer's group, for :meth:`~logstore.client.Producer.send_offsets_to_transaction`."""

    group_id: str


class Consumer:
    """A member of a consumer group on a logstore server (or a reader of assigned partitions), as confluent-kafka's.

    Config: confluent-kafka's dict of Kafka's dotted keys, keyword arguments (``_`` for ``.``) merged over
    it; the keys are listed in the module's documentation.
    Threads, revocation and ``max.poll.interval.ms``: see the module's documentation.

    Raises:
        InvalidConfigError: an unknown key, or no ``bootstrap.servers`` / ``group.id``.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        conf = client_config("consumer", _CONSUMER_DEFAULTS, config, kwargs, {"url": "bootstrap.servers"})
        if not conf["group.id"]:
            raise InvalidConfigError("consumer config 'group.id' is required")
        _check_isolation_level(conf["isolation.level"])
        self._conf = conf
        self.group: str = conf["group.id"]
        self._m = GroupMembership(conf, stopped_polling=self._stopped_polling, record_error=self._record)
        cert = conf["ssl.certificate.location"]
        remote = RemoteStore(
            conf["bootstrap.servers"],
            api_key=conf["api.key"],
            ca_file=conf["ssl.ca.location"],
            client_cert=(cert, conf["ssl.key.location"] or cert) if cert else None,
        )
        self._reader = PartitionReader(remote, self.group, conf["auto.offset.reset"], int(conf["max.poll.records"]))

        self._committer = ThreadPoolExecutor(1, thread_name_prefix="logstore-commit")
        self._commits: list[Future[None]] = []
        self._errors_lock = threading.Lock()
        self._errors: list[LogstoreError] = []
        self._topics: list[str] = []
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._applied = -1
        """The generation whose assignment :attr:`_assignment` is."""
        self._subs = SubscriptionState()
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

    def consumer_group_metadata(self) -> GroupMetadata:
        """What :meth:`Producer.send_offsets_to_transaction` takes for this group (confluent-kafka's)."""
        return GroupMetadata(self.group)

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
        if self._subs.manual:
            raise InvalidRequestError("subscribe() after assign(): a consumer reads assigned or subscribed partitions")
        self._topics, self._on_assign, self._on_revoke = list(topics), on_assign, on_revoke
        self._join()
        self._m.start_heartbeats()

    def assignment(self) -> list[TopicPartition]:
        """The partitions this consumer reads now (as applied by the last :meth:`poll`, or given to :meth:`assign`)."""
        return sorted(self._subs.assignment)

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Read exactly ``partitions``, without group membership (replaces any earlier :meth:`assign`).

        Each starts at its ``offset``: an offset, ``OFFSET_BEGINNING``,
        ``OFFSET_END``, or ``OFFSET_STORED`` / none — the group's committed
        offset, else ``auto.offset.reset``. Commits go to ``group.id``'s offsets.

        Raises:
            InvalidRequestError: the consumer subscribed (it is a group member).
            UnknownTopicOrPartitionError: no such topic or partition.
        """
        if self._m.member_id is not None:
            raise InvalidRequestError("assign() after subscribe(): a consumer reads assigned or subscribed partitions")
        self._subs.assign({key_of(tp): self._reader.start_offset(tp) for tp in partitions})

    def unassign(self) -> None:
        """Stop reading the partitions given to :meth:`assign` (a group member's partitions are its group's)."""
        if self._m.member_id is not None:
            raise InvalidRequestError("unassign() of a group member: its partitions are the group's; close() to leave")
        self._subs.unassign()

    def seek(self, partition: TopicPartition) -> None:
        """The next :meth:`poll` of ``partition`` returns the record at its ``offset`` (or an ``OFFSET_*`` end).

        Records of the partition fetched already are dropped. For a group
        member, the group's fetch position moves (nothing is committed).

        Raises:
            InvalidRequestError: the partition is not assigned to this consumer.
        """
        tp = self._subs.owned(partition, "seek")
        offset = self._reader.start_offset(partition) if partition.offset < 0 else partition.offset
        self._subs.drop_buffered([tp])
        self._subs.positions[tp] = offset
        if not self._subs.manual:
            self._m.seek({tp: offset})

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The next offset this consumer returns of each partition; ``OFFSET_INVALID`` before it knows one.

        As confluent-kafka's: the offset of the last record returned plus one
        (or where :meth:`seek` / :meth:`assign` put it).
        """
        return self._subs.position(partitions)

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """The group's committed offsets of ``partitions`` (the next offset to read); ``OFFSET_INVALID`` where none."""
        self._wait_commits()
        return self._reader.committed(partitions)

    def pause(self, partitions: list[TopicPartition]) -> None:
        """Stop fetching ``partitions`` until :meth:`resume`; their fetched, unreturned records are dropped."""
        rewind = self._subs.pause(partitions)
        if rewind and not self._subs.manual:
            self._m.seek(rewind)  # the group's position had moved past the dropped records

    def resume(self, partitions: list[TopicPartition]) -> None:
        """Fetch ``partitions`` again, from where :meth:`pause` left them."""
        self._subs.resume(partitions)

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """Per partition, the earliest offset whose timestamp is >= its ``offset`` (ms); ``OFFSET_END`` (-1) if none."""
        return self._reader.offsets_for_times(partitions)

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None) -> tuple[int, int]:
        """(log start offset, high watermark) of ``partition``, asked of the server."""
        return self._reader.watermarks(partition)

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
        if self._subs.manual:
            return self._consume_assigned(num_messages, timeout)
        if self._m.member_id is None:
            raise InvalidRequestError("subscribe() or assign() before poll()")
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
            if self._subs.buffer:
                self._keep_fetching()
                return self._subs.take(num_messages)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self._keep_fetching()  # e.g. a rebalance took the whole timeout
                return []
            wait_s = 0.5 if left is None else min(left, 0.5)  # short: assignment changes are applied between
            self._fetch(int(wait_s * 1000))

    def commit(
        self,
        message: Message | None = None,
        offsets: Mapping[TopicPartition, int] | list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> None:
        """Commit the consumed positions (default), ``message``'s offset + 1, or ``offsets`` (next offset to read).

        ``offsets`` is confluent-kafka's list of partitions with their offsets, or a dict partition → offset.

        ``asynchronous=True`` (confluent-kafka's default) returns at once; its
        error, if any, is raised by the next :meth:`poll` or :meth:`commit`.

        Raises:
            IllegalGenerationError: the consumer no longer owns a partition (the group rebalanced).
            UnknownMemberIdError: the consumer's session expired.
        """
        self._raise_errors()
        if message is not None:
            todo = {TopicPartition(message.topic(), message.partition()): message.offset() + 1}
        elif isinstance(offsets, list):
            todo = {key_of(tp): tp.offset for tp in offsets}
        elif offsets is not None:
            todo = {key_of(tp): o for tp, o in offsets.items()}
        else:
            todo = self._subs.consumed()
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
            joined = self._m.member_id is not None or self._subs.manual
            if joined and self._conf["enable.auto.commit"] and not self._m.lost:
                with contextlib.suppress(LogstoreError):
                    self.commit(asynchronous=False)
            self._wait_commits()
        finally:
            self._committer.shutdown(wait=True)
            self._m.close()
            self._reader.remote.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------

    def _consume_assigned(self, num_messages: int, timeout: float | None) -> list[Message]:
        """Up to ``num_messages`` records of the assigned partitions, fetched from this consumer's positions."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while True:
            self._raise_errors()
            self._maybe_auto_commit()
            if self._subs.buffer:
                return self._subs.take(num_messages)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return []
            fetched, resets = self._reader.fetch(self._subs.readable(), 0.5 if left is None else min(left, 0.5))
            self._subs.positions.update(resets)
            self._subs.buffer.extend(fetched)

    def _join(self) -> None:
        self._m.join(self._topics)
        self._applied = -1

    def _stopped_polling(self) -> bool:
        """The application has not polled for longer than ``max.poll.interval.ms`` (and is not polling now)."""
        return not self._in_poll and time.monotonic() - self._polled_at > self._max_poll_s

    def _apply_assignment(self) -> None:
        """Apply what the coordinator sent: revoke (callbacks, commits), then assign; acknowledge."""
        if self._m.lost:
            lost = sorted(self._subs.assignment)
            self._subs.buffer.clear()
            self._subs.assignment.clear()
            self._subs.positions.clear()
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
        revoked = self._subs.assignment - target
        added = target - self._subs.assignment
        if revoked:
            self._subs.drop_buffered(revoked)
            self._wait_commits()
            if self._on_revoke is not None:
                self._on_revoke(self, sorted(revoked))
            if self._conf["enable.auto.commit"]:
                owed = {tp: o for tp, o in self._subs.positions.items() if tp in revoked}
                try:
                    if owed:
                        self.commit(offsets=owed, asynchronous=False)
                except LogstoreError as e:
                    # The hand-over goes on: the new owner starts from the previous commit (at least once).
                    log.warning("group '%s': commit of revoked partitions failed: %s", self.group, describe(e))
            self._wait_commits()
            for tp in revoked:
                self._subs.positions.pop(tp, None)
        self._subs.assignment = set(target)
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
                params={
                    "max_records": max_records or int(self._conf["max.poll.records"]),
                    "wait_ms": wait_ms,
                    "paused": [f"{tp.topic}:{tp.partition}" for tp in sorted(self._subs.paused)],
                },
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
        if not fetched <= self._subs.assignment:
            # The coordinator gave us a partition our heartbeat has not told us of yet: learn it now
            # rather than drop its records (the group's position has already moved past them).
            self._m.heartbeat()
            self._apply_assignment()
        dropped = {(tp.topic, tp.partition) for tp in fetched - self._subs.assignment}
        self._subs.buffer.extend(messages_of(records, topics, partitions, dropped))

    def _commit_now(self, offsets: Mapping[TopicPartition, int]) -> None:
        """One commit on the committer thread; retried once with a fresh generation after a rebalance."""
        (self._reader if self._subs.manual else self._m).commit(offsets)

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


def _check_isolation_level(level: Any) -> None:
    if level not in _ISOLATION_LEVELS:
        raise InvalidConfigError(
            f"consumer config 'isolation.level' must be read_committed or read_uncommitted, got {level!r}"
        )
