"""Python clients for a running logstore server: :class:`Producer`, :class:`Consumer` and :class:`RemoteStore`.

They speak the HTTP API of DESIGN §3 with ``httpx``; the rest of the core
never imports them.

``Producer`` follows confluent-kafka and aiokafka: ``produce()`` only buffers;
a sender thread sends one batch per topic when ``linger_ms`` has passed or
``batch_records`` are waiting, and retries retriable failures with the same
``(producer_id, sequence)`` — idempotent by default, so a retry never writes a
record twice. Delivery callbacks run on the sender thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pyarrow as pa

from logstore.codec import decode_bytes, encode_bytes
from logstore.config import TopicConfig
from logstore.coordinator import MemberState
from logstore.errors import (
    ERRORS_BY_NAME,
    IllegalGenerationError,
    InvalidConfigError,
    InvalidRequestError,
    KafkaStorageError,
    LogstoreError,
    UnknownMemberIdError,
    UnknownServerError,
)
from logstore.schema import input_table
from logstore.structs import (
    FetchResult,
    GroupOffset,
    GroupTopicPartition,
    OffsetCommit,
    PartitionInfo,
    TopicInfo,
    TopicPartition,
)

__all__ = [
    "TIMESTAMP_CREATE_TIME",
    "Consumer",
    "DeliveryCallback",
    "Message",
    "Producer",
    "RebalanceCallback",
    "RecordMetadata",
    "RemoteStore",
]

log = logging.getLogger("logstore.client")


@dataclass(frozen=True)
class RecordMetadata:
    """Where a produced record landed."""

    topic: str
    partition: int
    offset: int


DeliveryCallback = Callable[[LogstoreError | None, RecordMetadata | None], None]
"""``on_delivery(error, metadata)``: exactly one of them is None."""


def _json_headers(h: dict[str, Any] | list[dict[str, Any]]) -> list[tuple[str, bytes | None]]:
    """A fetched record's headers in order: the API sends an object, or a list of ``{key, value}`` if a key repeats."""
    if isinstance(h, dict):
        return [(k, decode_bytes(f"header {k}", v)) for k, v in h.items()]
    return [(x["key"], decode_bytes(f"header {x['key']}", x["value"])) for x in h]


