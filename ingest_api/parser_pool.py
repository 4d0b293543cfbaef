"""JSON produce bodies parsed into Arrow by processes of their own (``num.parser.processes``).

The node's event loop runs every request and shares one interpreter lock with
the committers. Parsing a 1,000-record JSON body costs it about a millisecond
of that lock, as much as the rest of the request together; a parser process
does it on another core and hands the records back as one Arrow IPC stream
of :data:`logstore.wire.arrow_produce.PRODUCE_SCHEMA`, which the event loop reads
without a copy.

Each parser is a child process (:mod:`ingest_api.parser_process`) speaking a
framed protocol on its stdin and stdout, many requests in flight, answered in
order.

The processes start with the first large JSON body the node receives (a node
that never gets one never starts them), and take bodies once they are ready;
until then the event loop parses.

A refused body is parsed again on the event loop, which raises its error: one
parser, :func:`logstore.wire.json_produce.parse_produce`, says what is wrong with a
body, wherever it ran. A body smaller than :data:`MIN_BODY_BYTES` is parsed on
the event loop to begin with: the hand-off would cost it more than the parse.

A parser process that dies (killed, out of memory, a defect) costs no
request: the bodies it had not answered are parsed on the event loop, the
death is logged and counted (``logstore_parser_restarts_total``), and a new
process takes its place a second later. A parser exits when its stdin closes,
so the node's own death (even ``kill -9``) ends its parsers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Coroutine
from contextlib import suppress
from pathlib import Path

import orjson
import pyarrow as pa

from ingest_api import parser_process
from ingest_api.parser_process import ANSWER, COUNT, PARSED, READY, REQUEST, widen
from logstore.common.logs import describe
from logstore.node.metrics import Metrics
from logstore.wire.json_produce import ParsedRecords, parse_produce

__all__ = ["MIN_BODY_BYTES", "Parsers"]

log = logging.getLogger(__name__)

MIN_BODY_BYTES = 16 * 1024
"""Smaller JSON bodies are parsed on the event loop (a 100-record body of 100-byte values is ~13 KB)."""

_RESTART_DELAY_S = 1.0


class Parsers:
    """The node's parser processes; :meth:`parse` is called on the event loop.

    With ``processes=0`` every body is parsed on the event loop.
    """

    def __init__(self, processes: int, metrics: Metrics) -> None:
        self._slots: list[_Parser | None] = [None] * processes
        self._restarts = metrics.parser_restarts
        self._by_parser = metrics.parsed_bodies.labels("parser")
        self._on_event_loop = metrics.parsed_bodies.labels("event_loop")
        self._started = False
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def parse(self, body: bytes) -> ParsedRecords:
        """The records of a JSON produce body (docs/design.md §3), parsed by the least busy ready parser process.

        Raises:
            InvalidRequestError, InvalidTimestampError: as :func:`~logstore.wire.json_produce.parse_produce`.
        """
        if len(body) >= MIN_BODY_BYTES and self._slots:
            if not self._started:
                self._started = True
                for slot in range(len(self._slots)):
                    self._later(self._spawn(slot))
            parsers = [p for p in self._slots if p is not None and p.ready and p.alive]
            if parsers:
                parsed = await min(parsers, key=lambda p: len(p.pending)).parse(body)
                if parsed is not None:
                    self._by_parser.inc()
                    return parsed
        self._on_event_loop.inc()
        return parse_produce(body)

    def ready(self) -> list[int]:
        """The process ids of the parsers taking bodies now."""
        return [p.process.pid for p in self._slots if p is not None and p.alive and p.ready]

    async def close(self) -> None:
        """End every parser: close its stdin, give it 5 s to exit, then kill it."""
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        for parser in self._slots:
            if parser is not None:
                await parser.stop()

    def _later(self, work: Coroutine[None, None, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _spawn(self, slot: int, delay_s: float = 0) -> None:
        await asyncio.sleep(delay_s)
        if self._closing:
            return
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            parser_process.__name__,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=_child_environment(),
            limit=2**20,
        )
        assert process.stdin is not None
        transport = process.stdin.transport
        widen((transport.get_extra_info("socket") or transport.get_extra_info("pipe")).fileno())
        parser = _Parser(process)
        self._slots[slot] = parser
        parser.reader = asyncio.create_task(self._watch(slot, parser))

    async def _watch(self, slot: int, parser: _Parser) -> None:
        """Read the parser's answers until it ends; then put a new process in its slot."""
        await parser.read_answers()
        if self._closing:
            return
        code = await parser.process.wait()
        self._restarts.inc()
        log.error(
            "parser process %d ended (exit code %s); %d bodies it had not answered are parsed on the event loop, "
            "a new process starts in %.0f s",
            parser.process.pid,
            code,
            parser.unanswered,
            _RESTART_DELAY_S,
        )
        self._later(self._spawn(slot, _RESTART_DELAY_S))


class _Parser:
    """One parser process and the bodies it has not answered yet (answers come in the order sent)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.pending: dict[int, asyncio.Future[ParsedRecords | None]] = {}
        self.alive = True
        self.ready = False
        self.unanswered = 0
        self.reader: asyncio.Task[None] | None = None
        self._next_id = 0

    def parse(self, body: bytes) -> asyncio.Future[ParsedRecords | None]:
        """The records of ``body``, or None when the parser refused it or ended before answering."""
        assert self.process.stdin is not None
        future: asyncio.Future[ParsedRecords | None] = asyncio.get_running_loop().create_future()
        self._next_id += 1
        self.pending[self._next_id] = future
        self.process.stdin.writelines((REQUEST.pack(self._next_id, len(body)), body))
        return future

    async def read_answers(self) -> None:
        """Resolve each body's future as its answer arrives, until the process's stdout ends."""
        assert self.process.stdout is not None
        stdout = self.process.stdout
        try:
            while True:
                request_id, status, length = ANSWER.unpack(await stdout.readexactly(ANSWER.size))
                payload = await stdout.readexactly(length)
                if status == READY:
                    self.ready = True
                    continue
                future = self.pending.pop(request_id, None)
                if future is None:
                    log.error(
                        "parser process %d answered request %d, not asked: ending it", self.process.pid, request_id
                    )
                    self.process.kill()
                    return
                if not future.done():  # a request whose client went away was cancelled
                    future.set_result(self._decode(payload) if status == PARSED else None)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the process ended
        finally:
            self.alive = False
            self.unanswered = len(self.pending)
            for future in self.pending.values():
                if not future.done():
                    future.set_result(None)
            self.pending.clear()

    def _decode(self, payload: bytes) -> ParsedRecords | None:
        try:
            return _decode(payload)
        except (pa.ArrowException, ValueError) as e:  # this body only: the frames around it are whole
            log.error(
                "parser process %d answered with records that do not read (%s): parsing on the event loop",
                self.process.pid,
                describe(e),
            )
            return None

    async def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 5)
        except TimeoutError:
            with suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        if self.reader is not None:
            await self.reader


def _decode(payload: bytes) -> ParsedRecords:
    """A parser's answer → the records, viewing the Arrow buffers in ``payload`` (no copy)."""
    (n,) = COUNT.unpack_from(payload)
    producer_id, sequence = orjson.loads(memoryview(payload)[COUNT.size : COUNT.size + n])
    table = pa.ipc.open_stream(memoryview(payload)[COUNT.size + n :]).read_all()
    return ParsedRecords.from_table(table, producer_id, sequence)


def _child_environment() -> dict[str, str]:
    """The node's environment, with this package's source tree first on the path (a checkout need not be installed)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env
