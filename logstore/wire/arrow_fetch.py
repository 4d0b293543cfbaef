"""The Arrow IPC form of a member fetch (``GET /v1/groups/{g}/members/{m}/records``).

A client that sends ``Accept: application/vnd.apache.arrow.stream`` gets the
records as one Arrow IPC *stream* (not the file format) instead of JSON: the
columns of the topic table (:data:`logstore.log.schema.TOPIC_SCHEMA`: partition,
offset, timestamp in µs UTC, timestamp type, key and value as raw bytes,
headers as a list of ``{key, value}``) with a ``topic`` column first. Keys,
values and headers travel as bytes, never base64 or UTF-8 text, so the
server sends what it read without building a JSON object per record; rows
are grouped by partition, offsets ascending within each. JSON stays the
default for every other client.

Either form of the answer carries the member's generation in the
``X-Logstore-Generation`` header (:data:`GENERATION_HEADER`): a member that
sees a newer generation than the one it knows has a rebalance waiting and
heartbeats at once, instead of at its next ``heartbeat.interval.ms``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from logstore.log.schema import TOPIC_SCHEMA
from logstore.structs import FetchResult

__all__ = [
    "ARROW_STREAM",
    "GENERATION_HEADER",
    "MEMBER_RECORDS_SCHEMA",
    "decode_member_records",
    "encode_member_records",
]

ARROW_STREAM = "application/vnd.apache.arrow.stream"
"""The media type of an Arrow IPC stream (IANA registered)."""

GENERATION_HEADER = "x-logstore-generation"
"""Response header of a member fetch: the generation at which the member's assignment last changed."""

MEMBER_RECORDS_SCHEMA = pa.schema([pa.field("topic", pa.string(), nullable=False), *TOPIC_SCHEMA])
"""Columns of a member fetch in Arrow form."""


def encode_member_records(slices: Sequence[tuple[str, FetchResult]]) -> bytes:
    """``(topic, slice)`` pairs as one Arrow IPC stream of :data:`MEMBER_RECORDS_SCHEMA` (zero rows if none)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, MEMBER_RECORDS_SCHEMA) as writer:
        for topic, result in slices:
            recs = result.records
            table = recs.select(TOPIC_SCHEMA.names).add_column(0, "topic", pa.repeat(topic, len(recs)))
            writer.write_table(table.cast(MEMBER_RECORDS_SCHEMA))
    return bytes(sink.getvalue())


def decode_member_records(body: bytes) -> pa.Table:
    """The records of an Arrow member fetch.

    Raises:
        pyarrow.ArrowInvalid: ``body`` is not an Arrow IPC stream.
    """
    return pa.ipc.open_stream(body).read_all()
