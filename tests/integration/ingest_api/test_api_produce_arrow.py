"""The Arrow IPC produce body (``Content-Type: application/vnd.apache.arrow.stream``) over real HTTP.

The same records as a JSON body, the same answer, the same limits and errors,
the same idempotence (producer id and sequence in request headers); bad input
is refused with a Kafka error and takes nothing already acknowledged with it.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import pyarrow as pa

from logstore.log.partitioner import murmur2, to_positive
from logstore.log.schema import HEADERS_TYPE
from logstore.wire.arrow_produce import ARROW_STREAM, PRODUCER_ID_HEADER, SEQUENCE_HEADER, encode_produce
from tests.support.server import Server

MiB = 2**20

StartServer = Callable[..., Server]


def post(c: httpx.Client, topic: str, table: pa.Table | bytes, acks: str = "all", **headers: str) -> httpx.Response:
    body = table if isinstance(table, bytes) else encode_produce(table)
    return c.post(
        f"/v1/topics/{topic}/records",
        params={"acks": acks},
        content=body,
        headers={"content-type": ARROW_STREAM, **headers},
    )


def compressed(table: pa.Table, codec: str) -> bytes:
    """``table`` as an Arrow IPC stream whose buffers are compressed with ``codec``."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def peak_rss(s: Server) -> int:
    """The server process's peak resident set (VmHWM), in bytes."""
    assert s.proc is not None
    with open(f"/proc/{s.proc.pid}/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    assert r.json()["error_code"] == code, r.text
    return str(r.json()["message"])


def records(c: httpx.Client, topic: str, partition: int) -> list[dict[str, Any]]:
    r = c.get(f"/v1/topics/{topic}/partitions/{partition}/records", params={"offset": 0})
    assert r.status_code == 200, r.text
    return list(r.json()["records"])


def high_watermarks(c: httpx.Client, topic: str) -> list[int]:
    return [p["high_watermark"] for p in c.get(f"/v1/topics/{topic}").json()["partitions"]]


def test_every_column_lands_as_sent(server: StartServer) -> None:
    c = server().client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 4}).status_code == 201
    table = pa.table(
        {
            "value": pa.array([b"\xff\x00raw", None, "text"], pa.binary()),
            "key": pa.array(["k1", None, "k3"]),
            "partition": pa.array([2, 2, None], pa.int64()),
            "timestamp": pa.array([1_700_000_000_123, None, 5], pa.int64()),
            "headers": pa.array(
                [[{"key": "h", "value": b"\xff"}, {"key": "h", "value": None}], None, []], HEADERS_TYPE
            ),
        }
    )
    r = post(c, "t", table)
    assert r.status_code == 200, r.text
    k3 = to_positive(murmur2(b"k3")) % 4  # a null partition: the key chooses it, as for JSON
    assert r.json()["offsets"] == [
        {"partition": 2, "offset": 0},
        {"partition": 2, "offset": 1},
        {"partition": k3, "offset": 0 if k3 != 2 else 2},
    ]
    p2 = records(c, "t", 2)
    assert p2[0]["value"] == {"b64": base64.b64encode(b"\xff\x00raw").decode()}
    assert p2[0]["key"] == "k1" and p2[0]["timestamp"] == 1_700_000_000_123
    assert p2[0]["headers"] == [{"key": "h", "value": {"b64": "/w=="}}, {"key": "h", "value": None}]
    assert p2[1]["value"] is None and p2[1]["key"] is None and p2[1]["headers"] == {}
    assert p2[1]["timestamp"] > 1_700_000_000_123  # stamped at commit
    last = records(c, "t", k3)[-1]
    assert last["value"] == "text" and last["timestamp"] == 5


def test_a_value_column_alone_is_a_batch_of_keyless_records(server: StartServer) -> None:
    c = server().client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
    r = post(c, "t", pa.table({"value": pa.array([f"v{i}" for i in range(100)])}))
    assert r.status_code == 200, r.text
    assert len(r.json()["offsets"]) == 100
    assert sum(high_watermarks(c, "t")) == 100


def test_a_retried_sequence_is_not_written_twice(server: StartServer) -> None:
    c = server().client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    table = pa.table({"value": pa.array(["a", "b"])})
    ids = {PRODUCER_ID_HEADER: "p-1", SEQUENCE_HEADER: "0"}
    first = post(c, "t", table, **ids)
    again = post(c, "t", table, **ids)
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    assert high_watermarks(c, "t") == [2]
    assert post(c, "t", table, **{PRODUCER_ID_HEADER: "p-1", SEQUENCE_HEADER: "1"}).status_code == 200
    assert high_watermarks(c, "t") == [4]


