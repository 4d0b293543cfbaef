"""A produce whose commit keeps failing is answered within ``request.timeout.ms``; the records still land later.

The committer retries a commit that meets a storage error for as long as it
takes, so an acks=all request waiting for that commit would never be
answered. It gets 408 ``REQUEST_TIMED_OUT`` after ``request.timeout.ms``
(naming the storage error), as a Kafka broker answers; the batch stays queued,
and once storage recovers it is committed — what Kafka's contract says of a
request that timed out: it may have been written.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from tests.support.server import Server

TIMEOUT_MS = 1500


def test_acks_all_gets_request_timed_out_while_the_commit_fails_and_lands_after(
    server: Callable[..., Server],
) -> None:
    srv = server(**{"request.timeout.ms": TIMEOUT_MS})
    c = srv.client(timeout=30)
    assert c.post("/v1/topics", json={"name": "b", "partitions": 1}).status_code == 201
    blocker = srv.root / "topics" / "b" / "partition=0"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.touch()  # a file where the partition's directory goes: every commit fails with a storage error

    started = time.monotonic()
    try:
        r = c.post("/v1/topics/b/records", params={"acks": "all"}, json={"records": [{"value": "v"}]})
    except httpx.TimeoutException:
        raise AssertionError("an acks=all produce whose commit keeps failing got no answer in 30 s") from None
    waited = time.monotonic() - started
    assert r.status_code == 408, r.text
    body = r.json()
    assert body["error_code"] == "REQUEST_TIMED_OUT", body
    assert "request.timeout.ms=1500" in body["message"] and "KAFKA_STORAGE_ERROR" in body["message"], body
    assert TIMEOUT_MS / 1000 <= waited < TIMEOUT_MS / 1000 + 10

    blocker.unlink()  # storage recovers: the committer's retry commits the record answered with the timeout
    deadline = time.monotonic() + 30
    while True:
        got = c.get("/v1/topics/b/partitions/0/records", params={"offset": 0}).json()["records"]
        if got:
            break
        assert time.monotonic() < deadline, "the queued record was not committed after storage recovered"
        time.sleep(0.1)
    assert [(x["offset"], x["value"]) for x in got] == [(0, "v")]
    r = c.post("/v1/topics/b/records", params={"acks": "all"}, json={"records": [{"value": "w"}]})
    assert r.status_code == 200 and r.json()["offsets"] == [{"partition": 0, "offset": 1}], r.text


def test_an_idempotent_retry_after_timeouts_is_written_once(server: Callable[..., Server]) -> None:
    srv = server(**{"request.timeout.ms": 500})
    c = srv.client(timeout=30)
    assert c.post("/v1/topics", json={"name": "i", "partitions": 1}).status_code == 201
    blocker = srv.root / "topics" / "i" / "partition=0"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.touch()
    body = {"producer_id": "p1", "sequence": 0, "records": [{"value": "once"}]}
    for _ in range(3):  # a client retrying its timed-out request: every attempt stays queued
        r = c.post("/v1/topics/i/records", json=body)
        assert r.status_code == 408 and r.json()["error_code"] == "REQUEST_TIMED_OUT", r.text
    blocker.unlink()  # storage recovers; the client retries until it gets an answer (the committer backs off ~1 s)
    deadline = time.monotonic() + 30
    while (r := c.post("/v1/topics/i/records", json=body)).status_code == 408:
        assert time.monotonic() < deadline, r.text
    assert r.status_code == 200 and r.json()["offsets"] == [{"partition": 0, "offset": 0}], r.text
    got = c.get("/v1/topics/i/partitions/0/records", params={"offset": 0}).json()["records"]
    assert [(x["offset"], x["value"]) for x in got] == [(0, "once")]
