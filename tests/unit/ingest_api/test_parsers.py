"""Without parser processes (``num.parser.processes`` 0) a JSON produce body is parsed on the event loop.

The parser processes themselves are in ``tests/integration/ingest_api/test_parsers.py``
and, killed, in ``tests/system/ingest_api/test_parsers.py``.
"""

from __future__ import annotations

import asyncio

from ingest_api.parser_pool import Parsers
from logstore.node.metrics import Metrics
from logstore.wire.json_produce import parse_produce
from tests.support.parsers import assert_same_records, plain_body, sample


def test_no_parser_processes_parse_on_the_event_loop() -> None:
    async def run() -> None:
        metrics = Metrics()
        parsers = Parsers(0, metrics)
        assert_same_records(await parsers.parse(plain_body()), parse_produce(plain_body()))
        assert parsers.ready() == []
        assert sample(metrics, "logstore_parsed_bodies_total", where="event_loop") == 1
        await parsers.close()

    asyncio.run(run())
