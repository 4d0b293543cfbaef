"""Bad input at the Kafka listener, over raw sockets: each gets Kafka's answer, and nothing is written or lost."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
from collections.abc import Callable

import httpx
import pytest

from tests.support.server import LOGSTORE, Server, free_port
from tests.system.kafka.raw import CORRELATION_ID, batch, produce_frame, produce_frame_of, produce_response, request

CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_VERSION = 35


def _kafka_server(server: Callable[..., Server], **config: object) -> tuple[Server, str]:
    port = free_port()
    return server(listeners=f"PLAINTEXT://127.0.0.1:{port}", **config), f"127.0.0.1:{port}"


def _topic(s: Server, name: str, **config: object) -> None:
    with s.client() as http:
        created = http.post("/v1/topics", json={"name": name, "partitions": 1, "config": config})
        assert created.status_code in (200, 201), created.text


def _high_watermark(s: Server, topic: str) -> int:
    with s.client() as http:
        return int(http.get(f"/v1/topics/{topic}").json()["partitions"][0]["high_watermark"])


def _env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")} | extra


def _header(api_key: int, api_version: int) -> bytes:
    return struct.pack(">hhih", api_key, api_version, CORRELATION_ID, 3) + b"raw"


def test_unknown_api_and_version_are_answered_unsupported_version_on_a_live_connection(
    server: Callable[..., Server],
) -> None:
    _, bootstrap = _kafka_server(server)
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        for api_key, version in [(9999, 0), (0, 99), (42, 0)]:  # no such API; Produce v99; DeleteGroups
            frame = _header(api_key, version)
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            size, correlation_id, code = struct.unpack(">iih", sock.recv(10))
            assert (size, correlation_id, code) == (6, CORRELATION_ID, UNSUPPORTED_VERSION)
        # ApiVersions of a version too new: a v0 answer, UNSUPPORTED_VERSION and the versions served
        frame = _header(18, 99)
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", sock.recv(4))
        body = b""
        while len(body) < size:
            body += sock.recv(size - len(body))
        correlation_id, code, count = struct.unpack_from(">ihi", body)
        served = {struct.unpack_from(">hhh", body, 10 + 6 * i)[0] for i in range(count)}
        assert (correlation_id, code) == (CORRELATION_ID, UNSUPPORTED_VERSION)
        assert served == {
            0,
            1,
            2,
            3,
            8,
            9,
            10,
            11,
            12,
            13,
            14,
            15,
            16,
            17,
            18,
            19,
            20,
            22,
            24,
            25,
            26,
            28,
            32,
            36,
            37,
            44,
            65,
            66,
        }


def test_a_frame_over_socket_request_max_bytes_closes_the_connection_unread(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server, **{"socket.request.max.bytes": 4096})
    _topic(s, "big")
    frame = produce_frame("big", 0, [b"x" * 8192])
    assert request(bootstrap, frame) == b""
    assert "exceeds socket.request.max.bytes=4096" in s.log()
    assert _high_watermark(s, "big") == 0
    assert produce_response(request(bootstrap, produce_frame("big", 0, [b"small"]))) == (0, 0)


def test_a_crc_mismatch_is_corrupt_message_and_writes_nothing(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server)
    _topic(s, "crc")
    records = bytearray(batch([b"one", b"two"]))
    records[-1] ^= 0xFF  # a bit flipped in the last value
    assert produce_response(request(bootstrap, produce_frame_of("crc", 0, bytes(records)))) == (CORRUPT_MESSAGE, -1)
    assert _high_watermark(s, "crc") == 0


def test_a_record_over_message_max_bytes_is_message_too_large(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server)
    _topic(s, "small", **{"message.max.bytes": 1024})
    frame = produce_frame("small", 0, [b"ok", b"x" * 2048])
    assert produce_response(request(bootstrap, frame)) == (MESSAGE_TOO_LARGE, -1)
    assert _high_watermark(s, "small") == 0
    assert produce_response(request(bootstrap, produce_frame("small", 0, [b"ok"]))) == (0, 0)


def test_a_configured_listener_that_cannot_bind_stops_the_start(tmp_path: object) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        result = subprocess.run(
            [*LOGSTORE, "--root", str(tmp_path), "serve", "--port", str(free_port())],
            env=_env(LOGSTORE_LISTENERS=f"PLAINTEXT://127.0.0.1:{taken}"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode != 0
    assert f"listeners=PLAINTEXT://127.0.0.1:{taken}: cannot listen on 127.0.0.1:{taken}" in result.stderr


def test_the_default_listener_on_a_taken_port_warns_and_http_is_served(server: Callable[..., Server]) -> None:
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 9092))
        holder.listen()
    except OSError:
        pass  # someone else holds 9092: the same situation
    try:
        s = server(listeners="PLAINTEXT://127.0.0.1:9092")
        assert httpx.get(s.url + "/readyz").status_code == 200
        assert "port 9092 is taken: serving HTTP without the Kafka listener" in s.log()
    finally:
        holder.close()


@pytest.mark.parametrize("bad", ["SSL://127.0.0.1:9093", "PLAINTEXT://nowhere"])
def test_a_malformed_listener_is_refused_by_name(tmp_path: object, bad: str) -> None:
    result = subprocess.run(
        [*LOGSTORE, "--root", str(tmp_path), "serve", "--port", str(free_port()), "--listeners", bad],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert f"listeners={bad!r}" in result.stderr


@pytest.mark.parametrize(
    ("env", "listener", "message"),
    [
        ({}, "SASL_PLAINTEXT://127.0.0.1:{port}", "SASL needs security.enabled=true"),
        (
            {"LOGSTORE_SECURITY_ENABLED": "true"},
            "SASL_SSL://127.0.0.1:{port}",
            "SASL_SSL serves TLS with server.ssl.certfile",
        ),
        ({}, "PLAINTEXT://0.0.0.0:{port}", "refusing to serve the Kafka protocol on 0.0.0.0"),
    ],
    ids=["sasl-without-security", "sasl-ssl-without-certificate", "not-loopback"],
)
def test_a_listener_that_would_open_the_node_is_refused(
    tmp_path: object, env: dict[str, str], listener: str, message: str
) -> None:
    result = subprocess.run(
        [*LOGSTORE, "--root", str(tmp_path), "serve", "--port", str(free_port())],
        env=_env(LOGSTORE_LISTENERS=listener.format(port=free_port()), **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert message in result.stderr


def test_a_client_that_stalls_mid_frame_is_timed_out(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server, **{"request.timeout.ms": 500})
    _topic(s, "stall")
    frame = produce_frame("stall", 0, [b"never whole"])
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(frame[: len(frame) // 2])
        assert sock.recv(1) == b""  # closed by the node, long before this socket's own timeout
    assert "did not arrive within request.timeout.ms=500" in s.log()
    assert _high_watermark(s, "stall") == 0
