"""Parser processes (``num.parser.processes``): the same records and errors as the event loop's parse, and no
request lost when one dies."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from ingest_api.parsers import MIN_BODY_BYTES, Parsers
from logstore.errors import InvalidRequestError, InvalidTimestampError
from logstore.node.metrics import Metrics
from logstore.wire.json_produce import ParsedRecords, parse_produce
from tests.support.server import Server


def _body(n: int = 400, **top: object) -> bytes:
    """A JSON produce body above MIN_BODY_BYTES, with every field a record may have."""
    records: list[dict[str, object]] = []
    for i in range(n):
        r: dict[str, object] = {"key": f"k{i}" if i % 3 else None, "value": f"value-{i}-" + "x" * 40}
        if i % 5 == 0:
            r["partition"] = i % 4
        if i % 7 == 0:
            r["timestamp"] = 1_700_000_000_000 + i
        if i % 11 == 0:
            r["headers"] = {"trace": f"t{i}", "b": {"b64": "AAE="}}
        if i % 13 == 0:
            r["value"] = None
        if i == 1:
            r["value"] = {"b64": "3q2+7w=="}
        records.append(r)
    body = orjson.dumps({"records": records, **top})
    assert len(body) >= MIN_BODY_BYTES
    return body


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


async def _until(condition: Callable[[], object], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def _started(processes: int = 1) -> tuple[Parsers, Metrics]:
    """Parsers whose processes are ready (the first large body starts them and is parsed on the event loop)."""
    metrics = Metrics()
    parsers = Parsers(processes, metrics)
    await parsers.parse(_plain())
    await _until(lambda: len(parsers.ready()) == processes)
    return parsers, metrics


def test_a_parser_process_gives_the_records_the_event_loop_would() -> None:
    bodies = [_plain(), _body(), _body(producer_id="p-1", sequence=7), _plain(3000)]

    async def run() -> None:
        parsers, metrics = await _started()
        try:
            assert _count(metrics, "logstore_parsed_bodies_total", where="parser") == 0
            for body in bodies:
                _same(await parsers.parse(body), parse_produce(body))
            assert _count(metrics, "logstore_parsed_bodies_total", where="parser") == len(bodies)
            # a small body is parsed on the event loop: the hand-off would cost more than the parse
            before = _count(metrics, "logstore_parsed_bodies_total", where="event_loop")
            small = b'{"records": [{"value": "v"}]}'
            _same(await parsers.parse(small), parse_produce(small))
            assert _count(metrics, "logstore_parsed_bodies_total", where="event_loop") == before + 1
        finally:
            await parsers.close()

    asyncio.run(run())


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (_plain()[:-5], InvalidRequestError),  # cut short: not JSON
        (_body().replace(b'"timestamp":1700000000000', b'"timestamp":-1', 1), InvalidTimestampError),
        (_body().replace(b'"partition":0', b'"partition":"zero"', 1), InvalidRequestError),
        (_body(producer_id="p-1"), InvalidRequestError),  # an id without a sequence
        (_plain().replace(b'"value"', b'"vaule"', 1), InvalidRequestError),
    ],
)
def test_a_refused_body_fails_with_the_event_loop_parsers_error(body: bytes, error: type[Exception]) -> None:
    with pytest.raises(error) as inline:
        parse_produce(body)

    async def run() -> None:
        parsers, metrics = await _started()
        try:
            with pytest.raises(error) as handed_off:
                await parsers.parse(body)
            assert str(handed_off.value) == str(inline.value)
            assert _count(metrics, "logstore_parsed_bodies_total", where="parser") == 0
            _same(await parsers.parse(_plain()), parse_produce(_plain()))  # the process goes on
            assert _count(metrics, "logstore_parsed_bodies_total", where="parser") == 1
        finally:
            await parsers.close()

    asyncio.run(run())


@pytest.mark.crash
def test_a_killed_parser_costs_no_body_and_is_replaced() -> None:
    bodies = [_body(n=300 + i, producer_id=f"p{i}", sequence=i) for i in range(40)]

    async def run() -> None:
        parsers, metrics = await _started()
        try:
            (pid,) = parsers.ready()
            in_flight = [asyncio.ensure_future(parsers.parse(b)) for b in bodies]
            await asyncio.sleep(0)  # every body is written to the process before it dies
            os.kill(pid, signal.SIGKILL)
            for body, parsed in zip(bodies, await asyncio.gather(*in_flight), strict=True):
                _same(parsed, parse_produce(body))
            await _until(lambda: _count(metrics, "logstore_parser_restarts_total") == 1)
            await _until(lambda: parsers.ready() and parsers.ready() != [pid])
            before = _count(metrics, "logstore_parsed_bodies_total", where="parser")
            _same(await parsers.parse(bodies[0]), parse_produce(bodies[0]))
            assert _count(metrics, "logstore_parsed_bodies_total", where="parser") == before + 1
        finally:
            await parsers.close()
        assert parsers.ready() == []

    asyncio.run(run())


def _children(pid: int) -> list[int]:
    return [int(c) for f in Path(f"/proc/{pid}/task").glob("*/children") for c in f.read_text().split()]


def _gone(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def _metric(server: Server, name: str, labels: str = "") -> float:
    with server.client() as c:
        for line in c.get("/metrics").text.splitlines():
            if line.startswith(name + labels + " "):
                return float(line.split()[-1])
    return 0.0


def _parsed_by_parser(srv: Server, c: httpx.Client) -> tuple[int, int]:
    """Create topic ``t`` (4 partitions) and produce large JSON bodies of producer ``p`` from sequence 0 until
    the node's parser process has parsed one; returns the parser's pid and how many bodies were sent."""
    c.post("/v1/topics", json={"name": "t", "partitions": 4}).raise_for_status()
    assert c.post("/v1/topics/t/records", content=_body(producer_id="p", sequence=0)).status_code == 200
    assert srv.proc is not None
    deadline = time.monotonic() + 30
    parser = "ingest_api.parser_process"
    while not any(parser in (Path("/proc") / str(p) / "cmdline").read_text() for p in _children(srv.proc.pid)):
        assert time.monotonic() < deadline, "no parser process"
        time.sleep(0.01)
    (child,) = [p for p in _children(srv.proc.pid) if parser in (Path("/proc") / str(p) / "cmdline").read_text()]
    # the parser takes bodies once it says it is ready: send until one is counted
    seq = 1
    while _metric(srv, "logstore_parsed_bodies_total", '{where="parser"}') == 0:
        assert time.monotonic() < deadline, "no body was parsed by the parser process"
        r = c.post("/v1/topics/t/records", content=_body(producer_id="p", sequence=seq))
        assert r.status_code == 200, r.text
        seq += 1
    return child, seq


def test_neither_the_node_nor_its_parser_loads_pandas(server: Callable[..., Server]) -> None:
    """pyarrow's first conversion of Python lists would import pandas (~30 MiB a process) in both."""
    srv = server(**{"num.parser.processes": 1})
    with srv.client() as c:
        child, _ = _parsed_by_parser(srv, c)
        c.post("/v1/topics/t/records", content=b'{"records": [{"value": "small"}]}').raise_for_status()
    assert srv.proc is not None
    for pid in (srv.proc.pid, child):
        maps = (Path("/proc") / str(pid) / "maps").read_text()
        assert "/pandas/" not in maps, f"process {pid} loaded pandas"
        assert "/pyarrow/" in maps  # the check reads the right process


@pytest.mark.crash
@pytest.mark.parametrize("end", ["SIGTERM", "SIGKILL"])
def test_the_node_hands_large_json_bodies_to_its_parser_and_its_end_ends_the_parser(
    server: Callable[..., Server], end: str
) -> None:
    srv = server(**{"num.parser.processes": 1})
    body = _body(producer_id="p", sequence=0)
    sent = orjson.loads(body)["records"]
    with srv.client() as c:
        child, seq = _parsed_by_parser(srv, c)
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
    while not _gone(child):  # its stdin ended with the node
        assert time.monotonic() < deadline, f"parser {child} outlived the node ({end})"
        time.sleep(0.01)
