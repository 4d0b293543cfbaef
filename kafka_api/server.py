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
import dataclasses
import datetime
import errno
import functools
import ipaddress
import logging
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from kafka_api.access import Session, session, use_session
from kafka_api.admin import AdminHandlers
from kafka_api.coordination import at_coordinator
from kafka_api.groups import GroupHandlers
from kafka_api.guarded import guarded_group_apis
from kafka_api.handlers import Handlers, Listener
from kafka_api.membership import CLIENT, MembershipHandlers
from kafka_api.protocol import FrameHeader, error_frame, read_header, read_request, response_frame, supported
from kafka_api.sasl import SaslGate, refuse_sasl
from kafka_api.transactions import TransactionHandlers
from logstore.config import LogstoreConfig
from logstore.errors import CorruptMessageError, InvalidConfigError, UnsupportedVersionError
from logstore.groups.classic import ClassicCoordinator
from logstore.node.broker import Broker
from logstore.security import Guard, QuotaKind
from logstore.transactions import TransactionCoordinator

__all__ = ["DEFAULT_LISTENERS", "KafkaServer", "bind_listener", "kafka_door", "parse_listener"]

log = logging.getLogger("logstore.kafka")

DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"
_PRODUCE, _FETCH, _API_VERSIONS = 0, 1, 18
_RAW = FrameHeader(17, 0, 0, None)
"""The header an answer to a bare SASL token is queued under (it has none of its own)."""
_NO_ANSWER = object()
"""What a Produce with acks=0 answers: nothing at all, as Kafka."""


PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")
"""Listener protocols served: Kafka's names. ``SASL_*`` authenticate with SASL/PLAIN (:mod:`kafka_api.sasl`)."""


def parse_listener(value: str, key: str) -> tuple[str, str, int]:
    """``PROTOCOL://host:port`` → (protocol, host, port).

    Raises:
        InvalidConfigError: another protocol, more than one listener, or a malformed address.
    """
    value = value.strip()
    if "," in value:
        raise InvalidConfigError(f"{key}={value!r}: one listener per node is served (a comma-separated list is not)")
    protocol, sep, address = value.partition("://")
    protocol = protocol.upper()
    if not sep or protocol not in PROTOCOLS:
        raise InvalidConfigError(f"{key}={value!r}: give PROTOCOL://host:port, PROTOCOL one of {', '.join(PROTOCOLS)}")
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise InvalidConfigError(f"{key}={value!r}: give host:port after {protocol}://")
    return protocol, host.strip("[]") or "0.0.0.0", int(port)


def bind_listener(config: LogstoreConfig, *, insecure: bool = False) -> socket.socket | None:
    """Bind ``listeners`` before the node starts; None when it is off.

    When ``listeners`` is its default and the port is taken (several nodes on
    one host), log a warning and return None: the node serves HTTP without it.

    Raises:
        InvalidConfigError: a malformed listener; a configured one that cannot be bound; a ``SASL_*`` one with
            ``security.enabled=false``, or ``SASL_SSL`` without ``server.ssl.certfile``; a non-loopback one with
            security off and without ``insecure``.
    """
    if not config.listeners.strip():
        return None
    default = config.listeners.strip() == DEFAULT_LISTENERS
    protocol, host, port = parse_listener(config.listeners, "listeners")
    if protocol != "PLAINTEXT" and not config.security_enabled:
        raise InvalidConfigError(
            f"listeners={config.listeners}: SASL needs security.enabled=true (its passwords are the API keys of "
            "'logstore keys create'); or listen with PLAINTEXT://"
        )
    if protocol == "SASL_SSL" and not config.server_ssl_certfile:
        raise InvalidConfigError(
            f"listeners={config.listeners}: SASL_SSL serves TLS with server.ssl.certfile and server.ssl.keyfile; "
            "set them, or listen with SASL_PLAINTEXT://"
        )
    if not insecure and not config.security_enabled and not _loopback(host):
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
        _, host, port = parse_listener(config.advertised_listeners, "advertised.listeners")
        return Listener(host, port)
    host, port = sock.getsockname()[:2]
    return Listener("127.0.0.1" if host in ("0.0.0.0", "::") else host, port)


