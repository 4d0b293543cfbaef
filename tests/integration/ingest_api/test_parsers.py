"""Parser processes (``num.parser.processes``): the same records and errors as the event loop's parse, and the
node hands them its large JSON bodies (a killed one is in ``tests/system/ingest_api/test_parsers.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from logstore.errors import InvalidRequestError, InvalidTimestampError
from logstore.wire.json_produce import parse_produce
from tests.support.parsers import (
    assert_same_records,
    json_body,
    parsed_by_parser,
    plain_body,
    sample,
    started_parsers,
)
from tests.support.server import Server


def test_a_parser_process_gives_the_records_the_event_loop_would() -> None:
    bodies = [plain_body(), json_body(), json_body(producer_id="p-1", sequence=7), plain_body(3000)]

    async def run() -> None:
        parsers, metrics = await started_parsers()
        try:
            assert sample(metrics, "logstore_parsed_bodies_total", where="parser") == 0
            for body in bodies:
                assert_same_records(await parsers.parse(body), parse_produce(body))
            assert sample(metrics, "logstore_parsed_bodies_total", where="parser") == len(bodies)
            # a small body is parsed on the event loop: the hand-off would cost more than the parse
            before = sample(metrics, "logstore_parsed_bodies_total", where="event_loop")
            small = b'{"records": [{"value": "v"}]}'
            assert_same_records(await parsers.parse(small), parse_produce(small))
            assert sample(metrics, "logstore_parsed_bodies_total", where="event_loop") == before + 1
        finally:
            await parsers.close()

    asyncio.run(run())


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (plain_body()[:-5], InvalidRequestError),  # cut short: not JSON
        (json_body().replace(b'"timestamp":1700000000000', b'"timestamp":-1', 1), InvalidTimestampError),
        (json_body().replace(b'"partition":0', b'"partition":"zero"', 1), InvalidRequestError),
        (json_body(producer_id="p-1"), InvalidRequestError),  # an id without a sequence
        (plain_body().replace(b'"value"', b'"vaule"', 1), InvalidRequestError),
    ],
)
def test_a_refused_body_fails_with_the_event_loop_parsers_error(body: bytes, error: type[Exception]) -> None:
    with pytest.raises(error) as inline:
        parse_produce(body)

    async def run() -> None:
        parsers, metrics = await started_parsers()
        try:
            with pytest.raises(error) as handed_off:
                await parsers.parse(body)
            assert str(handed_off.value) == str(inline.value)
            assert sample(metrics, "logstore_parsed_bodies_total", where="parser") == 0
            assert_same_records(await parsers.parse(plain_body()), parse_produce(plain_body()))  # the process goes on
            assert sample(metrics, "logstore_parsed_bodies_total", where="parser") == 1
        finally:
            await parsers.close()

    asyncio.run(run())


def test_neither_the_node_nor_its_parser_loads_pandas(server: Callable[..., Server]) -> None:
    """pyarrow's first conversion of Python lists would import pandas (~30 MiB a process) in both."""
    srv = server(**{"num.parser.processes": 1})
    with srv.client() as c:
        child, _ = parsed_by_parser(srv, c)
        c.post("/v1/topics/t/records", content=b'{"records": [{"value": "small"}]}').raise_for_status()
    assert srv.proc is not None
    for pid in (srv.proc.pid, child):
        maps = (Path("/proc") / str(pid) / "maps").read_text()
        assert "/pandas/" not in maps, f"process {pid} loaded pandas"
        assert "/pyarrow/" in maps  # the check reads the right process
