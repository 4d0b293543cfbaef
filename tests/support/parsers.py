"""JSON produce bodies and probes of parser processes (``num.parser.processes``), for the parser tests of every tier."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson

from ingest_api.parser_pool import MIN_BODY_BYTES, Parsers
from logstore.node.metrics import Metrics
from logstore.wire.json_produce import ParsedRecords
from tests.support.server import Server


def json_body(n: int = 400, **top: object) -> bytes:
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


def plain_body(n: int = 400) -> bytes:
    """Keys and values only (the event loop's fast path)."""
    return orjson.dumps({"records": [{"key": f"k{i}", "value": "v" * 60} for i in range(n)]})


def assert_same_records(a: ParsedRecords, b: ParsedRecords) -> None:
    """The two parses hold the same records (types included) and the same producer fields."""
    assert a.keys.equals(b.keys) and a.keys.type == b.keys.type
    assert a.values.equals(b.values) and a.values.type == b.values.type
    assert a.headers.equals(b.headers)
    assert a.timestamps.equals(b.timestamps) and a.timestamps.type == b.timestamps.type
    assert a.partitions.equals(b.partitions) and a.partitions.type == b.partitions.type
    assert (a.producer_id, a.sequence) == (b.producer_id, b.sequence)


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    """The value of one sample of ``metrics`` (0 when it was never observed)."""
    value = metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def wait_until(condition: Callable[[], object], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def started_parsers(processes: int = 1) -> tuple[Parsers, Metrics]:
    """Parsers whose processes are ready (the first large body starts them and is parsed on the event loop)."""
    metrics = Metrics()
    parsers = Parsers(processes, metrics)
    await parsers.parse(plain_body())
    await wait_until(lambda: len(parsers.ready()) == processes)
    return parsers, metrics


def children_of(pid: int) -> list[int]:
    """The pids of ``pid``'s children, from /proc."""
    return [int(c) for f in Path(f"/proc/{pid}/task").glob("*/children") for c in f.read_text().split()]


def has_ended(pid: int) -> bool:
    """The process is gone, or a zombie nobody has waited for yet."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def server_metric(server: Server, name: str, labels: str = "") -> float:
    """One sample of the node's /metrics, by its name and label text (0 when absent)."""
    with server.client() as c:
        for line in c.get("/metrics").text.splitlines():
            if line.startswith(name + labels + " "):
                return float(line.split()[-1])
    return 0.0


def parsed_by_parser(srv: Server, c: httpx.Client) -> tuple[int, int]:
    """Create topic ``t`` (4 partitions) and produce large JSON bodies of producer ``p`` from sequence 0 until
    the node's parser process has parsed one; returns the parser's pid and how many bodies were sent."""
    c.post("/v1/topics", json={"name": "t", "partitions": 4}).raise_for_status()
    assert c.post("/v1/topics/t/records", content=json_body(producer_id="p", sequence=0)).status_code == 200
    assert srv.proc is not None
    deadline = time.monotonic() + 30
    parser = "ingest_api.parser_process"
    while not any(parser in (Path("/proc") / str(p) / "cmdline").read_text() for p in children_of(srv.proc.pid)):
        assert time.monotonic() < deadline, "no parser process"
        time.sleep(0.01)
    (child,) = [p for p in children_of(srv.proc.pid) if parser in (Path("/proc") / str(p) / "cmdline").read_text()]
    # the parser takes bodies once it says it is ready: send until one is counted
    seq = 1
    while server_metric(srv, "logstore_parsed_bodies_total", '{where="parser"}') == 0:
        assert time.monotonic() < deadline, "no body was parsed by the parser process"
        r = c.post("/v1/topics/t/records", content=json_body(producer_id="p", sequence=seq))
        assert r.status_code == 200, r.text
        seq += 1
    return child, seq
