"""Kafka protocol frames over a raw socket, for the tests that send what no client would."""

from __future__ import annotations

import datetime
import io
import socket
import struct
from typing import Any

import pyarrow as pa
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from kafka_api.records import encode_batch
from logstore.log.schema import HEADERS_TYPE, TOPIC_SCHEMA

CORRELATION_ID = 7


def batch(
    values: list[bytes],
    *,
    producer_id: int = -1,
    base_sequence: int = -1,
    producer_epoch: int = 0,
    transactional: bool = False,
) -> bytes:
    """A v2 record batch of ``values`` (offsets from 0, CreateTime 1000 ms), as a producer sends it
    (``transactional``: the attributes' transactional bit set)."""
    n = len(values)
    table = pa.table(
        {
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([1_000_000] * n, pa.timestamp("us", tz="UTC")),
            "timestamp_type": pa.array([0] * n, pa.int32()),
            "key": pa.array([None] * n, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array([[]] * n, HEADERS_TYPE),
        },
        schema=TOPIC_SCHEMA,
    )
    data = bytearray(encode_batch(table))
    if producer_id >= 0:  # producer id, epoch and base sequence sit under the CRC: recompute it
        import crc32c

        struct.pack_into(">qhi", data, 43, producer_id, producer_epoch, base_sequence)
        if transactional:
            (attributes,) = struct.unpack_from(">h", data, 21)
            struct.pack_into(">h", data, 21, attributes | 0x10)
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def produce_frame(topic: str, partition: int, values: list[bytes], **idempotence: Any) -> bytes:
    return produce_frame_of(topic, partition, batch(values, **idempotence))


def produce_frame_of(topic: str, partition: int, records: bytes) -> bytes:
    """A size-prefixed Produce v9 request (acks=all) of ``records`` for one partition."""
    body = ProduceRequest(
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition, records=records),)),
        ),
    )
    header = RequestHeader(request_api_key=0, request_api_version=9, correlation_id=CORRELATION_ID, client_id="raw")
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, header)
    entity_writer(ProduceRequest)(out, body)
    return struct.pack(">i", out.tell()) + out.getvalue()


def request(bootstrap: str, frame: bytes, timeout: float = 30) -> bytes:
    """Send one frame; the response frame's bytes after its size, or b"" when the connection is closed."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(frame)
        head = _read(sock, 4)
        if len(head) < 4:
            return b""
        (size,) = struct.unpack(">i", head)
        return _read(sock, size)


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def produce_response(frame: bytes) -> tuple[int, int]:
    """(error code, base offset) of the one partition of a Produce v9 response frame."""
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    assert correlation_id == CORRELATION_ID
    response, _ = entity_reader(ProduceResponse)(frame, 5)  # after the header's empty tagged fields
    part = response.responses[0].partition_responses[0]
    return int(part.error_code.value), int(part.base_offset)


def metadata_topic_ids(bootstrap: str, topics: list[str]) -> dict[str, tuple[int, str]]:
    """Topic → (error code, topic id as Kafka prints it) from a Metadata v12 request."""
    import base64

    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse

    body = MetadataRequest(
        topics=tuple(MetadataRequestTopic(name=t, topic_id=None) for t in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    header = RequestHeader(request_api_key=3, request_api_version=12, correlation_id=CORRELATION_ID, client_id="raw")
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, header)
    entity_writer(MetadataRequest)(out, body)
    frame = request(bootstrap, struct.pack(">i", out.tell()) + out.getvalue())
    response, _ = entity_reader(MetadataResponse)(frame, 5)
    ids = {t.name: t.topic_id.bytes if t.topic_id is not None else bytes(16) for t in response.topics}  # kio: 0 → None
    return {
        t.name: (int(t.error_code.value), base64.urlsafe_b64encode(ids[t.name]).decode().rstrip("="))
        for t in response.topics
    }


def fetch_frame(topic: str, partition: int, offset: int, *, max_wait_ms: int, min_bytes: int = 1) -> bytes:
    """A size-prefixed Fetch v12 request of one partition."""
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    body = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20),),
            ),
        ),
        forgotten_topics_data=(),
    )
    header = RequestHeader(request_api_key=1, request_api_version=12, correlation_id=CORRELATION_ID, client_id="raw")
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, header)
    entity_writer(FetchRequest)(out, body)
    return struct.pack(">i", out.tell()) + out.getvalue()


def fetch_response(frame: bytes) -> tuple[int, int, bytes]:
    """(error code, high watermark, records) of the one partition of a Fetch v12 response frame."""
    from kio.schema.fetch.v12.response import FetchResponse

    response, _ = entity_reader(FetchResponse)(frame, 5)
    part = response.responses[0].partitions[0]
    return int(part.error_code.value), int(part.high_watermark), bytes(part.records or b"")