def tls_context(config: LogstoreConfig) -> ssl.SSLContext:
    """The TLS side of a ``SASL_SSL`` listener: the node's ``server.ssl.*`` settings, as its HTTPS uses them."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(config.server_ssl_certfile, config.server_ssl_keyfile or None)
    if config.server_ssl_cafile:
        ctx.load_verify_locations(config.server_ssl_cafile)
    if config.server_ssl_client_auth != "none":
        ctx.verify_mode = ssl.CERT_REQUIRED if config.server_ssl_client_auth == "required" else ssl.CERT_OPTIONAL
    return ctx


class KafkaServer:
    """The listener on one bound socket, serving :class:`Handlers`.

    ``guard`` is the node's security (None when ``security.enabled`` is false):
    on a ``SASL_*`` listener each connection authenticates first
    (:class:`~kafka_api.sasl.SaslGate`); on ``PLAINTEXT`` it is ``User:ANONYMOUS``.
    """

    def __init__(
        self,
        broker: Broker,
        config: LogstoreConfig,
        sock: socket.socket,
        guard: Guard | None = None,
        transactions: TransactionCoordinator | None = None,
    ) -> None:
        self.config = config
        self.sock = sock
        self.guard = guard
        self.protocol = parse_listener(config.listeners, "listeners")[0] if config.listeners.strip() else "PLAINTEXT"
        self.handlers = Handlers(broker, config, advertised(config, sock))
        h = self.handlers
        admin = AdminHandlers(broker, config)
        self.classic = ClassicCoordinator(config)
        groups = GroupHandlers(broker, self.classic)
        members = MembershipHandlers(self.classic)
        txn = (
            None
            if transactions is None
            else TransactionHandlers(transactions, h.init_producer_id, clustered=broker.cluster is not None)
        )
        if txn is not None:
            h.transactional = txn.produce
        apis: dict[int, Callable[[int, Any], Awaitable[Any]]] = {
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
            17: functools.partial(refuse_sasl, api_key=17),
            18: h.api_versions,
            19: admin.create_topics,
            20: admin.delete_topics,
            22: h.init_producer_id,
            32: admin.describe_configs,
            36: functools.partial(refuse_sasl, api_key=36),
            37: admin.create_partitions,
            44: admin.incremental_alter_configs,
        }
        if txn is not None:
            apis |= {
                22: txn.init_producer_id,
                24: txn.add_partitions,
                25: txn.add_offsets,
                26: txn.end_txn,
                28: txn.txn_offset_commit,
                65: txn.describe_transactions,
                66: txn.list_transactions,
            }
        self._apis = guarded_group_apis(at_coordinator(apis, h.coordinates))
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        tls = tls_context(self.config) if self.protocol == "SASL_SSL" else None
        self.classic.start()
        self._server = await asyncio.start_server(self._connection, sock=self.sock, ssl=tls)
        host, port = self.sock.getsockname()[:2]
        print(f"logstore serving the Kafka protocol on {self.protocol}://{host}:{port}", flush=True)

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
        session = Session(self.guard)
        use_session(session)  # the request tasks this connection starts inherit it
        gate = SaslGate(session) if self.protocol != "PLAINTEXT" and self.guard is not None else None
        peer = writer.get_extra_info("peername")
        answers: asyncio.Queue[tuple[FrameHeader, Awaitable[Any]] | None] = asyncio.Queue()
        sender = asyncio.create_task(self._send(writer, answers))
        try:
            await self._read(reader, answers, peer, gate)
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
        gate: SaslGate | None,
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
            if gate is not None and gate.expects_raw_token:  # after SaslHandshake v0: a bare PLAIN message
                answer = await gate.raw_token(frame)
                if answer is None:
                    log.warning("closing the Kafka connection from %s: SASL/PLAIN authentication failed", peer)
                    return
                answers.put_nowait((_RAW, _now(answer)))
                continue
            if size < 10:
                log.warning(
                    "closing the Kafka connection from %s: a frame of %d bytes has no request header", peer, size
                )
                return
            header = read_header(frame)
            CLIENT.set((header.client_id or "", f"/{peer[0]}" if isinstance(peer, tuple) else ""))  # Kafka's form
            if gate is not None and not gate.session.authenticated and header.api_key != _API_VERSIONS:
                answer, close = await gate.request(header, frame)
                answers.put_nowait((header, _now(answer)))
                if close:
                    log.warning("closing the Kafka connection from %s: SASL authentication did not succeed", peer)
                    return
                continue
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
            return asyncio.ensure_future(self._throttled(header, answer(), "producer", len(frame)))
        pending = self._apis[header.api_key](header.api_version, request)
        if header.api_key == _FETCH:
            return asyncio.ensure_future(self._throttled(header, pending, "consumer", None))
        return asyncio.ensure_future(pending)

    async def _throttled(
        self, header: FrameHeader, pending: Awaitable[Any], kind: QuotaKind, nbytes: int | None
    ) -> Any:
        """The answer of a Produce (``nbytes``: its request) or Fetch (its records' bytes) held back as the quota of
        the principal (and client id) says, as the HTTP API does; its ``throttle_time_ms`` says how long."""
        response = await pending
        s = session()
        if s.guard is None:
            return response
        if nbytes is None:
            nbytes = sum(len(p.records or b"") for t in response.responses for p in t.partitions)
        delay_s = s.guard.throttle_s(s.principal, header.client_id, kind, nbytes)
        if delay_s <= 0:
            return response
        await asyncio.sleep(delay_s)
        return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=int(delay_s * 1000)))

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
async def kafka_door(
    broker: Broker,
    config: LogstoreConfig,
    sock: socket.socket,
    guard: Guard | None = None,
    transactions: TransactionCoordinator | None = None,
) -> AsyncIterator[None]:
    """Serve the Kafka protocol on ``sock`` over ``broker`` (with the node's ``guard`` and transaction
    coordinator) while the context is open."""
    server = KafkaServer(broker, config, sock, guard, transactions)
    await server.start()
    try:
        yield
    finally:
        await server.close()
