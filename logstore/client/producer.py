"""The Python :class:`Producer`: batching, routing to partition leaders, idempotent retries, delivery callbacks.

It follows confluent-kafka and aiokafka: ``produce()`` only buffers; a sender
thread sends one batch per topic when ``linger.ms`` has passed or
``batch.num.messages`` are waiting, and retries retriable failures with the same
``(producer_id, sequence)`` — idempotent by default, so a retry never writes a
record twice. Delivery callbacks run as confluent-kafka's do: in the
application's thread, inside :meth:`Producer.poll`, :meth:`Producer.flush`
and :meth:`Producer.close`; the sender thread only queues their reports.

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
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pyarrow as pa

from logstore.client._config import producer_config
from logstore.client._http import raise_for
from logstore.client._routing import ClusterView, Nodes, Route, is_leadership_error, plan_routes
from logstore.client._transactions import Transactions
from logstore.client.message import Message
from logstore.common.logs import describe
from logstore.errors import (
    InvalidTxnStateError,
    LogstoreError,
    NetworkExceptionError,
    UnknownServerError,
)
from logstore.log.schema import HEADERS_TYPE
from logstore.structs import OFFSET_INVALID, TopicPartition
from logstore.wire.arrow_produce import ARROW_STREAM, PRODUCER_ID_HEADER, SEQUENCE_HEADER, encode_produce

__all__ = ["DeliveryCallback", "Producer"]

log = logging.getLogger("logstore.client")

_UNKNOWN_TOPIC_REFRESH_S = 0.1
"""Least time between two metadata refreshes for a topic the view does not know (Kafka's retry.backoff.ms)."""


DeliveryCallback = Callable[[LogstoreError | None, Message], None]
"""``on_delivery(err, msg)`` as confluent-kafka's: ``err`` is None when the record was written, and
``msg.topic()``, ``msg.partition()``, ``msg.offset()`` say where (``msg.error()`` is ``err``)."""

Headers = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]]
"""A dict, or (key, value) pairs in order (a key may repeat), as confluent-kafka takes them."""


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
    """Buffers records and sends them in batches to the leaders of their partitions, shaped like confluent-kafka's.

    Config is confluent-kafka's dict of Kafka's dotted keys; keyword arguments
    name the same keys with ``_`` for ``.`` and are merged over it
    (``Producer({"bootstrap.servers": "127.0.0.1:8080", "linger.ms": 5})``,
    ``Producer("http://127.0.0.1:8080", linger_ms=5)``). Keys:

    * ``bootstrap.servers`` (also the first argument, or ``url``): ``host:port``
      or URLs, several separated by commas; any that answers tells the
      producer every node of the cluster. Without a scheme: ``http://``, or
      ``https://`` with ``security.protocol=SSL``.
    * ``acks``: ``all`` (default, also ``-1``), ``1`` or ``0`` (docs/design.md §3).
    * ``linger.ms`` (5): how long a batch waits for more records;
      ``batch.num.messages`` (1000; also ``batch_records``): records that trigger a send at once.
    * ``enable.idempotence`` (true): send ``producer_id`` + ``sequence`` so retries never duplicate.
    * ``delivery.timeout.ms`` (120000): give up on a batch (an error to its callbacks) after this long.
    * ``metadata.max.age.ms`` (300000): refresh the cluster metadata at least this often.
    * ``retry.backoff.max.ms`` (1000): the longest wait between two retries to the same node (the wait
      doubles from 10 ms); a retry to another node (a new leader) waits 10 ms.
    * ``api.key``: a secured server's API key (default ``$LOGSTORE_API_KEY``); ``ssl.ca.location`` (also
      ``ca_file``): a PEM CA bundle for ``https://``; ``ssl.certificate.location`` and ``ssl.key.location``
      (also ``client_cert=(cert, key)``): a client certificate, which names the principal without an API key.
    * ``on_delivery``: the delivery callback of records produced without one.
    * ``transactional.id``: a transactional producer (docs/transactions.md): call :meth:`init_transactions`
      once, then :meth:`begin_transaction`, :meth:`produce`, :meth:`send_offsets_to_transaction`,
      :meth:`commit_transaction` or :meth:`abort_transaction`. Its records are delivered (callbacks run) with
      offset ``OFFSET_INVALID``: they get offsets when the transaction commits (:meth:`commit_transaction`
      returns them). ``transaction.timeout.ms`` (60000): the node aborts a transaction open longer.

    Delivery callbacks run in the caller's thread inside :meth:`poll`, :meth:`flush` and :meth:`close`
    (an exception a callback raises comes out of that call).

    Raises:
        InvalidConfigError: an unknown key (named, with the known ones), a value of the wrong type,
            or no ``bootstrap.servers``.
    """

    def __init__(self, config: Mapping[str, Any] | str | None = None, /, **kwargs: Any) -> None:
        conf = producer_config(config, kwargs)
        cert_file = conf["ssl.certificate.location"]
        self._nodes = Nodes(
            conf["bootstrap.servers"],
            timeout_s=30,
            api_key=conf["api.key"],
            ca_file=conf["ssl.ca.location"],
            client_cert=(cert_file, conf["ssl.key.location"] or cert_file) if cert_file else None,
        )
        self._metadata_max_age = conf["metadata.max.age.ms"] / 1000
        self._sequences: dict[str, int] = {}
        """Topic → the next sequence of this producer id there; the sender thread's alone."""
        self._unknown_asked: dict[str, float] = {}
        """Topic the metadata did not know → when it was last refreshed for it; the sender thread's alone."""
        self._acks: str = conf["acks"]
        self._linger = conf["linger.ms"] / 1000
        self._batch_records: int = conf["batch.num.messages"]
        tid = conf["transactional.id"]
        self._transactions = (
            Transactions(str(tid), conf["transaction.timeout.ms"], self._nodes.call) if tid is not None else None
        )
        # A transaction is idempotent itself (its records are appended once, at commit).
        self._producer_id = f"py-{uuid.uuid4().hex}" if conf["enable.idempotence"] and tid is None else None
        self._delivery_timeout = conf["delivery.timeout.ms"] / 1000
        self._retry_backoff_max = conf["retry.backoff.max.ms"] / 1000
        self._on_delivery: DeliveryCallback | None = conf["on_delivery"]
        self._buffers: dict[str, _TopicBuffer] = {}
        self._cond = threading.Condition()
        self._in_flight = 0
        self._reports: deque[tuple[DeliveryCallback, LogstoreError | None, Message]] = deque()
        """Delivery reports the sender queued for :meth:`poll` to run."""
        self._closed = False
        self._sender = threading.Thread(target=self._run, name="logstore-producer", daemon=True)
        self._sender.start()

    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Headers | None = None,
        *,
        callback: DeliveryCallback | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Buffer one record for ``topic``; the sender thread sends it, :meth:`poll` reports its delivery.

        As confluent-kafka's ``produce``: ``partition`` None or -1 lets the key
        choose (murmur2, as Kafka's), ``timestamp`` is ms since the epoch (0:
        none, the node stamps the record), ``on_delivery`` (or ``callback``)
        overrides the config's. ``timestamp_ms`` is ``timestamp`` where 0 means
        the epoch itself.

        Raises:
            ValueError: a partition or timestamp out of range.
            TypeError: a value, key or header that is not bytes, str or None (a header key: str).
            RuntimeError: the producer is closed.
        """
        if partition == -1:
            partition = None
        if partition is not None and not 0 <= partition < 2**31:
            raise ValueError(f"partition must be in 0..2^31-1 (or -1: by key), got {partition}")
        if timestamp_ms is None and timestamp:
            timestamp_ms = timestamp
        if timestamp_ms is not None and not -(2**63) <= timestamp_ms < 2**63:
            raise ValueError(f"timestamp must be an int64 (ms since the epoch), got {timestamp_ms}")
        record, raw_key = _record_of(value, key, headers, timestamp_ms)
        if self._transactions is not None:
            self._transactions.check_open()
        with self._cond:
            if self._closed:
                raise RuntimeError("producer is closed")
            buf = self._buffers.setdefault(topic, _TopicBuffer())
            if not buf.records:
                buf.first_at = time.monotonic()
            buf.records.append(record)
            buf.keys.append(raw_key)
            buf.partitions.append(partition)
            buf.callbacks.append(on_delivery or callback or self._on_delivery)
            self._cond.notify()

    def poll(self, timeout: float | None = None) -> int:
        """Run the delivery callbacks of records delivered (or failed) since; returns how many ran.

        Waits up to ``timeout`` seconds for the first report (None or a
        negative value: until one comes; 0: not at all), as confluent-kafka's ``poll``.
        """
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        with self._cond:
            while not self._reports and (deadline is None or time.monotonic() < deadline):
                self._cond.wait(0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic())))
        return self._serve()

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every buffered record is delivered (or failed), running their callbacks.

        Returns how many records are still waiting for delivery or for their
        callback (0: all done), as confluent-kafka's ``flush``; ``timeout`` in
        seconds, None: no limit.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._serve()
            with self._cond:
                left = self._pending() + len(self._reports)
                if not left or (deadline is not None and time.monotonic() >= deadline):
                    return left
                self._cond.notify()
                if not self._reports:
                    wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
                    self._cond.wait(wait)

    # -- transactions (confluent-kafka's names; ``timeout`` in seconds, None: no limit) -------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register ``transactional.id``: a new epoch, fencing older producers of it (``INVALID_TRANSACTION_TIMEOUT``:
        ``transaction.timeout.ms`` is over the node's ``transaction.max.timeout.ms``)."""
        _transactional(self._transactions).init()

    def begin_transaction(self) -> None:
        """Open a transaction: the records produced until it ends belong to it."""
        _transactional(self._transactions).begin()

    def send_offsets_to_transaction(
        self, positions: list[TopicPartition], group_metadata: Any, timeout: float | None = None
    ) -> None:
        """Commit the group's ``positions`` (next offsets to read) with the open transaction, and only then.

        ``group_metadata``: the group's name, or an object with ``group_id`` (a consumer's group metadata).
        """
        group = group_metadata if isinstance(group_metadata, str) else str(group_metadata.group_id)
        _transactional(self._transactions).send_offsets(positions, group)

    def commit_transaction(self, timeout: float | None = None) -> list[TopicPartition]:
        """Send what is buffered, then commit: all records visible at once; the first offset per partition written.

        Raises:
            ProducerFencedError: a newer producer initialised the id, or the transaction timed out.
            InvalidTxnStateError: no transaction is open, or one of its records failed (abort it).
            KafkaStorageError: decided but not yet complete; it completes on the node (retry to learn the offsets).
        """
        txn = _transactional(self._transactions)
        self.flush(timeout)
        return [TopicPartition(o["topic"], o["partition"], o["first_offset"]) for o in txn.commit()]

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Wait for the records in flight, then abort: none of the transaction's records is ever visible."""
        txn = _transactional(self._transactions)
        self.flush(timeout)
        txn.abort()

    def __len__(self) -> int:
        """Records buffered, in flight, or delivered with their callback not run yet (confluent-kafka's ``len``)."""
        with self._cond:
            return self._pending() + len(self._reports)

    def close(self) -> None:
        """Flush (running every callback), then stop the sender thread."""
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._sender.join()
        self._serve()
        self._nodes.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self) -> int:
        """Run the queued delivery callbacks in this thread, in order; one that raises leaves the rest queued."""
        served = 0
        while True:
            with self._cond:
                if not self._reports:
                    return served
                cb, err, msg = self._reports.popleft()
            cb(err, msg)
            served += 1

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
            except Exception as e:  # a bug must fail these records, never end the sender (flush would wait forever)
                log.exception("producer: sending %d records of topic '%s' failed", len(records), ready)
                failed: list[LogstoreError | None] = [UnknownServerError(f"could not send: {e!r}")] * len(records)
                reports = _delivery_reports(ready, records, keys, parts, callbacks, [None] * len(records), failed)
                with self._cond:
                    self._reports.extend(reports)
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
            if error is not None and self._transactions is not None:
                self._transactions.failed(error)
            for j, i in enumerate(route.indexes):
                results[i] = offsets[j] if offsets is not None else None
                errors[i] = error if offsets is None else None
        reports = _delivery_reports(topic, records, keys, parts, callbacks, results, errors)
        if reports:
            with self._cond:
                self._reports.extend(reports)  # run by poll() in the application's thread, never here
                self._cond.notify_all()

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
            if self._transactions is not None:  # staged by the id's coordinator: the node forwards it there
                params = {"acks": self._acks} | self._transactions.produce_params()
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
                error = NetworkExceptionError(f"cannot reach {url}: {e}")
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


