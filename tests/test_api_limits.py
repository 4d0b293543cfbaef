"""The HTTP tier's bounds: request bodies by size and by time, fetches by bytes, producer ids by length.

Every bound answers with a Kafka error before memory grows with the input:
``max.request.size`` (413 ``RECORD_LIST_TOO_LARGE``, also for chunked bodies),
``request.timeout.ms`` (408 ``REQUEST_TIMED_OUT`` for a body that stalls),
a fetch's ``max_bytes`` (the reader stops reading once it has enough), and
``producer_id`` of 1-256 characters without control characters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from ingest_api.parse import MAX_PRODUCER_ID_LENGTH
from tests.server import Server

StartServer = Callable[..., Server]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """One server with topic ``t`` for the cases that only send bad input (it changes nothing)."""
    srv = Server(tmp_path_factory.mktemp("limits") / "data").start()
    try:
        c = srv.client()
        assert c.post("/v1/topics", json={"name": "t"}).status_code == 201
        yield c
    finally:
        srv.kill()


@pytest.mark.parametrize(
    ("producer_id", "fragment"),
    [
        ("p" * (MAX_PRODUCER_ID_LENGTH + 1), "1 to 256 characters"),
        ("", "1 to 256 characters"),
        (7, "1 to 256 characters"),
        ("line\nbreak", "control characters"),
        ("nul\x00", "control characters"),
        ("del\x7f", "control characters"),
    ],
)
def test_producer_id_is_bounded(api: httpx.Client, producer_id: object, fragment: str) -> None:
    r = api.post("/v1/topics/t/records", json={"records": [{"value": "x"}], "producer_id": producer_id, "sequence": 0})
    assert r.status_code == 400, r.text
    assert r.json()["error_code"] == "INVALID_REQUEST" and fragment in r.json()["message"]


def test_longest_producer_id_is_accepted(api: httpx.Client) -> None:
    body = {"records": [{"value": "x"}], "producer_id": "é" * MAX_PRODUCER_ID_LENGTH, "sequence": 0}
    assert api.post("/v1/topics/t/records", json=body).status_code == 200
