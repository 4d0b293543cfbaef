"""The HTTP benchmarks' load generator: produce requests against a ``logstore serve`` (``harness.LogstoreServer``).

It runs in a process of its own (:func:`_run` starts this file), so its
event loop does not share a GIL with the benchmark's orchestration:

* ``closed``: ``concurrency`` requests in flight, each a batch of ``RECORDS``
  records with ``VALUE_BYTES``-byte values to a topic drawn at random from
  the ones given, for ``seconds`` or until ``requests`` requests were
  acknowledged (whichever is given) → records/s and the latency of the
  acknowledged requests (``harness.summary_ms``);
* ``open``: requests sent on a fixed schedule (``rate`` requests/s) whatever
  the answers' latency (open loop, no coordinated omission) → per-request
  latency p50/p99/p99.9 in ms, from send to the last byte of the answer;
* ``stamped``: the open loop's schedule with requests built as they leave,
  each record's timestamp the send time (end-to-end latency: CreateTime to
  consumer) → records answered;
* ``touch``: one one-record acks=all request to each topic given,
  ``concurrency`` at a time → how many were answered 200, and the seconds.

Either loop sends the records as a JSON body (``body_format="json"``, the
default) or as an Arrow IPC stream (``"arrow"``, :mod:`logstore.wire.arrow_produce`),
with extra request ``headers`` if given (``Authorization``).

The two loops speak HTTP/1.1 themselves (:class:`Http1`), as wrk does: each
connection sends a request built once and reads the status line, the headers
and the body it announces, nothing more. A general client costs more CPU per
request than the server under test: httpx took about one of this machine's
two cores at 150 requests/s, and the server's throughput doubled when that
core was given back (measured: 1 topic, 32 in flight, 145k → 291k records/s).
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import orjson
import pyarrow as pa
from harness import VALUE_BYTES, summary_ms

from logstore.wire.arrow_produce import ARROW_STREAM, encode_produce

RECORDS = 1000
"""Records per produce request (values of ``harness.VALUE_BYTES`` bytes, null keys)."""
KEEP_ALIVE_S = 4.0
"""An open-loop connection idle this long is closed, not reused (under uvicorn's 5 s keep-alive)."""
LOAD_GENERATOR = "bench/_http_load.py: asyncio HTTP/1.1 in a child process, prepared requests, keep-alive"
"""How the benchmarks' JSON documents name this load generator."""


def body(body_format: str = "json", partition: int | None = None) -> bytes:
    """One produce body: ``RECORDS`` distinct random ``VALUE_BYTES``-character values, null keys.

    ``body_format`` is ``json`` or ``arrow`` (the same records as an Arrow IPC stream).
    With ``partition`` every record names that partition; else the node's
    partitioner chooses.
    """
    rng = np.random.default_rng(0)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)
    vals = [bytes(letters[rng.integers(0, len(letters), VALUE_BYTES)]).decode() for _ in range(RECORDS)]
    if body_format == "arrow":
        columns = {"value": pa.array(vals, pa.binary())}
        if partition is not None:
            columns["partition"] = pa.array([partition] * RECORDS, pa.int32())
        return encode_produce(pa.table(columns))
    where = {} if partition is None else {"partition": partition}
    return orjson.dumps({"records": [{"value": v, **where} for v in vals]})


def content_type(body_format: str) -> str:
    """The ``Content-Type`` of a :func:`body` of that format."""
    return ARROW_STREAM if body_format == "arrow" else "application/json"


# -- load generator (separate process) -------------------------------------------


class Http1:
    """One keep-alive HTTP/1.1 connection that sends prepared requests and reads each answer whole.

    Reconnects when the server closes the connection (``Connection: close``,
    as after a 408 or 413, or end of stream).
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def send(self, request: bytes) -> int:
        """Send ``request`` (a whole HTTP/1.1 request) → the answer's status code once its body is read."""
        if self._reader is None or self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        reader, writer = self._reader, self._writer
        try:
            writer.write(request)
            head = (await reader.readuntil(b"\r\n\r\n")).lower()
            status = int(head[9:12])
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                await reader.readexactly(int(head[at + 17 : head.index(b"\r\n", at + 2)]))
            elif b"\r\ntransfer-encoding: chunked" in head:
                while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                    await reader.readexactly(size + 2)
                await reader.readuntil(b"\r\n")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            self.close()
            raise
        if b"\r\nconnection: close" in head:
            self.close()
        return status

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


