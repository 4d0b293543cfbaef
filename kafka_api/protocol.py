"""Kafka's wire framing around ``kio``'s generated request and response structures.

Every request and response body is a ``kio`` dataclass generated from
Kafka's own message schemas (``clients/src/main/resources/common/message``);
this module reads a request frame's header, picks the class of its API key
and version, and writes a response frame. :func:`build` makes a response of
any version from plain dicts: fields a version does not have are dropped, so
one handler serves every version it advertises.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import functools
import io
import struct
import typing
import uuid
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta, i64Timedelta

__all__ = [
    "ALL_OPERATIONS",
    "API_VERSIONS",
    "FrameHeader",
    "build",
    "error_frame",
    "kafka_uuid",
    "read_header",
    "read_request",
    "response_frame",
]

API_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 10),  # Produce: record batch v2 only (v3+); v11+ adds leader-change hints, v13 topic ids
    1: (4, 12),  # Fetch: v13+ names topics by id
    2: (1, 8),  # ListOffsets
    3: (1, 12),  # Metadata
    8: (2, 9),  # OffsetCommit: v10 names topics by id
    9: (1, 9),  # OffsetFetch
    10: (0, 5),  # FindCoordinator
    11: (0, 9),  # JoinGroup: the classic protocol, client-side assignors; v4+: MEMBER_ID_REQUIRED first
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups: classic groups with members, and groups of committed offsets
    16: (0, 4),  # ListGroups
    17: (0, 1),  # SaslHandshake: PLAIN, on SASL_* listeners
    18: (0, 3),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    22: (0, 5),  # InitProducerId: with a transactional_id, the transaction coordinator's (kafka_api.transactions)
    24: (0, 3),  # AddPartitionsToTxn: v4+ batches transactions for brokers' verification, not sent by clients
    25: (0, 4),  # AddOffsetsToTxn
    26: (0, 4),  # EndTxn
    28: (0, 4),  # TxnOffsetCommit
    32: (1, 4),  # DescribeConfigs: topics and this node
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    44: (0, 1),  # IncrementalAlterConfigs: topics
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions
}
"""API key → (lowest, highest) version this listener serves; ApiVersions advertises exactly these."""

_PREFIX = struct.Struct(">hhi")
_ZERO_UUID = uuid.UUID(int=0)


@dataclasses.dataclass(frozen=True)
class FrameHeader:
    """What every request frame starts with."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def read_header(frame: bytes) -> FrameHeader:
    """The API key, version, correlation id and client id of a request frame (any API, any version)."""
    api_key, api_version, correlation_id = _PREFIX.unpack_from(frame, 0)
    (length,) = struct.unpack_from(">h", frame, 8)
    client_id = None if length < 0 else frame[10 : 10 + length].decode("utf-8", "replace")
    return FrameHeader(api_key, api_version, correlation_id, client_id)


def supported(api_key: int, api_version: int) -> bool:
    """Whether this listener serves ``api_version`` of ``api_key``."""
    span = API_VERSIONS.get(api_key)
    return span is not None and span[0] <= api_version <= span[1]


def read_request(header: FrameHeader, frame: bytes) -> Any:
    """The request body of a frame of a supported API and version, as its ``kio`` class."""
    cls = load_request_schema(header.api_key, header.api_version)
    _, offset = entity_reader(cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(cls)(frame, offset)
    return body


def response_frame(header: FrameHeader, response: Any) -> bytes:
    """A size-prefixed response frame: the response header (v1 for flexible versions but ApiVersions'), the body."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(struct.pack(">i", header.correlation_id))
    if response.__flexible__ and header.api_key != 18:
        out.write(b"\0")  # no tagged fields
    entity_writer(type(response))(out, response)
    data = out.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def error_frame(header: FrameHeader, code: int) -> bytes:
    """An answer to a request of an API or version this listener does not serve.

    For ApiVersions it is a version-0 response (error code, then the versions
    served), as Kafka answers a client newer than itself; for any other API
    the error code alone after the correlation id, which every client reads as
    the start of a failed response.
    """
    if header.api_key == 18:
        body = struct.pack(">hi", code, len(API_VERSIONS))
        body += b"".join(struct.pack(">hhh", k, lo, hi) for k, (lo, hi) in sorted(API_VERSIONS.items()))
    else:
        body = struct.pack(">h", code)
    return struct.pack(">ii", 4 + len(body), header.correlation_id) + body


def build(cls: type, data: dict[str, Any]) -> Any:
    """An instance of ``kio`` class ``cls`` from ``data``, dropping keys the class (this version) lacks.

    Nested dicts and lists of dicts become the version's nested classes;
    error codes, durations (ms), timestamps (ms) and UUIDs are converted to
    the types ``kio`` writes. Fields left out take the schema's defaults.
    """
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name])
    return cls(**kwargs)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or (origin is not None and type(None) in args and origin is not tuple):
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value) if inner else value
    if origin is tuple:
        return tuple(_convert(args[0], v) for v in value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return build(hint, value)
    if hint is ErrorCode:
        return ErrorCode(value)
    if hint in (i32Timedelta, i64Timedelta):
        return datetime.timedelta(milliseconds=value)
    if hint is uuid.UUID:
        return value
    if isinstance(hint, type) and issubclass(hint, datetime.datetime):
        return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
    return value


ALL_OPERATIONS = -(2**31)
"""``authorized_operations`` when the client did not ask for them (Kafka's INT32_MIN)."""


def kafka_uuid(topic_id: str | None) -> uuid.UUID:
    """A topic ID (22 characters of URL-safe base64, as Kafka prints a ``Uuid``) as the UUID Kafka sends; zero
    for a topic from before IDs."""
    if topic_id is None:
        return _ZERO_UUID
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=="))


def zero_uuid() -> uuid.UUID:
    """The topic id Metadata sends while topics have none (Kafka's ``Uuid.ZERO_UUID``)."""
    return _ZERO_UUID


def response_class(api_key: int, api_version: int) -> type:
    """The ``kio`` response class of an API version."""
    return load_response_schema(api_key, api_version)
