"""Python clients for a running logstore server: :class:`Producer` and :class:`RemoteStore`.

They speak the HTTP API of DESIGN §3 with ``httpx``; the rest of the core
never imports them.

``Producer`` follows confluent-kafka and aiokafka: ``produce()`` only buffers;
a sender thread sends one batch per topic when ``linger_ms`` has passed or
``batch_records`` are waiting, and retries retriable failures with the same
``(producer_id, sequence)`` — idempotent by default, so a retry never writes a
record twice. Delivery callbacks run on the sender thread.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pyarrow as pa

from logstore.config import TopicConfig
from logstore.errors import ERRORS_BY_NAME, KafkaStorageError, LogstoreError, UnknownServerError
from logstore.schema import input_table
from logstore.structs import FetchResult, GroupOffset, PartitionInfo, TopicInfo

__all__ = ["DeliveryCallback", "Producer", "RecordMetadata", "RemoteStore"]


@dataclass(frozen=True)
class RecordMetadata:
    """Where a produced record landed."""

    topic: str
    partition: int
    offset: int


DeliveryCallback = Callable[[LogstoreError | None, RecordMetadata | None], None]
"""``on_delivery(error, metadata)``: exactly one of them is None."""


def _bytes_json(b: bytes | str | None) -> Any:
    if b is None or isinstance(b, str):
        return b
    try:
        return b.decode()
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(b).decode()}


def _json_bytes(v: Any) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, dict):
        return base64.b64decode(v["b64"])
    return str(v).encode()


def _json_headers(h: dict[str, Any] | list[dict[str, Any]]) -> list[tuple[str, bytes | None]]:
    """A fetched record's headers in order: the API sends an object, or a list of ``{key, value}`` if a key repeats."""
    if isinstance(h, dict):
        return [(k, _json_bytes(v)) for k, v in h.items()]
    return [(x["key"], _json_bytes(x["value"])) for x in h]


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
    ) -> None:
        if acks not in ("0", "1", "all"):
            raise ValueError("acks must be '0', '1' or 'all'")
        self._client = httpx.Client(base_url=url, timeout=30)
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
        record: dict[str, Any] = {"value": _bytes_json(value)}
        if key is not None:
            record["key"] = _bytes_json(key)
        if headers:
            record["headers"] = {k: _bytes_json(v) for k, v in headers.items()}
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

    The CLI's ``--server URL`` mode runs on it.
    """

    def __init__(self, url: str, *, timeout_s: float = 60) -> None:
        self.url = url
        self._client = httpx.Client(base_url=url, timeout=timeout_s)

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
            [_json_bytes(r["value"]) for r in recs],
            keys=[_json_bytes(r["key"]) for r in recs],
            timestamps_ms=[r["timestamp"] for r in recs],
            headers=[_json_headers(r["headers"]) for r in recs],
        )
        table = table.append_column("offset", pa.array([r["offset"] for r in recs], pa.int64()))
        return FetchResult(table, body["high_watermark"], body["log_start_offset"])

    def committed(self, group: str, topic: str) -> dict[tuple[str, str, int], tuple[int, int, str | None]]:
        try:
            rows = self.describe_group(group)
        except LogstoreError as e:
            if e.name == "GROUP_ID_NOT_FOUND":
                return {}
            raise
        return {(r.group, r.topic, r.partition): (r.committed_offset, 0, None) for r in rows if r.topic == topic}

    def commit_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        self._call(
            "POST",
            f"/v1/groups/{group}/offsets",
            json={"topic": topic, "partitions": {str(p): o for p, o in offsets.items()}},
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


def decode_value(v: Any) -> bytes | None:
    """A fetched key or value (string or ``{"b64": …}``) as bytes."""
    return _json_bytes(v)