def _produce_requests(
    url: str,
    topics: list[str],
    acks: str,
    body_format: str,
    headers: Mapping[str, str] | None = None,
    partitions: Mapping[str, list[int]] | None = None,
) -> list[bytes]:
    """Prepared produce requests: headers and the :func:`body` of ``body_format``.

    One per topic; or, for a topic in ``partitions``, one per partition listed
    there, each of whose records names that partition, sent with
    ``?forward=false`` (a cluster node that does not lead it answers 421 and
    the request counts as failed, instead of being forwarded).
    """
    host = urlsplit(url).netloc
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    out = []
    for t in topics:
        for p in (partitions or {}).get(t, [None]):
            payload = body(body_format, p)
            query = f"acks={acks}" + ("" if p is None else "&forward=false")
            out.append(
                (
                    f"POST /v1/topics/{t}/records?{query} HTTP/1.1\r\nhost: {host}\r\n{extra}"
                    f"content-type: {content_type(body_format)}\r\ncontent-length: {len(payload)}\r\n\r\n"
                ).encode()
                + payload
            )
    return out


async def _closed_loop(
    url: str,
    topics: list[str],
    acks: str,
    concurrency: int,
    seconds: float,
    requests: int,
    body_format: str,
    headers: Mapping[str, str] | None = None,
    partitions: Mapping[str, list[int]] | None = None,
) -> dict[str, Any]:
    """``seconds`` > 0 bounds the run by time, ``requests`` > 0 by acknowledged requests (the first reached)."""
    prepared = _produce_requests(url, topics, acks, body_format, headers, partitions)
    parts = urlsplit(url)
    started = 0
    failed = 0
    lat: list[float] = []
    pick = random.Random(0)
    stop = time.perf_counter() + seconds if seconds > 0 else float("inf")

    async def worker() -> None:
        nonlocal started, failed
        conn = Http1(parts.hostname or "127.0.0.1", parts.port or 80)
        while time.perf_counter() < stop and (requests <= 0 or started < requests):
            started += 1
            t0 = time.perf_counter()
            try:
                status = await conn.send(pick.choice(prepared))
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                status = 0
            if status in (200, 202):
                lat.append((time.perf_counter() - t0) * 1000)
            else:
                failed += 1
        conn.close()

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    return {
        "requests": len(lat),
        "failed": failed,
        "records": len(lat) * RECORDS,
        "seconds": elapsed,
        "records_per_s": len(lat) * RECORDS / elapsed,
        **summary_ms(lat),
        "load_generator_cpu_cores": (time.process_time() - cpu) / elapsed,
    }


async def _touch(url: str, topics: list[str], concurrency: int) -> dict[str, object]:
    ok = 0
    failures: dict[str, int] = {}
    todo = list(topics)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:

        async def worker() -> None:
            nonlocal ok
            while todo:
                try:
                    r = await c.post(f"/v1/topics/{todo.pop()}/records", json={"records": [{"value": "x"}]})
                except httpx.HTTPError as e:  # counted: a server that stops answering is the finding
                    failures[type(e).__name__] = failures.get(type(e).__name__, 0) + 1
                    continue
                if r.status_code == 200:
                    ok += 1
                else:
                    failures[str(r.status_code)] = failures.get(str(r.status_code), 0) + 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {"topics": len(topics), "answered_200": ok, "failures": failures, "seconds": elapsed}


async def _schedule(
    url: str, seconds: float, rate: float, request: Callable[[], bytes]
) -> tuple[list[float], dict[str, int]]:
    """Send ``request()`` ``rate`` times a second for ``seconds``, whatever the answers' latency.

    Returns the latencies of the 200 answers (ms) and the other outcomes: how many
    of each status code (``"0"``: the connection failed).
    """
    parts = urlsplit(url)
    # Connections between requests, with when each was last used; a request that finds none opens one. One
    # idle for KEEP_ALIVE_S is closed instead: the server may be closing it (uvicorn's keep-alive is 5 s),
    # and a request sent on it then fails without having been read.
    idle: list[tuple[Http1, float]] = []
    lat: list[float] = []
    failed: dict[str, int] = {}

    def connection() -> Http1:
        while idle:
            conn, used = idle.pop()
            if time.monotonic() - used < KEEP_ALIVE_S:
                return conn
            conn.close()
        return Http1(parts.hostname or "127.0.0.1", parts.port or 80)

    async def one() -> None:
        conn = connection()
        t0 = time.perf_counter()
        try:
            status = await conn.send(request())
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            status = 0
        if status == 200:
            lat.append((time.perf_counter() - t0) * 1000)
        else:
            failed[str(status)] = failed.get(str(status), 0) + 1
        idle.append((conn, time.monotonic()))

    tasks = []
    start = time.perf_counter()
    n = int(seconds * rate)
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    for conn, _ in idle:
        conn.close()
    return lat, failed


