"""At the Kafka listener, an acks=all produce whose commit keeps failing is answered REQUEST_TIMED_OUT in time."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.support.server import Server
from tests.system.kafka.raw import produce_frame, produce_response, request
from tests.system.kafka.test_kafka_bad_input import _high_watermark, _kafka_server, _topic

REQUEST_TIMED_OUT = 7


def test_acks_all_is_request_timed_out_while_storage_fails_and_committed_after(server: Callable[..., Server]) -> None:
    srv, bootstrap = _kafka_server(server, **{"request.timeout.ms": 1500})
    _topic(srv, "b")
    blocker = srv.root / "topics" / "b" / "partition=0"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.touch()  # a file where the partition's directory goes: every commit fails with a storage error
    try:
        answer = request(bootstrap, produce_frame("b", 0, [b"v"]), timeout=20)
    except TimeoutError:
        pytest.fail("an acks=all produce whose commit keeps failing got no answer in 20 s")
    assert produce_response(answer) == (REQUEST_TIMED_OUT, -1)

    blocker.unlink()  # storage recovers: the record answered with the timeout is committed by the retry
    deadline = time.monotonic() + 30
    while _high_watermark(srv, "b") < 1:
        assert time.monotonic() < deadline, "the queued record was not committed after storage recovered"
        time.sleep(0.1)
