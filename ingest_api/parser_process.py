"""A parser process: JSON produce bodies in on stdin, their records out as Arrow IPC on stdout.

The node starts these (:mod:`ingest_api.parser_pool`) as ``python -m
ingest_api.parser_process``. This module imports only what parsing needs —
not the node's web stack or metrics — because every parser process pays for
its imports in memory. The framed protocol, many requests in flight,
answered in order::

    request:  u64 id, u32 length, the body
    answer:   u64 id, u8 status, u32 length, payload
              status 1: u32 n, n bytes of JSON [producer_id, sequence], then the Arrow IPC stream
              status 0: the body was refused (no payload)
              status 2, id 0: the process is ready (sent once, first)
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import stat
import struct
import sys
from contextlib import suppress
from typing import BinaryIO

import orjson
import pyarrow as pa

from logstore.errors import LogstoreError
from logstore.wire.arrow_produce import PRODUCE_SCHEMA
from logstore.wire.json_produce import ParsedRecords, parse_produce, without_pandas

REQUEST = struct.Struct("<QI")
ANSWER = struct.Struct("<QBI")
COUNT = struct.Struct("<I")
REFUSED, PARSED, READY = 0, 1, 2
CHANNEL_BYTES = 4 * 1024 * 1024
"""How much a channel between the node and a parser should hold: a whole large body or answer."""


def encode(parsed: ParsedRecords) -> list[bytes]:
    """The payload of a ``parsed`` answer (status 1 above) for ``parsed``, as the buffers to write."""
    table = pa.Table.from_arrays(
        [parsed.partitions.cast(pa.int32()), parsed.timestamps, parsed.keys, parsed.values, parsed.headers],
        schema=PRODUCE_SCHEMA,
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, PRODUCE_SCHEMA) as writer:
        writer.write_table(table)
    ids = orjson.dumps([parsed.producer_id, parsed.sequence])
    return [COUNT.pack(len(ids)), ids, sink.getvalue().to_pybytes()]


def widen(fd: int) -> None:
    """Let a whole body or answer sit in the channel ``fd`` writes to, so it crosses in one turn of the event loop.

    The channel is a socket pair (uvloop) or a pipe (asyncio); by default they
    hold ~200 KB and 64 KB. Best effort: the system's limits
    (``net.core.wmem_max``, ``fs.pipe-max-size``) may keep them smaller.
    """
    with suppress(OSError):
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHANNEL_BYTES)
        elif stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, min(CHANNEL_BYTES, 1024 * 1024))


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """A parser process's loop: answer each framed body in order until ``stdin`` ends.

    A body :func:`parse_produce` refuses (a :class:`~logstore.errors.LogstoreError`) is answered
    ``refused``; any other exception ends the process (the node parses its bodies and logs the death).
    """
    widen(stdout.fileno())
    stdout.write(ANSWER.pack(0, READY, 0))
    stdout.flush()
    while True:
        head = stdin.read(REQUEST.size)
        if len(head) < REQUEST.size:
            return
        request_id, length = REQUEST.unpack(head)
        body = stdin.read(length)
        if len(body) < length:
            return
        try:
            parts = encode(parse_produce(body))
        except LogstoreError:
            stdout.write(ANSWER.pack(request_id, REFUSED, 0))
        else:
            stdout.write(ANSWER.pack(request_id, PARSED, sum(len(p) for p in parts)))
            for part in parts:
                stdout.write(part)
        stdout.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the node ends us
    without_pandas()
    serve(sys.stdin.buffer, sys.stdout.buffer)