def _http_client(url: str, *, timeout_s: float, api_key: str | None, ca_file: str | None) -> httpx.Client:
    """An HTTP client for ``url``: the API key as a bearer token, TLS verified against ``ca_file`` if given.

    ``api_key`` None falls back to ``LOGSTORE_API_KEY``; no key at all sends none (an open server).
    """
    key = api_key if api_key is not None else os.environ.get("LOGSTORE_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else None
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
    return httpx.Client(base_url=url, timeout=timeout_s, headers=headers, verify=verify)


def _raise_for(r: httpx.Response) -> None:
    if r.status_code < 400:
        return
    try:
        body = r.json()
        cls = ERRORS_BY_NAME.get(body.get("error_code", ""), UnknownServerError)
        raise cls(body.get("message", r.text))
    except ValueError:
        raise UnknownServerError(f"HTTP {r.status_code}: {r.text[:200]}") from None


@dataclass
class _TopicBuffer:
    records: list[dict[str, Any]] = field(default_factory=list)
    callbacks: list[DeliveryCallback | None] = field(default_factory=list)
    first_at: float = 0.0
    sequence: int = 0


class Producer:
    """Buffers records and sends them in batches to a logstore server.

    Args:
        url: the server, e.g. ``http://127.0.0.1:8080``.
        acks: ``"0"``, ``"1"`` or ``"all"`` (default): see DESIGN §3.
        linger_ms: how long a batch waits for more records before it is sent.
        batch_records: records that trigger a send without waiting for linger_ms.
        enable_idempotence: send ``producer_id`` + ``sequence`` so retries never duplicate.
        delivery_timeout_ms: give up on a batch (error to its callbacks) after this long.
        api_key: the API key of a secured server (default: ``$LOGSTORE_API_KEY``).
        ca_file: a PEM CA bundle to verify an ``https://`` server with (default: the system's).
    """

    def __init__(
        self,
        url: str,
        *,
        acks: str = "all",
        linger_ms: int = 5,
        batch_records: int = 1000,
        enable_idempotence: bool = True,
        delivery_timeout_ms: int = 120_000,
        api_key: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        if acks not in ("0", "1", "all"):
            raise ValueError("acks must be '0', '1' or 'all'")
        self._client = _http_client(url, timeout_s=30, api_key=api_key, ca_file=ca_file)
        self._acks = acks
        self._linger = linger_ms / 1000
        self._batch_records = batch_records
        self._producer_id = f"py-{uuid.uuid4().hex}" if enable_idempotence else None
        self._delivery_timeout = delivery_timeout_ms / 1000
        self._buffers: dict[str, _TopicBuffer] = {}
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self._sender = threading.Thread(target=self._run, name="logstore-producer", daemon=True)
        self._sender.start()

    def produce(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        headers: Mapping[str, bytes | str | None] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Buffer one record for ``topic``; it is sent by the sender thread."""
        record: dict[str, Any] = {"value": encode_bytes(value)}
        if key is not None:
            record["key"] = encode_bytes(key)
        if headers:
            record["headers"] = {k: encode_bytes(v) for k, v in headers.items()}
        if partition is not None:
            record["partition"] = partition
        if timestamp_ms is not None:
            record["timestamp"] = timestamp_ms
        with self._cond:
            if self._closed:
                raise RuntimeError("producer is closed")
            buf = self._buffers.setdefault(topic, _TopicBuffer())
            if not buf.records:
                buf.first_at = time.monotonic()
            buf.records.append(record)
            buf.callbacks.append(on_delivery)
            self._cond.notify()

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every buffered record is delivered (or failed); returns how many remain."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._cond.notify()
            while self._pending() and (deadline is None or time.monotonic() < deadline):
                self._cond.wait(0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic())))
            return self._pending()

    def close(self) -> None:
        """Flush, then stop the sender thread."""
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._sender.join()
        self._client.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pending(self) -> int:
        return sum(len(b.records) for b in self._buffers.values()) + self._in_flight

    def _run(self) -> None:
        while True:
            with self._cond:
                ready = None
                while ready is None:
                    now = time.monotonic()
                    for topic, buf in self._buffers.items():
                        if buf.records and (
                            len(buf.records) >= self._batch_records
                            or now - buf.first_at >= self._linger
                            or self._closed
                        ):
                            ready = topic
                            break
                    if ready is None:
                        if self._closed:
                            return
                        self._cond.wait(self._linger or 0.001)
                buf = self._buffers[ready]
                records, callbacks = buf.records[: self._batch_records], buf.callbacks[: self._batch_records]
                del buf.records[: len(records)], buf.callbacks[: len(callbacks)]
                buf.first_at = time.monotonic()
                sequence = buf.sequence
                buf.sequence += 1
                self._in_flight += len(records)
            try:
                self._send(ready, records, callbacks, sequence)
            finally:
                with self._cond:
                    self._in_flight -= len(records)
                    self._cond.notify_all()

    def _send(
        self, topic: str, records: list[dict[str, Any]], callbacks: list[DeliveryCallback | None], seq: int
    ) -> None:
        body: dict[str, Any] = {"records": records}
        if self._producer_id is not None:
            body |= {"producer_id": self._producer_id, "sequence": seq}
        deadline = time.monotonic() + self._delivery_timeout
        backoff = 0.01
        error: LogstoreError | None = None
        offsets: list[Any] | None = None
        while offsets is None:
            try:
                r = self._client.post(f"/v1/topics/{topic}/records", params={"acks": self._acks}, json=body)
                _raise_for(r)
                offsets = r.json()["offsets"] if r.status_code == 200 else [None] * len(records)
                break
            except httpx.TransportError as e:
                error = KafkaStorageError(f"cannot reach {self._client.base_url}: {e}")
            except LogstoreError as e:
                error = e
                if not e.retriable:
                    break
            if time.monotonic() + backoff > deadline:
                break
            time.sleep(backoff)  # retriable: the same sequence again, so nothing is written twice
            backoff = min(1.0, backoff * 2)
        for i, cb in enumerate(callbacks):
            if cb is None:
                continue
            if offsets is None:
                cb(error, None)
            else:
                o = offsets[i]
                cb(None, RecordMetadata(topic, o["partition"], o["offset"]) if o else None)


class RemoteStore:
    """Topic, record and group operations of a running server, shaped like :class:`~logstore.store.LogStore`.

    The CLI's ``--server URL`` mode runs on it. ``api_key`` (default:
    ``$LOGSTORE_API_KEY``) and ``ca_file`` as for :class:`Producer`.
    """

    def __init__(
        self, url: str, *, timeout_s: float = 60, api_key: str | None = None, ca_file: str | None = None
    ) -> None:
        self.url = url
        self._client = _http_client(url, timeout_s=timeout_s, api_key=api_key, ca_file=ca_file)

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self._client.request(method, path, **kw)
        except httpx.TransportError as e:
            raise KafkaStorageError(f"cannot reach {self.url}: {e}") from e
        _raise_for(r)
        return r.json() if r.content else None

    def create_topic(self, name: str, partitions: int, config: Mapping[str, Any] | None = None) -> TopicInfo:
        return _topic(
            self._call(
                "POST", "/v1/topics", json={"name": name, "partitions": partitions, "config": dict(config or {})}
            )
        )

    def list_topics(self) -> list[str]:
        return list(self._call("GET", "/v1/topics")["topics"])

    def describe_topic(self, name: str) -> TopicInfo:
        return _topic(self._call("GET", f"/v1/topics/{name}"))

    def alter_topic(
        self, name: str, *, config: Mapping[str, Any] | None = None, partitions: int | None = None
    ) -> TopicInfo:
        return _topic(
            self._call("PATCH", f"/v1/topics/{name}", json={"config": dict(config or {}), "partitions": partitions})
        )

    def delete_topic(self, name: str) -> None:
        self._call("DELETE", f"/v1/topics/{name}")

    def fetch(
        self, topic: str, partition: int, offset: int, *, max_records: int = 500, max_bytes: int = 1 << 20
    ) -> FetchResult:
        """A slice of ``partition`` from ``offset``, as the embedded store returns it."""
        body = self._call(
            "GET",
            f"/v1/topics/{topic}/partitions/{partition}/records",
            params={"offset": offset, "max_records": max_records, "max_bytes": max_bytes},
        )
        recs = body["records"]
        table = input_table(
            [r["partition"] for r in recs],
            [decode_bytes("value", r["value"]) for r in recs],
            keys=[decode_bytes("key", r["key"]) for r in recs],
            timestamps_ms=[r["timestamp"] for r in recs],
            headers=[_json_headers(r["headers"]) for r in recs],
        )
        table = table.append_column("offset", pa.array([r["offset"] for r in recs], pa.int64()))
        return FetchResult(table, body["high_watermark"], body["log_start_offset"])

    def committed(self, group: str, topic: str) -> dict[GroupTopicPartition, OffsetCommit]:
        """``group``'s latest commits on ``topic``; the API reports neither commit time (0) nor metadata (None)."""
        try:
            rows = self.describe_group(group)
        except LogstoreError as e:
            if e.name == "GROUP_ID_NOT_FOUND":
                return {}
            raise
        return {
            GroupTopicPartition(r.group, r.topic, r.partition): OffsetCommit(r.committed_offset, 0, None)
            for r in rows
            if r.topic == topic
        }

    def commit_offsets(
        self, group: str, topic: str, offsets: Mapping[int, int], *, metadata: str | None = None
    ) -> None:
        """Commit ``offsets`` (partition → next offset to read) for ``group``, with ``metadata`` if given."""
        self._call(
            "POST",
            f"/v1/groups/{group}/offsets",
            json={"topic": topic, "partitions": {str(p): o for p, o in offsets.items()}, "metadata": metadata},
        )

    def list_groups(self) -> list[str]:
        return list(self._call("GET", "/v1/groups")["groups"])

    def describe_group(self, group: str) -> list[GroupOffset]:
        body = self._call("GET", f"/v1/groups/{group}")
        return [
            GroupOffset(group, t["topic"], p["partition"], p["committed_offset"], p["high_watermark"])
            for t in body["topics"]
            for p in t["partitions"]
        ]

    def group_members(self, group: str) -> list[MemberState]:
        """The group's live members (id, generation, assignment); empty when it has none."""
        try:
            body = self._call("GET", f"/v1/groups/{group}")
        except LogstoreError as e:
            if e.name == "GROUP_ID_NOT_FOUND":
                return []
            raise
        return [
            MemberState(m["member_id"], m["generation"], tuple(sorted(_partitions(m["assignment"]))))
            for m in body.get("members", [])
        ]

    def reset_offsets(self, group: str, topic: str, to: str | dict[str, int]) -> dict[int, int]:
        body = self._call("POST", f"/v1/groups/{group}/reset", json={"topic": topic, "to": to})
        return {
            p["partition"]: p["committed_offset"]
            for t in body["topics"]
            if t["topic"] == topic
            for p in t["partitions"]
        }


def _topic(body: dict[str, Any]) -> TopicInfo:
    parts = tuple(
        PartitionInfo(p["partition"], p["log_start_offset"], p["high_watermark"], p["size_bytes"])
        for p in body["partitions"]
    )
    config = TopicConfig.from_overrides(body.get("config", {}))
    defaults = TopicConfig().to_dict()
    overrides = {k: str(v) for k, v in config.to_dict().items() if v != defaults[k]}
    return TopicInfo(body["name"], parts, config, overrides)


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
        headers: list[tuple[str, bytes | None]],
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
    "partition.assignment.strategy": "range",
    "max.poll.records": 500,
    "api.key": None,
    "ssl.ca.location": None,
}


class Consumer:
    """A member of a consumer group on a logstore server, shaped like confluent-kafka's ``Consumer``.

    Config is a dict of Kafka's dotted keys (keyword arguments with ``_`` for
    ``.`` are merged over it): ``bootstrap.servers`` (the server URL, also
    ``url``), ``group.id`` (required), ``auto.offset.reset`` (``latest``),
    ``enable.auto.commit`` (True: positions are committed every
    ``auto.commit.interval.ms`` and before a partition is given up),
    ``session.timeout.ms`` (45000), ``heartbeat.interval.ms`` (3000),
    ``partition.assignment.strategy`` (``range``, ``roundrobin`` or
    ``cooperative-sticky``), ``max.poll.records`` (500 per fetch), ``api.key``
    (a secured server's API key; default ``$LOGSTORE_API_KEY``) and
    ``ssl.ca.location`` (a PEM CA bundle for an ``https://`` server).

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
        url = str(conf["bootstrap.servers"])
        self._url = url if "://" in url else f"http://{url}"
        key, ca = conf["api.key"], conf["ssl.ca.location"]
        self._client = _http_client(self._url, timeout_s=60, api_key=key, ca_file=ca)
        self._hb_client = _http_client(self._url, timeout_s=30, api_key=key, ca_file=ca)
        self._commit_client = _http_client(self._url, timeout_s=60, api_key=key, ca_file=ca)
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
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while True:
            self._raise_errors()
            self._apply_assignment()
            self._maybe_auto_commit()
            if self._buffer:
                out = [self._buffer.popleft() for _ in range(min(num_messages, len(self._buffer)))]
                for m in out:
                    self._positions[TopicPartition(m.topic(), m.partition())] = m.offset() + 1
                return out
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
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

    def _call(self, client: httpx.Client, method: str, path: str, **kw: Any) -> Any:
        try:
            r = client.request(method, path, **kw)
        except httpx.TransportError as e:
            raise KafkaStorageError(f"cannot reach {self._url}: {e}") from e
        _raise_for(r)
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
            },
        )
        with self._lock:
            self._member_id = body["member_id"]
            self._acked = body["generation"]  # a joining member has nothing to give up yet
            self._lost = False
            self._applied = -1
            self._latest = (body["generation"], _partitions(body["assignment"]))

    def _heartbeats(self) -> None:
        interval = self._conf["heartbeat.interval.ms"] / 1000
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._heartbeat()
            except KafkaStorageError as e:
                log.warning("heartbeat of group '%s' failed (%s); retrying in %.1f s", self.group, e, interval)
            except LogstoreError as e:
                self._record(e)
            except Exception as e:  # reported to the caller by the next poll(), never swallowed
                log.exception("heartbeat of group '%s' failed", self.group)
                self._record(UnknownServerError(f"heartbeat failed: {e!r}"))

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
        except UnknownMemberIdError:
            with self._lock:
                if self._member_id == member:
                    self._lost = True  # poll() gives everything up and joins again
            return
        with self._lock:
            if self._member_id == member and body["generation"] >= self._latest[0]:
                self._latest = (body["generation"], _partitions(body["assignment"]))

    def _apply_assignment(self) -> None:
        """Apply what the coordinator sent: revoke (callbacks, commits), then assign; acknowledge."""
        if self._lost:
            lost = sorted(self._assignment)
            self._buffer.clear()
            self._assignment.clear()
            self._positions.clear()
            if lost and self._on_revoke is not None:
                self._on_revoke(self, lost)  # fenced already: its commits would be refused
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

    def _fetch(self, wait_ms: int) -> None:
        try:
            body = self._call(
                self._client,
                "GET",
                f"/v1/groups/{self.group}/members/{self._member_id}/records",
                params={"max_records": int(self._conf["max.poll.records"]), "wait_ms": wait_ms},
            )
        except UnknownMemberIdError:
            self._lost = True
            return
        # Apply any change first: records of a partition revoked meanwhile are never delivered.
        self._apply_assignment()
        if any(TopicPartition(r["topic"], r["partition"]) not in self._assignment for r in body["records"]):
            # The coordinator gave us a partition our heartbeat has not told us of yet: learn it now
            # rather than drop its records (the group's position has already moved past them).
            self._heartbeat()
            self._apply_assignment()
        for r in body["records"]:
            tp = TopicPartition(r["topic"], r["partition"])
            if tp not in self._assignment:
                continue
            self._buffer.append(
                Message(
                    r["topic"],
                    r["partition"],
                    r["offset"],
                    decode_bytes("key", r["key"]),
                    decode_bytes("value", r["value"]),
                    _json_headers(r["headers"]),
                    r["timestamp"],
                )
            )

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


def _partitions(assignment: list[dict[str, Any]]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(a["topic"], a["partition"]) for a in assignment)
