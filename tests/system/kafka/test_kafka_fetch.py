"""Fetch at the Kafka listener: the long poll (``max_wait_ms``), woken by a commit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kafka_api.records import decode_batches
from tests.support.server import Server, free_port
from tests.system.kafka.raw import fetch_frame, fetch_response, request


def test_fetch_long_polls_until_max_wait_and_wakes_on_a_commit(server: Callable[..., Server]) -> None:
    """Nothing to read: the answer waits max_wait_ms. A record committed meanwhile: it is answered with it."""
    port = free_port()
    s, bootstrap = server(listeners=f"PLAINTEXT://127.0.0.1:{port}"), f"127.0.0.1:{port}"
    with s.client() as http:
        assert http.post("/v1/topics", json={"name": "poll", "partitions": 1}).status_code in (200, 201)
    started = time.monotonic()
    assert fetch_response(request(bootstrap, fetch_frame("poll", 0, 0, max_wait_ms=1500))) == (0, 0, b"")
    assert time.monotonic() - started >= 1.4

    def produce_soon() -> None:
        with s.client() as http:
            http.post("/v1/topics/poll/records", json={"records": [{"value": "woken"}]})

    producer = threading.Thread(target=produce_soon)
    started = time.monotonic()
    producer.start()
    code, high_watermark, records = fetch_response(request(bootstrap, fetch_frame("poll", 0, 0, max_wait_ms=20_000)))
    producer.join()
    assert time.monotonic() - started < 10
    assert (code, high_watermark) == (0, 1)
    assert decode_batches(records)[0].values.to_pylist() == [b"woken"]
