"""The Python :class:`Producer`: batching, routing to partition leaders, idempotent retries, delivery callbacks.

It follows confluent-kafka and aiokafka: ``produce()`` only buffers; a sender
thread sends one batch per topic when ``linger_ms`` has passed or
``batch_records`` are waiting, and retries retriable failures with the same
``(producer_id, sequence)`` — idempotent by default, so a retry never writes a
record twice. Delivery callbacks run on the sender thread.

Routing (docs/design.md §8): the sender asks the cluster for its metadata at start,
every ``metadata_max_age_ms`` and when a topic is unknown to it, splits each
batch by partition leader (:func:`~logstore.client._routing.plan_routes`) and
sends a leader its records with ``?forward=false``. A node that is not the
leader any more answers 421 ``NOT_LEADER_OR_FOLLOWER``: the sender refreshes
the metadata and resends the same request (same producer id and sequence)
to the new leader. A node it cannot reach makes it ask another node for
metadata and retry, until ``delivery_timeout_ms``. Keyless records go to any
live node, round-robin per batch, which places them. An embedded server is a
one-node cluster: every batch goes to it whole, as one request.

Idempotence (docs/design.md §3): one producer id for every topic and
partition, one sequence per request, increasing per topic. Nodes check it per
partition, so a request whose records have several leaders by the time it is
retried goes to a node that splits it, and the shares that landed the first
time answer with their original offsets. A request that fails for good leaves
a gap in the sequences, which the nodes accept.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pyarrow as pa

from logstore.client._http import raise_for
from logstore.client._routing import ClusterView, Nodes, Route, is_leadership_error, plan_routes
from logstore.common.logs import describe
from logstore.errors import (
    KafkaStorageError,
    LogstoreError,
)
from logstore.log.schema import HEADERS_TYPE
from logstore.wire.arrow_produce import ARROW_STREAM, PRODUCER_ID_HEADER, SEQUENCE_HEADER, encode_produce

__all__ = ["DeliveryCallback", "Producer", "RecordMetadata"]

log = logging.getLogger("logstore.client")

_UNKNOWN_TOPIC_REFRESH_S = 0.1
"""Least time between two metadata refreshes for a topic the view does not know (Kafka's retry.backoff.ms)."""


@dataclass(frozen=True)
class RecordMetadata:
    """Where a produced record landed."""

    topic: str
    partition: int
    offset: int


DeliveryCallback = Callable[[LogstoreError | None, RecordMetadata | None], None]
"""``on_delivery(error, metadata)``: exactly one of them is None."""


@dataclass(frozen=True)
class _Record:
    value: bytes | None
    headers: list[dict[str, str | bytes | None]] | None
    """``[{"key": str, "value": bytes | None}]`` in the order given."""
    timestamp_ms: int | None


@dataclass
class _TopicBuffer:
    records: list[_Record] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    partitions: list[int | None] = field(default_factory=list)
    callbacks: list[DeliveryCallback | None] = field(default_factory=list)
    first_at: float = 0.0


class Producer:
    """Buffers records and sends them in batches to the leaders of their partitions.

    Args:
        url: the bootstrap servers, e.g. ``http://127.0.0.1:8080``, or several separated by commas
            (``"http://a:8080,http://b:8080"``, like Kafka's ``bootstrap.servers``): any of them that
            answers tells the producer every node of the cluster.
        acks: ``"0"``, ``"1"`` or ``"all"`` (default): see docs/design.md §3.
        linger_ms: how long a batch waits for more records before it is sent.
        batch_records: records that trigger a send without waiting for linger_ms.
        enable_idempotence: send ``producer_id`` + ``sequence`` so retries never duplicate.
        delivery_timeout_ms: give up on a batch (error to its callbacks) after this long.
        api_key: the API key of a secured server (default: ``$LOGSTORE_API_KEY``).
        ca_file: a PEM CA bundle to verify an ``https://`` server with (default: the system's).
        metadata_max_age_ms: refresh the cluster metadata at least this often, even without an error.
        client_cert: (certificate, private key) PEM files to present to a server that asks for
            client certificates; with no API key, the certificate names the principal.
        retry_backoff_max_ms: the longest wait between two retries of a request to the same node (the wait
            doubles from 10 ms; Kafka's ``retry.backoff.max.ms``); a retry to another node (a new leader) waits 10 ms.

    Raises:
        ValueError: an invalid ``acks`` or no bootstrap URL.
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
        metadata_max_age_ms: int = 300_000,
        client_cert: tuple[str, str] | None = None,
        retry_backoff_max_ms: int = 1000,
    ) -> None:
        if acks not in ("0", "1", "all"):
            raise ValueError("acks must be '0', '1' or 'all'")
        self._nodes = Nodes(url, timeout_s=30, api_key=api_key, ca_file=ca_file, client_cert=client_cert)
        self._metadata_max_age = metadata_max_age_ms / 1000
        self._sequences: dict[str, int] = {}
        """Topic → the next sequence of this producer id there; the sender thread's alone."""
        self._unknown_asked: dict[str, float] = {}
        """Topic the metadata did not know → when it was last refreshed for it; the sender thread's alone."""
        self._acks = acks
        self._linger = linger_ms / 1000
        self._batch_records = batch_records
        self._producer_id = f"py-{uuid.uuid4().hex}" if enable_idempotence else None
        self._delivery_timeout = delivery_timeout_ms / 1000
        self._retry_backoff_max = retry_backoff_max_ms / 1000
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
        if partition is not None and not 0 <= partition < 2**31:
            raise ValueError(f"partition must be in 0..2^31-1, got {partition}")
        if timestamp_ms is not None and not -(2**63) <= timestamp_ms < 2**63:
            raise ValueError(f"timestamp_ms must be an int64 (ms since the epoch), got {timestamp_ms}")
        raw_key = key.encode() if isinstance(key, str) else key
        record = _Record(
            _raw(value),
            [{"key": k, "value": _raw(v)} for k, v in headers.items()] if headers else None,
            timestamp_ms,
        )
        with self._cond:
            if self._closed:
                raise RuntimeError("producer is closed")
            buf = self._buffers.setdefault(topic, _TopicBuffer())
            if not buf.records:
                buf.first_at = time.monotonic()
            buf.records.append(record)
            buf.keys.append(raw_key)
            buf.partitions.append(partition)
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
        self._nodes.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pending(self) -> int:
        return sum(len(b.records) for b in self._buffers.values()) + self._in_flight

    def _run(self) -> None:
        self._refresh()
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
                n = min(len(buf.records), self._batch_records)
                records, keys, parts, callbacks = buf.records[:n], buf.keys[:n], buf.partitions[:n], buf.callbacks[:n]
                del buf.records[:n], buf.keys[:n], buf.partitions[:n], buf.callbacks[:n]
                buf.first_at = time.monotonic()
                self._in_flight += n
            try:
                self._send(ready, records, keys, parts, callbacks)
            finally:
                with self._cond:
                    self._in_flight -= len(records)
                    self._cond.notify_all()

    def _refresh(self, avoid: str | None = None) -> ClusterView | None:
        """Refresh the metadata; a server's error is logged and the old view kept (the sender must not die)."""
        try:
            return self._nodes.refresh(avoid)
        except LogstoreError as e:
            log.warning("cannot refresh cluster metadata: %s", describe(e))
            return self._nodes.view

    def _view_for(self, topic: str) -> ClusterView | None:
        """The metadata to route ``topic`` by, refreshed when old or when it does not know the topic.

        A topic the view does not know is asked about at once the first time
        (it may have just been created), then at most every
        ``_UNKNOWN_TOPIC_REFRESH_S`` while it stays unknown.
        """
        now = time.monotonic()
        view, age = self._nodes.view, now - self._nodes.refreshed_at
        unknown = self._nodes.routable and (view is None or topic not in view.leaders)
        asked = self._unknown_asked.get(topic)
        if unknown and (asked is None or now - asked >= _UNKNOWN_TOPIC_REFRESH_S):
            self._unknown_asked[topic] = now
            return self._refresh()
        if not unknown:
            self._unknown_asked.pop(topic, None)
        return self._refresh() if age >= self._metadata_max_age else view

    def _send(
        self,
        topic: str,
        records: list[_Record],
        keys: list[bytes | None],
        parts: list[int | None],
        callbacks: list[DeliveryCallback | None],
    ) -> None:
        deadline = time.monotonic() + self._delivery_timeout
        routes = plan_routes(self._view_for(topic), topic, keys, parts, any_url=self._nodes.next_url())
        results: list[Any] = [None] * len(records)
        errors: list[LogstoreError | None] = [None] * len(records)
        for route in routes:
            sub_keys, sub_parts = [keys[i] for i in route.indexes], [parts[i] for i in route.indexes]
            body = _arrow_body([records[i] for i in route.indexes], sub_keys, sub_parts)
            headers = {"content-type": ARROW_STREAM}
            if self._producer_id is not None:
                # One sequence per request, increasing per topic: the nodes check it per partition, so a
                # request may span leaders (a node splits it) and a failed one leaves a gap, never a block.
                seq = self._sequences.get(topic, 0)
                self._sequences[topic] = seq + 1
                headers |= {PRODUCER_ID_HEADER: self._producer_id, SEQUENCE_HEADER: str(seq)}
            offsets, error = self._deliver(topic, body, headers, route, sub_keys, sub_parts, deadline)
            for j, i in enumerate(route.indexes):
                results[i] = offsets[j] if offsets is not None else None
                errors[i] = error if offsets is None else None
        for i, cb in enumerate(callbacks):
            if cb is None:
                continue
            if errors[i] is not None:
                cb(errors[i], None)
            else:
                o = results[i]
                cb(None, RecordMetadata(topic, o["partition"], o["offset"]) if o else None)

    def _deliver(
        self,
        topic: str,
        body: bytes,
        headers: dict[str, str],
        route: Route,
        keys: list[bytes | None],
        parts: list[int | None],
        deadline: float,
    ) -> tuple[list[Any] | None, LogstoreError | None]:
        """Send one request until it succeeds, fails for good or ``deadline`` passes: (offsets, error).

        Offsets are None per record for acks=0. Retries go to the leader the
        refreshed metadata names, with the same body, so they are idempotent.
        """
        url, forward = route.url, route.forward
        backoff = 0.01
        error: LogstoreError
        while True:
            params = {"acks": self._acks} | ({} if forward else {"forward": "false"})
            tried = url
            named: str | None = None
            try:
                r = self._nodes.client(url).post(
                    f"/v1/topics/{topic}/records", params=params, content=body, headers=headers
                )
                named = _named_leader(r)
                raise_for(r)
                return (r.json()["offsets"] if r.status_code == 200 else [None] * len(keys)), None
            except httpx.TransportError as e:
                error = KafkaStorageError(f"cannot reach {url}: {e}")
                url, forward = self._retarget(topic, keys, parts, avoid=url)
            except LogstoreError as e:
                error = e
                if not e.retriable:
                    return None, e
                if is_leadership_error(e):
                    url, forward = self._retarget(topic, keys, parts, refused=url, named=named)
            if url != tried:
                backoff = 0.01  # backing off is for a node that keeps failing, not for a new leader
            if time.monotonic() + backoff > deadline:
                return None, error
            time.sleep(backoff)  # retriable: the same sequence again, so nothing is written twice
            backoff = min(self._retry_backoff_max, backoff * 2)

    def _retarget(
        self,
        topic: str,
        keys: list[bytes | None],
        parts: list[int | None],
        *,
        avoid: str | None = None,
        refused: str | None = None,
        named: str | None = None,
    ) -> tuple[str, bool]:
        """Where to resend records after a failure: refresh the metadata, then route them again.

        ``avoid`` is a node that could not be reached (asked last for metadata);
        ``refused`` a node that answered it is not the leader, ``named`` the
        leader its 421 named, which wins over metadata that still names the
        refusing node (a view not updated yet). Records that now have more
        than one leader go to a node that forwards them.
        """
        view = self._refresh(avoid)
        any_url = named or self._nodes.next_url(avoid=avoid or refused)
        routes = plan_routes(view, topic, keys, parts, any_url=any_url)
        if len(routes) == 1:
            route = routes[0]
            if named is not None and route.url == refused:
                return named, False
            return route.url, route.forward
        return any_url, True


def _named_leader(r: httpx.Response) -> str | None:
    """The leader's URL a 421 ``NOT_LEADER_OR_FOLLOWER`` answer names (``{"leader": {"node_id", "url"}}``)."""
    if r.status_code != 421:
        return None
    try:
        leader = r.json().get("leader") or {}
    except ValueError:
        return None
    url = leader.get("url")
    return url.rstrip("/") if isinstance(url, str) else None


def _arrow_body(records: list[_Record], keys: list[bytes | None], parts: list[int | None]) -> bytes:
    """One request's records as an Arrow produce body; columns every record leaves null are left out."""
    columns: dict[str, pa.Array] = {"value": pa.array([r.value for r in records], pa.binary())}
    if any(k is not None for k in keys):
        columns["key"] = pa.array(keys, pa.binary())
    if any(p is not None for p in parts):
        columns["partition"] = pa.array(parts, pa.int32())
    if any(r.timestamp_ms is not None for r in records):
        columns["timestamp"] = pa.array([r.timestamp_ms for r in records], pa.int64())
    if any(r.headers for r in records):
        columns["headers"] = pa.array([r.headers for r in records], HEADERS_TYPE)
    return encode_produce(pa.table(columns))


def _raw(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value
