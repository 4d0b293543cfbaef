"""A consumed record as the Python :class:`~logstore.client.Consumer` hands it out, with confluent-kafka's accessors."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import LogstoreError

__all__ = ["TIMESTAMP_CREATE_TIME", "TIMESTAMP_NOT_AVAILABLE", "Message", "messages_of"]

TIMESTAMP_NOT_AVAILABLE = 0
"""confluent-kafka's timestamp type when a message has none (a delivery report of a record sent without one)."""
TIMESTAMP_CREATE_TIME = 1
"""confluent-kafka's timestamp type of a producer-set (or append-time) timestamp."""


class Message:
    """One record, with confluent-kafka's accessors: consumed, or in a producer's delivery report.

    A delivery report's message has the offset the record got (``OFFSET_INVALID``
    when it failed, or with ``acks=0``) and, when it failed, the error in :meth:`error`.
    """

    __slots__ = ("_error", "_headers", "_key", "_offset", "_partition", "_timestamp_ms", "_topic", "_value")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        timestamp_ms: int | None,
        error: LogstoreError | None = None,
    ) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers, self._timestamp_ms = key, value, headers, timestamp_ms
        self._error = error

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
        """``(TIMESTAMP_CREATE_TIME, ms since the epoch)``, as confluent-kafka returns it.

        ``(TIMESTAMP_NOT_AVAILABLE, 0)`` in a delivery report of a record produced without a timestamp.
        """
        if self._timestamp_ms is None:
            return TIMESTAMP_NOT_AVAILABLE, 0
        return TIMESTAMP_CREATE_TIME, self._timestamp_ms

    def error(self) -> LogstoreError | None:
        """A delivery report's error; always None for a consumed record (the consumer raises errors instead)."""
        return self._error

    def __repr__(self) -> str:
        return f"Message({self._topic}-{self._partition}@{self._offset})"


def messages_of(
    records: pa.Table, topics: list[str], partitions: list[int], skip: set[tuple[str, int]]
) -> Iterable[Message]:
    """The rows of a member fetch (:func:`~logstore.wire.arrow_fetch.decode_member_records`) as messages.

    ``topics`` and ``partitions`` are those columns as lists (the caller has
    them already). Rows of a (topic, partition) in ``skip`` are left out. Columns
    are converted whole, never per record: a fetch without headers costs no
    per-record work.
    """
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
    if skip:
        messages = (m for m in messages if (m._topic, m._partition) not in skip)
    return messages
