"""The Python :class:`Producer`: batching, idempotent retries, delivery callbacks.

It follows confluent-kafka and aiokafka: ``produce()`` only buffers; a sender
thread sends one batch per topic when ``linger_ms`` has passed or
``batch_records`` are waiting, and retries retriable failures with the same
``(producer_id, sequence)`` — idempotent by default, so a retry never writes a
record twice. Delivery callbacks run on the sender thread.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from logstore.client._http import http_client, raise_for
from logstore.codec import encode_bytes
from logstore.errors import (
    KafkaStorageError,
    LogstoreError,
)

__all__ = ["DeliveryCallback", "Producer", "RecordMetadata"]


@dataclass(frozen=True)
class RecordMetadata:
    """Where a produced record landed."""

    topic: str
    partition: int
    offset: int


DeliveryCallback = Callable[[LogstoreError | None, RecordMetadata | None], None]
"""``on_delivery(error, metadata)``: exactly one of them is None."""


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
        client_cert: (certificate, private key) PEM files to present to a server that asks for
            client certificates; with no API key, the certificate names the principal.
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
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        if acks not in ("0", "1", "all"):
            raise ValueError("acks must be '0', '1' or 'all'")
        self._client = http_client(url, timeout_s=30, api_key=api_key, ca_file=ca_file, client_cert=client_cert)
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
                raise_for(r)
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
