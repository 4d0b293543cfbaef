"""The Python :class:`Consumer`: a member of a consumer group on a logstore server, shaped like confluent-kafka's."""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.compute as pc

from logstore.client._http import assigned_partitions, http_client, raise_for
from logstore.errors import (
    IllegalGenerationError,
    InvalidConfigError,
    InvalidRequestError,
    KafkaStorageError,
    LogstoreError,
    NotCoordinatorError,
    UnknownMemberIdError,
    UnknownServerError,
)
from logstore.structs import TopicPartition
from logstore.wire.arrow_fetch import ARROW_STREAM, GENERATION_HEADER, decode_member_records

__all__ = ["TIMESTAMP_CREATE_TIME", "Consumer", "Message", "RebalanceCallback"]

log = logging.getLogger("logstore.client")


class Message:
    """One consumed record, with confluent-kafka's accessors."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_timestamp_ms", "_topic", "_value")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        timestamp_ms: int,
    ) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers, self._timestamp_ms = key, value, headers, timestamp_ms

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]]:
        """In the order produced; a key may repeat."""
        if self._headers is None:
            self._headers = []
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        """``(TIMESTAMP_CREATE_TIME, ms since the epoch)``, as confluent-kafka returns it."""
        return TIMESTAMP_CREATE_TIME, self._timestamp_ms

    def error(self) -> None:
        """Always None: errors are raised by :meth:`Consumer.poll`, not delivered as messages."""
        return None

    def __repr__(self) -> str:
        return f"Message({self._topic}-{self._partition}@{self._offset})"


TIMESTAMP_CREATE_TIME = 1
"""confluent-kafka's timestamp type of a producer-set (or append-time) timestamp."""

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
        # a member talks to one node, which forwards member requests to the group's coordinator node;
        # when that node cannot be reached the consumer moves on to the next bootstrap server
        urls = [u.strip() for u in str(conf["bootstrap.servers"]).split(",") if u.strip()]
        self._urls = [u if "://" in u else f"http://{u}" for u in urls]
        self._url = self._urls[0]
        key, ca = conf["api.key"], conf["ssl.ca.location"]
        cert = conf["ssl.certificate.location"]
        tls = {"ca_file": ca, "client_cert": (cert, conf["ssl.key.location"] or cert) if cert else None}
        self._client = http_client(self._url, timeout_s=60, api_key=key, **tls)
        self._hb_client = http_client(self._url, timeout_s=30, api_key=key, **tls)
        self._commit_client = http_client(self._url, timeout_s=60, api_key=key, **tls)
        self._committer = ThreadPoolExecutor(1, thread_name_prefix="logstore-commit")
        self._commits: list[Future[None]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._topics: list[str] = []
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._member_id: str | None = None
        self._latest: tuple[int, frozenset[TopicPartition]] = (-1, frozenset())
        """The newest (generation, assignment) the coordinator sent."""
        self._applied = -1
        self._acked: int | None = None
        self._lost = False
        self._errors: list[LogstoreError] = []
        self._assignment: set[TopicPartition] = set()
        self._positions: dict[TopicPartition, int] = {}
        self._buffer: deque[Message] = deque()
        self._next_auto_commit = time.monotonic() + conf["auto.commit.interval.ms"] / 1000
        self._heartbeat_thread: threading.Thread | None = None
        self._closed = False
        self._max_poll_s = conf["max.poll.interval.ms"] / 1000
        self._polled_at = time.monotonic()
        """When the application last called (or returned from) poll/consume."""
        self._in_poll = False
        self._fetched_at = time.monotonic()
        self._poll_exceeded: str | None = None
        """Why the heartbeat thread left the group; raised by the next poll."""

    @property
    def member_id(self) -> str | None:
        """This consumer's id in the group (None before :meth:`subscribe`)."""
        return self._member_id

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
        if self._heartbeat_thread is None:
            self._heartbeat_thread = threading.Thread(target=self._heartbeats, name="logstore-heartbeat", daemon=True)
            self._heartbeat_thread.start()

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
        if self._member_id is None:
            raise InvalidRequestError("subscribe() before poll()")
        if self._stopped_polling():
            self._leave_for_poll_interval()  # late: the heartbeat thread had not got round to leaving
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
        """Commit (with auto commit), leave the group so the others rebalance at once, stop the threads."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._member_id is not None and self._conf["enable.auto.commit"] and not self._lost:
                with contextlib.suppress(LogstoreError):
                    self.commit(asynchronous=False)
            self._wait_commits()
        finally:
            self._stop.set()
            self._wake.set()
            if self._heartbeat_thread is not None:
                self._heartbeat_thread.join()
            if self._member_id is not None:
                with contextlib.suppress(LogstoreError):
                    self._call(self._client, "DELETE", f"/v1/groups/{self.group}/members/{self._member_id}")
            self._committer.shutdown(wait=True)
            for c in (self._client, self._hb_client, self._commit_client):
                c.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------

    def _unreachable(self, e: httpx.TransportError) -> KafkaStorageError:
        """Move every client to the next bootstrap server (the retry goes there) and describe the failure."""
        failed = self._url
        with self._lock:
            if self._url == failed and len(self._urls) > 1:
                self._url = self._urls[(self._urls.index(failed) + 1) % len(self._urls)]
                for client in (self._client, self._hb_client, self._commit_client):
                    client.base_url = httpx.URL(self._url)
        return KafkaStorageError(f"cannot reach {failed}: {e}")

    def _call(self, client: httpx.Client, method: str, path: str, **kw: Any) -> Any:
        try:
            r = client.request(method, path, **kw)
        except httpx.TransportError as e:
            raise self._unreachable(e) from e
        raise_for(r)
        return r.json() if r.content else None

    def _join(self) -> None:
        body = self._call(
            self._client,
            "POST",
            f"/v1/groups/{self.group}/members",
            json={
                "topics": self._topics,
                "assignor": self._conf["partition.assignment.strategy"],
                "session_timeout_ms": int(self._conf["session.timeout.ms"]),
                "auto.offset.reset": self._conf["auto.offset.reset"],
                "max.poll.interval.ms": int(self._conf["max.poll.interval.ms"]),
            },
        )
        with self._lock:
            self._member_id = body["member_id"]
            self._acked = body["generation"]  # a joining member has nothing to give up yet
            self._lost = False
            self._applied = -1
            self._latest = (body["generation"], assigned_partitions(body["assignment"]))

    def _heartbeats(self) -> None:
        interval = self._conf["heartbeat.interval.ms"] / 1000
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if self._stopped_polling():
                    self._leave_for_poll_interval()
                self._heartbeat()
            except KafkaStorageError as e:
                log.warning("heartbeat of group '%s' failed (%s); retrying in %.1f s", self.group, e, interval)
            except LogstoreError as e:
                self._record(e)
            except Exception as e:  # reported to the caller by the next poll(), never swallowed
                log.exception("heartbeat of group '%s' failed", self.group)
                self._record(UnknownServerError(f"heartbeat failed: {e!r}"))

    def _stopped_polling(self) -> bool:
        """The application has not polled for longer than ``max.poll.interval.ms`` (and is not polling now)."""
        return not self._in_poll and time.monotonic() - self._polled_at > self._max_poll_s

    def _poll_exceeded_message(self) -> str:
        return (
            f"consumer of group '{self.group}' did not poll within max.poll.interval.ms="
            f"{self._conf['max.poll.interval.ms']}: it left the group and its partitions went to other members; "
            f"the next poll joins again"
        )

    def _leave_for_poll_interval(self) -> None:
        """Leave the group (on the heartbeat thread): the application stopped polling, so others take over."""
        with self._lock:
            member = self._member_id
            if member is None or self._lost:
                return
            self._lost = True
            self._poll_exceeded = self._poll_exceeded_message()
        log.warning("%s", self._poll_exceeded)
        # already gone (the server enforces the bound too), or unreachable (its session then expires)
        with contextlib.suppress(UnknownMemberIdError, KafkaStorageError):
            self._call(self._hb_client, "DELETE", f"/v1/groups/{self.group}/members/{member}")

    def _heartbeat(self) -> None:
        with self._lock:
            member, acked = self._member_id, self._acked
        if member is None or self._lost:
            return
        try:
            body = self._call(
                self._hb_client,
                "POST",
                f"/v1/groups/{self.group}/members/{member}/heartbeat",
                json={"generation": acked},
            )
        except UnknownMemberIdError as e:
            with self._lock:
                if self._member_id == member:
                    self._lost = True  # poll() gives everything up and joins again
                    # The server's bound on fetches fired before this thread's: it counts from the last
                    # fetch, which comes before the end of the poll this side counts from, so it can fire
                    # while this side's clock is still just under the bound (its reason names the bound).
                    if self._stopped_polling() or "max.poll.interval.ms" in str(e):
                        self._poll_exceeded = self._poll_exceeded_message()
            return
        with self._lock:
            if self._member_id == member and body["generation"] >= self._latest[0]:
                self._latest = (body["generation"], assigned_partitions(body["assignment"]))

    def _apply_assignment(self) -> None:
        """Apply what the coordinator sent: revoke (callbacks, commits), then assign; acknowledge."""
        if self._lost:
            lost = sorted(self._assignment)
            self._buffer.clear()
            self._assignment.clear()
            self._positions.clear()
            if lost and self._on_revoke is not None:
                self._on_revoke(self, lost)  # fenced already: its commits would be refused
            with self._lock:
                exceeded, self._poll_exceeded = self._poll_exceeded, None
            if exceeded is not None:
                raise UnknownMemberIdError(exceeded)  # still lost: the next poll joins again
            self._join()
        with self._lock:
            generation, target = self._latest
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
                    log.warning("group '%s': commit of revoked partitions failed: %s", self.group, e)
            self._wait_commits()
            for tp in revoked:
                self._positions.pop(tp, None)
        self._assignment = set(target)
        self._applied = generation
        with self._lock:
            self._acked = generation
        if revoked:
            self._wake.set()  # acknowledge now: the new owners are waiting for it
        if added and self._on_assign is not None:
            self._on_assign(self, sorted(added))

    def _rebalance_waiting(self, generation: str | None) -> bool:
        """A fetch answered with a newer generation than the member knows: the coordinator has a change for it."""
        if generation is None or not generation.isdigit():
            return False  # a server without the header: heartbeats alone bring changes
        with self._lock:
            return int(generation) > self._latest[0]

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
            r = self._client.get(
                f"/v1/groups/{self.group}/members/{self._member_id}/records",
                params={"max_records": max_records or int(self._conf["max.poll.records"]), "wait_ms": wait_ms},
                headers={"Accept": ARROW_STREAM},
            )
        except httpx.TransportError as e:
            raise self._unreachable(e) from e
        try:
            raise_for(r)
        except UnknownMemberIdError:
            self._lost = True
            return
        except NotCoordinatorError:
            return  # the group's coordinator is moving (a node left): the next poll asks again
        records = decode_member_records(r.content)
        if self._rebalance_waiting(r.headers.get(GENERATION_HEADER)):
            self._heartbeat()  # learn the new assignment now, not at the next heartbeat.interval.ms
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
            self._heartbeat()
            self._apply_assignment()
        dropped = {(tp.topic, tp.partition) for tp in fetched - self._assignment}
        timestamps = pc.divide(records["timestamp"].cast(pa.int64()), 1000).to_pylist()  # µs → ms
        column = records["headers"]
        headers: Iterable[list[tuple[str, bytes | None]] | None] = (
            itertools.repeat(None)  # the usual case: no record has headers, no per-record work
            if column.null_count == len(column)
            else [[(x["key"], x["value"]) for x in h] if h else None for h in column.to_pylist()]
        )
        messages: Iterable[Message] = map(
            Message,
            topics,
            partitions,
            records["offset"].to_pylist(),
            records["key"].to_pylist(),
            records["value"].to_pylist(),
            headers,
            timestamps,
        )
        if dropped:
            messages = (m for m in messages if (m._topic, m._partition) not in dropped)
        self._buffer.extend(messages)

    def _commit_now(self, offsets: Mapping[TopicPartition, int]) -> None:
        """One commit on the committer thread; retried once with a fresh generation after a rebalance."""
        for attempt in range(2):
            with self._lock:
                member, generation = self._member_id, self._latest[0]
            try:
                self._call(
                    self._commit_client,
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
                self._heartbeat()

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
        with self._lock:
            self._errors.append(error)

    def _raise_errors(self) -> None:
        with self._lock:
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]
