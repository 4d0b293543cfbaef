"""Without parser processes (``num.parser.processes`` 0) a JSON produce body is parsed on the event loop.

The parser processes themselves are in ``tests/integration/ingest_api/test_parsers.py``
and, killed, in ``tests/system/ingest_api/test_parsers.py``.
"""

from __future__ import annotations

import asyncio

import orjson

from ingest_api.parsers import Parsers
from logstore.node.metrics import Metrics
from logstore.wire.json_produce import ParsedRecords, parse_produce


def _plain(n: int = 400) -> bytes:
    """Keys and values only (the event loop's fast path)."""
    return orjson.dumps({"records": [{"key": f"k{i}", "value": "v" * 60} for i in range(n)]})


def _same(a: ParsedRecords, b: ParsedRecords) -> None:
    assert a.keys.equals(b.keys) and a.keys.type == b.keys.type
    assert a.values.equals(b.values) and a.values.type == b.values.type
    assert a.headers.equals(b.headers)
    assert a.timestamps.equals(b.timestamps) and a.timestamps.type == b.timestamps.type
    assert (a.partitions, a.producer_id, a.sequence) == (b.partitions, b.producer_id, b.sequence)


def _count(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return value or 0.0


def test_no_parser_processes_parse_on_the_event_loop() -> None:
    async def run() -> None:
        metrics = Metrics()
        parsers = Parsers(0, metrics)
        _same(await parsers.parse(_plain()), parse_produce(_plain()))
        assert parsers.ready() == []
        assert _count(metrics, "logstore_parsed_bodies_total", where="event_loop") == 1
        await parsers.close()

    asyncio.run(run())