async def _open_loop(url: str, topic: str, acks: str, seconds: float, rate: float, body_format: str) -> dict[str, Any]:
    prepared = _produce_requests(url, [topic], acks, body_format)[0]
    lat, failed = await _schedule(url, seconds, rate, lambda: prepared)
    return {
        "requests": len(lat),
        "failed": sum(failed.values()),
        "rate_records_per_s": round(rate * RECORDS, 2),
        **summary_ms(lat, percentiles=(50, 99, 99.9)),
    }


async def _stamped_loop(url: str, topic: str, per_request: int, seconds: float, rate: float) -> dict[str, Any]:
    """acks=all requests of ``per_request`` ``VALUE_BYTES``-byte records, each record's timestamp the send time."""
    head = f"POST /v1/topics/{topic}/records?acks=all HTTP/1.1\r\nhost: {urlsplit(url).netloc}\r\n"
    value = "x" * VALUE_BYTES

    def request() -> bytes:
        record = f'{{"value":"{value}","timestamp":{time.time_ns() // 1_000_000}}}'
        body = ('{"records":[' + ",".join([record] * per_request) + "]}").encode()
        return f"{head}content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body

    lat, failed = await _schedule(url, seconds, rate, request)
    return {
        "requests": len(lat),
        "failed": sum(failed.values()),
        "failed_by_status": failed,  # "0": the connection failed
        "records": len(lat) * per_request,
        # send → acknowledgement (acks=all: committed, so a consumer's next plan sees it)
        **summary_ms(lat, digits=1),
    }


_LOOPS: dict[str, Callable[..., Any]] = {
    "closed": _closed_loop,
    "open": _open_loop,
    "stamped": _stamped_loop,
    "touch": _touch,
}


def closed_loop(
    url: str,
    topic: str | list[str],
    acks: str,
    concurrency: int,
    *,
    seconds: float = 0,
    requests: int = 0,
    body_format: str = "json",
    headers: Mapping[str, str] | None = None,
    partitions: Mapping[str, list[int]] | None = None,
) -> dict[str, Any]:
    """Closed loop in a child process (see the module docstring); ``seconds`` or ``requests`` bounds it.

    ``topic``: one topic, or a list to send each request to one of at random.
    ``partitions``: for the topics named, the partitions to send to (each
    request's records all to one of them, at random, with ``?forward=false``);
    else the node's partitioner chooses.
    """
    topics = [topic] if isinstance(topic, str) else topic
    return _run(
        "closed",
        url=url,
        topics=topics,
        acks=acks,
        concurrency=concurrency,
        seconds=seconds,
        requests=requests,
        body_format=body_format,
        headers=dict(headers or {}),
        partitions=dict(partitions or {}),
    )


def touch(url: str, topics: list[str], concurrency: int) -> dict[str, Any]:
    """One small acks=all request to each of ``topics`` (opens them on the server), in a child process."""
    return _run("touch", url=url, topics=topics, concurrency=concurrency)


def open_loop(
    url: str, topic: str, acks: str, seconds: float, requests_per_s: float, *, body_format: str = "json"
) -> dict[str, Any]:
    """Open loop in a child process at ``requests_per_s`` (times ``RECORDS`` records/s) for ``seconds``."""
    return _run("open", url=url, topic=topic, acks=acks, seconds=seconds, rate=requests_per_s, body_format=body_format)


def stamped_loop(url: str, topic: str, per_request: int, records_per_s: float, seconds: float) -> dict[str, Any]:
    """Open loop in a child process: acks=all requests of ``per_request`` records whose timestamps are the send time.

    ``records_per_s`` records a second for ``seconds``, on a fixed schedule (for
    end-to-end latency: CreateTime → consumer). Returns the requests answered 200,
    the others, the records answered, and the answers' latency (``harness.summary_ms``).
    """
    rate = records_per_s / per_request
    return _run("stamped", url=url, topic=topic, per_request=per_request, seconds=seconds, rate=rate)


def _run(mode: str, **params: object) -> dict[str, Any]:
    """Run loop ``mode`` with ``params`` in a child process (this file run as a script); what it returns."""
    out = subprocess.run([sys.executable, __file__, mode, json.dumps(params)], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"load generator failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)  # type: ignore[no-any-return]


if __name__ == "__main__":
    mode, params = sys.argv[1:]
    print(json.dumps(asyncio.run(_LOOPS[mode](**json.loads(params)))))