def test_bad_bodies_are_refused_and_take_nothing_with_them(server: StartServer) -> None:
    c = server(**{"max.request.size": 20_000}).client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 2, "config": {"message.max.bytes": 100}}).status_code
    assert post(c, "t", pa.table({"value": pa.array(["kept"])})).status_code == 200
    value = pa.array(["x"])
    error(post(c, "t", b"not arrow"), 400, "INVALID_REQUEST")
    error(post(c, "t", pa.table({"value": pa.array([], pa.string())})), 400, "INVALID_REQUEST")
    assert "colour" in error(post(c, "t", pa.table({"value": value, "colour": value})), 400, "INVALID_REQUEST")
    error(post(c, "t", pa.table({"value": pa.array([1.5])})), 400, "INVALID_REQUEST")
    error(post(c, "t", pa.table({"value": value, "partition": pa.array([2**40])})), 400, "INVALID_REQUEST")
    error(post(c, "t", pa.table({"value": value, "partition": pa.array([2])})), 404, "UNKNOWN_TOPIC_OR_PARTITION")
    error(post(c, "t", pa.table({"value": value, "timestamp": pa.array([-1])})), 400, "INVALID_TIMESTAMP")
    error(post(c, "t", pa.table({"value": value, "timestamp": pa.array([10**18])})), 400, "INVALID_TIMESTAMP")
    error(post(c, "t", pa.table({"value": value, "timestamp": pa.array(["noon"])})), 400, "INVALID_REQUEST")
    no_key = pa.array(
        [[{"key": None, "value": "x"}]], pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
    )
    error(post(c, "t", pa.table({"value": value, "headers": no_key})), 400, "INVALID_REQUEST")
    error(post(c, "t", pa.table({"value": value}), **{PRODUCER_ID_HEADER: "p"}), 400, "INVALID_REQUEST")
    error(
        post(c, "t", pa.table({"value": value}), **{PRODUCER_ID_HEADER: "p", SEQUENCE_HEADER: "-1"}),
        400,
        "INVALID_REQUEST",
    )
    error(post(c, "t", pa.table({"value": pa.array(["x" * 101])})), 413, "MESSAGE_TOO_LARGE")
    error(post(c, "t", pa.table({"value": pa.array(["x" * 90] * 300)})), 413, "RECORD_LIST_TOO_LARGE")
    assert sum(high_watermarks(c, "t")) == 1
    assert [r["value"] for p in (0, 1) for r in records(c, "t", p)] == ["kept"]


def test_a_compressed_body_is_refused_by_what_it_decodes_to_before_it_is_decompressed(server: StartServer) -> None:
    """A few KB of ZSTD or LZ4 standing for 200 MiB of records: 413 RECORD_LIST_TOO_LARGE, nothing decompressed."""
    s = server(**{"max.request.size": MiB})
    c = s.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    assert post(c, "t", pa.table({"value": pa.array(["kept"])})).status_code == 200
    zeros = pa.table({"value": pa.array([bytes(200 * MiB)], pa.binary())})
    bodies = {codec: compressed(zeros, codec) for codec in ("zstd", "lz4")}
    del zeros
    small = compressed(pa.table({"value": pa.array(["x" * 1000] * 100)}), "zstd")
    assert all(len(body) < MiB for body in bodies.values())  # within max.request.size as sent (zstd: ~7 KB)
    before = peak_rss(s)
    answers = {codec: post(c, "t", body) for codec, body in bodies.items()}
    grown = peak_rss(s) - before
    assert grown < 50 * MiB, f"the node's peak RSS grew by {grown // MiB} MiB"  # the 200 MiB were never allocated
    for codec, r in answers.items():
        assert "max.request.size" in error(r, 413, "RECORD_LIST_TOO_LARGE"), codec
    assert post(c, "t", small).status_code == 200  # compressed bodies within the limit still land
    assert high_watermarks(c, "t") == [101]
    assert records(c, "t", 0)[0]["value"] == "kept"


def test_records_that_repeat_shared_bytes_are_measured_decoded(server: StartServer) -> None:
    """A column of nulls, a dictionary or views: what they decode to counts against max.request.size."""
    c = server(**{"max.request.size": MiB}).client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    nulls = pa.table({"value": pa.nulls(5_000_000)})  # no buffer at all, 5 M records
    error(post(c, "t", nulls), 413, "RECORD_LIST_TOO_LARGE")
    repeated = pa.DictionaryArray.from_arrays(pa.array([0] * 10_000, pa.int8()), pa.array(["x" * 10_000]))
    error(post(c, "t", pa.table({"value": repeated})), 413, "RECORD_LIST_TOO_LARGE")  # 100 MB decoded
    headers = pa.array([[{"key": "h", "value": "v"}]]).cast(
        pa.list_(pa.struct([("key", pa.string_view()), ("value", pa.string())]))
    )
    error(post(c, "t", pa.table({"value": pa.array(["x"]), "headers": headers})), 400, "INVALID_REQUEST")
    small = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int8()), pa.array(["a", "b"]))
    assert post(c, "t", pa.table({"value": small})).status_code == 200
    assert [r["value"] for r in records(c, "t", 0)] == ["a", "b", "a"]
