"""Parser processes (``num.parser.processes``) that die: no request is lost when one is killed, and the node's
end, by SIGTERM or SIGKILL, ends its parser."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable

import orjson
import pytest

from logstore.wire.json_produce import parse_produce
from tests.support.parsers import (
    assert_same_records,
    has_ended,
    json_body,
    parsed_by_parser,
    sample,
    started_parsers,
    wait_until,
)
from tests.support.server import Server


@pytest.mark.crash
def test_a_killed_parser_costs_no_body_and_is_replaced() -> None:
    bodies = [json_body(n=300 + i, producer_id=f"p{i}", sequence=i) for i in range(40)]

    async def run() -> None:
        parsers, metrics = await started_parsers()
        try:
            (pid,) = parsers.ready()
            in_flight = [asyncio.ensure_future(parsers.parse(b)) for b in bodies]
            await asyncio.sleep(0)  # every body is written to the process before it dies
            os.kill(pid, signal.SIGKILL)
            for body, parsed in zip(bodies, await asyncio.gather(*in_flight), strict=True):
                assert_same_records(parsed, parse_produce(body))
            await wait_until(lambda: sample(metrics, "logstore_parser_restarts_total") == 1)
            await wait_until(lambda: parsers.ready() and parsers.ready() != [pid])
            before = sample(metrics, "logstore_parsed_bodies_total", where="parser")
            assert_same_records(await parsers.parse(bodies[0]), parse_produce(bodies[0]))
            assert sample(metrics, "logstore_parsed_bodies_total", where="parser") == before + 1
        finally:
            await parsers.close()
        assert parsers.ready() == []

    asyncio.run(run())


@pytest.mark.crash
@pytest.mark.parametrize("end", ["SIGTERM", "SIGKILL"])
def test_the_node_hands_large_json_bodies_to_its_parser_and_its_end_ends_the_parser(
    server: Callable[..., Server], end: str
) -> None:
    srv = server(**{"num.parser.processes": 1})
    body = json_body(producer_id="p", sequence=0)
    sent = orjson.loads(body)["records"]
    with srv.client() as c:
        child, seq = parsed_by_parser(srv, c)
        bad = c.post("/v1/topics/t/records", content=body.replace(b'"timestamp":1700000000000', b'"timestamp":-1'))
        assert (bad.status_code, bad.json()["error_code"]) == (400, "INVALID_TIMESTAMP")
        # what the parser parsed is what was sent: the last accepted body, read back
        fetched = []
        for p in range(4):
            got = c.get(f"/v1/topics/t/partitions/{p}/records", params={"offset": 0, "max_records": 100_000})
            fetched += got.json()["records"]
        assert len(fetched) == len(sent) * seq
    last = [r for r in fetched if r["value"] == sent[-1]["value"]]
    assert len(last) == seq
    if end == "SIGTERM":
        assert srv.stop() in (0, -15), srv.log()  # uvicorn re-raises SIGTERM after its graceful shutdown
    else:
        srv.kill()
    deadline = time.monotonic() + 10
    while not has_ended(child):  # its stdin ended with the node
        assert time.monotonic() < deadline, f"parser {child} outlived the node ({end})"
        time.sleep(0.01)