def _record_of(
    value: bytes | str | None, key: bytes | str | None, headers: Headers | None, timestamp_ms: int | None
) -> tuple[_Record, bytes | None]:
    """A record as the sender keeps it, and its key as bytes.

    Raises:
        TypeError: a value, key or header value that is not bytes, str or None, or a header key that is not a str.
    """
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
    for what, v in [("value", value), ("key", key), *((f"header '{k}'", hv) for k, hv in pairs)]:
        if v is not None and not isinstance(v, bytes | str):
            raise TypeError(f"a record's {what} must be bytes, str or None, got {type(v).__name__}")
    if any(not isinstance(k, str) for k, _ in pairs):
        raise TypeError("header keys must be str")
    hs = [{"key": k, "value": _raw(v)} for k, v in pairs] if pairs else None
    return _Record(_raw(value), hs, timestamp_ms), _raw(key)


def _delivery_reports(
    topic: str,
    records: list[_Record],
    keys: list[bytes | None],
    parts: list[int | None],
    callbacks: list[DeliveryCallback | None],
    results: list[Any],
    errors: list[LogstoreError | None],
) -> list[tuple[DeliveryCallback, LogstoreError | None, Message]]:
    """A sent batch's delivery reports: (callback, error, message) for each record that has a callback."""
    reports = []
    for i, cb in enumerate(callbacks):
        if cb is None:
            continue
        r, o = records[i], results[i]
        if o:  # a transaction's records get their offsets at its commit
            partition, offset = o["partition"], OFFSET_INVALID if o["offset"] is None else o["offset"]
        else:  # failed, or acks=0: no offset
            partition, offset = (parts[i] if parts[i] is not None else -1), OFFSET_INVALID
        headers = [(str(h["key"]), _raw(h["value"])) for h in r.headers] if r.headers else None
        reports.append(
            (cb, errors[i], Message(topic, partition, offset, keys[i], r.value, headers, r.timestamp_ms, errors[i]))
        )
    return reports


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


def _transactional(transactions: Transactions | None) -> Transactions:
    if transactions is None:
        raise InvalidTxnStateError("this producer has no transactional.id")
    return transactions
