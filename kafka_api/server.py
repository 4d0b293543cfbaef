"""The Kafka protocol listener: sockets, frames, and answers in request order.

One asyncio server on the node's event loop (the HTTP API's), over the same
:class:`~logstore.node.broker.Broker`. Each connection reads frames
(``int32`` size, then the request) and answers them in the order they came,
as Kafka does, while serving them concurrently: a long-polling Fetch does not
hold up a Produce sent after it on the same connection, whose answer still
goes out after the Fetch's. Produce batches are submitted to the engine in
arrival order (idempotent sequences depend on it).

Bad input: a frame over ``socket.request.max.bytes`` closes the connection
(with a log line: its body is not read), and so does a frame whose bytes stop
coming for ``request.timeout.ms``; an API or version not served is
answered ``UNSUPPORTED_VERSION``; a request that does not parse is answered
``CORRUPT_MESSAGE`` where the frame's header can be read, else the connection
is closed. Nothing is written for any of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from kafka_api.admin import AdminHandlers
from kafka_api.groups import GroupHandlers
from kafka_api.handlers import Handlers, Listener
from kafka_api.membership import CLIENT, MembershipHandlers
from kafka_api.protocol import FrameHeader, error_frame, read_header, read_request, response_frame, supported
from logstore.config import LogstoreConfig
from logstore.errors import CorruptMessageError, InvalidConfigError, UnsupportedVersionError
from logstore.groups.classic import ClassicCoordinator
from logstore.node.broker import Broker

__all__ = ["DEFAULT_LISTENERS", "KafkaServer", "bind_listener", "kafka_door", "parse_listener"]

log = logging.getLogger("logstore.kafka")

DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"
_PRODUCE = 0
_NO_ANSWER = object()
"""What a Produce with acks=0 answers: nothing at all, as Kafka."""


def parse_listener(value: str, key: str) -> tuple[str, int]:
    """``PLAINTEXT://host:port`` → (host, port).

    Raises:
        InvalidConfigError: another protocol, more than one listener, or a malformed address.
    """
    value = value.strip()
    if "," in value:
        raise InvalidConfigError(f"{key}={value!r}: one listener per node is served (a comma-separated list is not)")
    protocol, sep, address = value.partition("://")
    if not sep or protocol.upper() != "PLAINTEXT":
        raise InvalidConfigError(f"{key}={value!r}: only PLAINTEXT://host:port is served (SASL and SSL: later)")
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise InvalidConfigError(f"{key}={value!r}: give host:port after PLAINTEXT://")
    return host.strip("[]") or "0.0.0.0", int(port)


def bind_listener(config: LogstoreConfig, *, insecure: bool = False) -> socket.socket | None:
    """Bind ``listeners`` before the node starts; None when it is off.

    When ``listeners`` is its default and the port is taken (several nodes on
    one host), log a warning and return None: the node serves HTTP without it.

    Raises:
        InvalidConfigError: a malformed listener; a configured one that cannot be bound; a configured one
            in cluster mode or with ``security.enabled`` (this slice serves neither); a non-loopback one
            without ``insecure``.
    """
    if not config.listeners.strip():
        return None
    default = config.listeners.strip() == DEFAULT_LISTENERS
    for unserved, why in ((config.zookeeper_connect, "zookeeper.connect"), (config.security_enabled, "security")):
        if not unserved:
            continue
        if default:
            log.warning("the Kafka listener is off: it does not serve nodes with %s set yet", why)
            return None
        raise InvalidConfigError(
            f"listeners={config.listeners}: the Kafka listener does not serve nodes with {why} set yet "
            "(no SASL, ACLs or cluster metadata on it); set listeners to '' (empty)"
        )
    host, port = parse_listener(config.listeners, "listeners")
    if not insecure and not _loopback(host):
        raise InvalidConfigError(
            f"refusing to serve the Kafka protocol on {host} with security.enabled=false: anyone who can reach it "
            "could create, delete, produce to and read every topic. Listen on 127.0.0.1, or pass --insecure."
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if default and e.errno == errno.EADDRINUSE:
            log.warning(
                "port %d is taken: serving HTTP without the Kafka listener (set listeners to use another)", port
            )
            return None
        raise InvalidConfigError(f"listeners={config.listeners}: cannot listen on {host}:{port}: {e.strerror}") from e
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def advertised(config: LogstoreConfig, sock: socket.socket) -> Listener:
    """Where clients are told to connect: ``advertised.listeners``, else the bound address."""
    if config.advertised_listeners.strip():
        return Listener(*parse_listener(config.advertised_listeners, "advertised.listeners"))
    host, port = sock.getsockname()[:2]
    return Listener("127.0.0.1" if host in ("0.0.0.0", "::") else host, port)


class KafkaServer:
    """The listener on one bound socket, serving :class:`Handlers`."""

    def __init__(self, broker: Broker, config: LogstoreConfig, sock: socket.socket) -> None:
        self.config = config
        self.sock = sock
        self.handlers = Handlers(broker, config, advertised(config, sock))
        h = self.handlers
        admin = AdminHandlers(broker, config)
        self.classic = ClassicCoordinator(config)
        groups = GroupHandlers(broker, self.classic)
        members = MembershipHandlers(self.classic)
        self._apis: dict[int, Callable[[int, Any], Awaitable[Any]]] = {
            1: h.fetch,
            2: h.list_offsets,
            3: h.metadata,
            8: groups.offset_commit,
            9: groups.offset_fetch,
            10: h.find_coordinator,
            11: members.join_group,
            12: members.heartbeat,
            13: members.leave_group,
            14: members.sync_group,
            15: groups.describe_groups,
            16: groups.list_groups,
            18: h.api_versions,
            19: admin.create_topics,
            20: admin.delete_topics,
            22: h.init_producer_id,
            32: admin.describe_configs,
        }
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.classic.start()
        self._server = await asyncio.start_server(self._connection, sock=self.sock)
        host, port = self.sock.getsockname()[:2]
        print(f"logstore serving the Kafka protocol on PLAINTEXT://{host}:{port}", flush=True)

    async def close(self) -> None:
        """Stop accepting, end open connections (their pending answers are dropped; produce already submitted
        is committed by the node's drain)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.classic.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        answers: asyncio.Queue[tuple[FrameHeader, Awaitable[Any]] | None] = asyncio.Queue()
        sender = asyncio.create_task(self._send(writer, answers))
        try:
            await self._read(reader, answers, peer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            answers.put_nowait(None)
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await sender
            writer.close()
            self._connections.discard(task)

    async def _read(
        self,
        reader: asyncio.StreamReader,
        answers: asyncio.Queue[tuple[FrameHeader, Awaitable[Any]] | None],
        peer: object,
    ) -> None:
        limit = self.config.socket_request_max_bytes
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            if size < 0 or size > limit:
                log.warning(
                    "closing the Kafka connection from %s: a frame of %d bytes exceeds socket.request.max.bytes=%d",
                    peer,
                    size,
                    limit,
                )
                return
            try:
                async with asyncio.timeout(self.config.request_timeout_ms / 1000):
                    frame = await reader.readexactly(size)
            except TimeoutError:
                log.warning(
                    "closing the Kafka connection from %s: a frame of %d bytes did not arrive within "
                    "request.timeout.ms=%d",
                    peer,
                    size,
                    self.config.request_timeout_ms,
                )
                return
            if size < 10:
                log.warning(
                    "closing the Kafka connection from %s: a frame of %d bytes has no request header", peer, size
                )
                return
            header = read_header(frame)
            CLIENT.set((header.client_id or "", f"/{peer[0]}" if isinstance(peer, tuple) else ""))  # Kafka's form
            answers.put_nowait((header, await self._dispatch(header, frame)))

    async def _dispatch(self, header: FrameHeader, frame: bytes) -> Awaitable[Any]:
        if not supported(header.api_key, header.api_version):
            return _now(error_frame(header, UnsupportedVersionError.code))
        try:
            request = read_request(header, frame)
        except Exception as e:
            log.warning("a Kafka request (api %d v%d) does not parse: %r", header.api_key, header.api_version, e)
            return _now(error_frame(header, CorruptMessageError.code))
        if header.api_key == _PRODUCE:
            answer = await self.handlers.produce(header.api_version, request)
            if request.acks == 0:
                return _now(_NO_ANSWER)
            return asyncio.ensure_future(answer())
        return asyncio.ensure_future(self._apis[header.api_key](header.api_version, request))

    async def _send(
        self, writer: asyncio.StreamWriter, answers: asyncio.Queue[tuple[FrameHeader, Awaitable[Any]] | None]
    ) -> None:
        while True:
            item = await answers.get()
            if item is None:
                return
            header, pending = item
            try:
                response = await pending
            except Exception:
                log.exception("a Kafka request (api %d v%d) failed", header.api_key, header.api_version)
                writer.close()
                return
            if response is _NO_ANSWER:
                continue
            writer.write(response if isinstance(response, bytes) else response_frame(header, response))
            await writer.drain()


async def _now_value(value: Any) -> Any:
    return value


def _now(value: Any) -> Awaitable[Any]:
    return _now_value(value)


@contextlib.asynccontextmanager
async def kafka_door(broker: Broker, config: LogstoreConfig, sock: socket.socket) -> AsyncIterator[None]:
    """Serve the Kafka protocol on ``sock`` over ``broker`` for as long as the context is open."""
    server = KafkaServer(broker, config, sock)
    await server.start()
    try:
        yield
    finally:
        await server.close()
