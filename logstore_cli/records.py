"""``logstore produce`` (stdin lines to a topic) and ``logstore consume`` (a topic's records to stdout).

Both work on the root or through ``--server``; ``consume --group G --server URL`` (no ``--partition``) joins G
as a member and shares the topic with the group's other members.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from logstore.client import Consumer, Producer
from logstore.config import LogstoreConfig
from logstore.errors import InvalidConfigError, LogstoreError, UnknownTopicOrPartitionError
from logstore.log.partitioner import Partitioner
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import GroupTopicPartition, ProducerBatch
from logstore_cli._common import (
    Parents,
    Subparsers,
    backend,
    client_options,
    parse_kv,
    reachable,
    require_store,
)

__all__ = ["register"]

_PRODUCE_BATCH = 10_000


def register(sub: Subparsers, parents: Parents) -> None:
    """Add ``produce`` and ``consume``: on the root, or through ``--server``."""
    common = [parents.server]
    p = sub.add_parser("produce", help="produce lines from stdin to a topic", parents=common)
    p.add_argument("topic", help="the topic to produce to")
    p.add_argument("--key-separator", metavar="SEP", help="split each line into key and value at the first separator")
    p.add_argument(
        "--partition", type=int, metavar="P", help="produce every record to this partition (default: by key)"
    )
    p.add_argument(
        "--acks", choices=["0", "1", "all"], default="all", help="with --server; embedded writes are acks=all"
    )
    p.set_defaults(func=_produce)

    p = sub.add_parser(
        "consume",
        help="print a topic's records to stdout; follows new ones until Ctrl-C",
        parents=common,
        description="Print a topic's records to stdout, one per line, as kafka-console-consumer: it follows the "
        "topic until Ctrl-C (exit 0), --max-messages or --timeout-ms. Print options: --property print.key=true, "
        "print.partition, print.offset, print.timestamp, print.value (default true), key.separator (default: a "
        "tab), line.separator (default: a newline); --print-key and --key-separator are the same as the first and "
        "key.separator. Fields come in Kafka's order: CreateTime:MS, Partition:P, Offset:O, key, value.",
    )
    p.add_argument("topic", help="the topic to read")
    p.add_argument(
        "--group", help="read as this consumer group: resume from its committed offsets, commit what was printed"
    )
    p.add_argument(
        "--from-beginning", action="store_true", help="start at the log start when there is no committed offset"
    )
    p.add_argument(
        "--max-messages",
        "--max-records",
        dest="max_messages",
        type=int,
        metavar="N",
        help="exit after printing N records (default: follow until interrupted)",
    )
    p.add_argument("--partition", type=int, metavar="P", help="read only this partition (without group membership)")
    p.add_argument(
        "--timeout-ms",
        type=int,
        metavar="MS",
        help="exit when no record arrived for this long (default: wait forever)",
    )
    p.add_argument(
        "--property",
        action="append",
        metavar="KEY=VALUE",
        help="a print option: print.key, print.partition, print.offset, print.timestamp, print.value, "
        "key.separator, line.separator (repeatable)",
    )
    p.add_argument("--print-key", action="store_true", help="print each record's key (print.key=true)")
    p.add_argument("--key-separator", metavar="SEP", help="between the printed fields (key.separator; default: a tab)")
    p.set_defaults(func=_consume)


def _produce(args: argparse.Namespace, config: LogstoreConfig) -> None:
    sep = args.key_separator.encode() if args.key_separator else None

    def lines() -> Iterator[tuple[bytes | None, bytes]]:
        for raw in sys.stdin.buffer:
            line = raw.rstrip(b"\r\n")
            if sep is None:
                yield None, line
                continue
            key, found, value = line.partition(sep)
            if not found:
                raise InvalidConfigError(f"line has no key separator {args.key_separator!r}: {line[:80]!r}")
            yield key, value

    if getattr(args, "server", None):
        failures: list[LogstoreError] = []

        def delivered(error: LogstoreError | None, _meta: object) -> None:
            if error is not None:
                failures.append(error)

        with Producer(reachable(args), acks=args.acks, **client_options(args)) as producer:
            for key, value in lines():
                producer.produce(args.topic, value, key=key, partition=args.partition, on_delivery=delivered)
        if failures:
            raise failures[0]
        return

    require_store(config)
    store = LogStore(config)
    count, _ = store.catalog.topic_config(args.topic)
    partitioner = Partitioner()
    keys: list[bytes | None] = []
    values: list[bytes | None] = []

    def flush() -> None:
        if not values:
            return
        parts = partitioner.assign(args.topic, keys, [args.partition] * len(values), count)
        (result,) = store.append(args.topic, [ProducerBatch(input_table(parts, values, keys))])
        if isinstance(result, LogstoreError):
            raise result
        keys.clear()
        values.clear()

    for key, value in lines():
        keys.append(key)
        values.append(value)
        if len(values) >= _PRODUCE_BATCH:
            flush()
    flush()


class _Formatter:
    """How ``consume`` prints a record: Kafka's ``DefaultMessageFormatter`` (kafka-console-consumer's ``--property``).

    ``CreateTime:MS``, ``Partition:P``, ``Offset:O``, the key and the value, each when asked for, joined by
    ``key.separator``, then ``line.separator``; a null key or value prints as ``null``.
    """

    _FLAGS = ("print.timestamp", "print.partition", "print.offset", "print.key", "print.value")

    def __init__(self, args: argparse.Namespace) -> None:
        props = {"print.value": "true", "key.separator": "\t", "line.separator": "\n"}
        if args.print_key:
            props["print.key"] = "true"
        if args.key_separator is not None:
            props["key.separator"] = args.key_separator
        for key, value in parse_kv(args.property, option="--property").items():
            if key not in (*self._FLAGS, "key.separator", "line.separator"):
                raise InvalidConfigError(
                    f"unknown --property '{key}': consume prints with print.key, print.partition, print.offset, "
                    f"print.timestamp, print.value, key.separator and line.separator"
                )
            props[key] = value
        shown = {}
        for flag in self._FLAGS:
            text = props.get(flag, "false").lower()
            if text not in ("true", "false"):
                raise InvalidConfigError(f"--property {flag} takes true or false, got '{props[flag]}'")
            shown[flag] = text == "true"
        self.shown = shown
        self.sep = _unescape(props["key.separator"]).encode()
        self.end = _unescape(props["line.separator"]).encode()

    def line(self, partition: int, offset: int, timestamp_ms: int, key: bytes | None, value: bytes | None) -> bytes:
        fields = []
        if self.shown["print.timestamp"]:
            fields.append(b"CreateTime:%d" % timestamp_ms)
        if self.shown["print.partition"]:
            fields.append(b"Partition:%d" % partition)
        if self.shown["print.offset"]:
            fields.append(b"Offset:%d" % offset)
        if self.shown["print.key"]:
            fields.append(b"null" if key is None else key)
        if self.shown["print.value"]:
            fields.append(b"null" if value is None else value)
        return self.sep.join(fields) + self.end


def _unescape(text: str) -> str:
    """``\\t``, ``\\n`` and the like as the characters they name (a shell passes them as two characters)."""
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape")


class _Printer:
    """Writes records to stdout with a :class:`_Formatter` and counts them against ``--max-messages``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.fmt = _Formatter(args)
        self.limit: int | None = args.max_messages
        self.count = 0
        self.out = sys.stdout.buffer

    @property
    def done(self) -> bool:
        return self.limit is not None and self.count >= self.limit

    def wanted(self, most: int) -> int:
        """How many more records to ask for, at most ``most``."""
        return most if self.limit is None else min(most, self.limit - self.count)

    def write(self, partition: int, offset: int, timestamp_ms: int, key: bytes | None, value: bytes | None) -> None:
        self.out.write(self.fmt.line(partition, offset, timestamp_ms, key, value))
        self.count += 1


def _consume(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """Print records until ``--max-messages``, ``--timeout-ms`` without a record, or Ctrl-C (each exits 0).

    With ``--group`` the offsets of what was printed are committed after printing (none is lost; after a crash
    some may print twice), on Ctrl-C too. "Processed a total of N messages" goes to stderr at the end, as Kafka's
    tool says it (not after an error: the error is the last line).
    """
    printer = _Printer(args)
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise InvalidConfigError(f"--timeout-ms takes a number of milliseconds >= 0, got {args.timeout_ms}")
    try:
        with _ctrl_c() as pressed:
            if args.group and getattr(args, "server", None) and args.partition is None:
                _consume_as_member(args, printer, pressed)
            else:
                _consume_partitions(args, config, printer, pressed)
    finally:
        with contextlib.suppress(BrokenPipeError):
            printer.out.flush()
    print(f"Processed a total of {printer.count} messages", file=sys.stderr)  # on an error, the error alone


def _idle_deadline(args: argparse.Namespace) -> float | None:
    """When ``consume`` gives up waiting for a record (``--timeout-ms`` from now), or None: never."""
    return None if args.timeout_ms is None else time.monotonic() + args.timeout_ms / 1000


@contextlib.contextmanager
def _ctrl_c() -> Iterator[threading.Event]:
    """Ctrl-C (SIGINT) as a flag the consume loops look at between batches, not an exception wherever it lands:
    a batch is printed, counted and committed whole, so the total counts exactly the records printed (an
    interrupt raised inside a write, after the line reached the terminal, used to leave it uncounted)."""
    pressed = threading.Event()
    if threading.current_thread() is not threading.main_thread():  # signals go to the main thread only
        yield pressed
        return
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: pressed.set())
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


def _consume_partitions(
    args: argparse.Namespace, config: LogstoreConfig, printer: _Printer, pressed: threading.Event
) -> None:
    """Read partitions by fetching from positions (the root, or a server without group membership)."""
    store = backend(args, config)
    info = store.describe_topic(args.topic)
    committed = store.committed(args.group, args.topic) if args.group else {}
    positions: dict[int, int] = {}
    for p in info.partitions:
        if args.partition is not None and p.partition != args.partition:
            continue
        c = committed.get(GroupTopicPartition(args.group, args.topic, p.partition))
        if c is not None:
            positions[p.partition] = max(c.offset, p.log_start_offset)
        else:
            positions[p.partition] = p.log_start_offset if args.from_beginning else p.high_watermark
    if not positions:
        raise UnknownTopicOrPartitionError(f"partition {args.partition} of topic '{args.topic}' does not exist")
    deadline = _idle_deadline(args)
    try:
        while not printer.done and not pressed.is_set():
            progressed = False
            for part in sorted(positions):
                if printer.done or pressed.is_set():
                    break
                recs = store.fetch(args.topic, part, positions[part], max_records=printer.wanted(10_000)).records
                if not len(recs):
                    continue
                progressed = True
                ts = pc.divide(recs["timestamp"].cast(pa.int64()), 1000).to_pylist()  # µs → ms
                for offset, t, key, value in zip(
                    recs["offset"].to_pylist(), ts, recs["key"].to_pylist(), recs["value"].to_pylist(), strict=True
                ):
                    printer.write(part, offset, t, key, value)
                positions[part] = recs["offset"][-1].as_py() + 1
            printer.out.flush()
            if progressed:
                deadline = _idle_deadline(args)
                if args.group:
                    store.commit_offsets(args.group, args.topic, positions)
            elif deadline is not None and time.monotonic() >= deadline:
                break
            else:
                pressed.wait(_IDLE_POLL_S)
    except KeyboardInterrupt:
        if args.group:  # what was printed (a batch cut short by Ctrl-C prints again next time)
            store.commit_offsets(args.group, args.topic, positions)


_IDLE_POLL_S = 0.2
"""How often ``consume`` asks again for new records once it has read everything (as a consumer's fetch wait)."""


def _consume_as_member(args: argparse.Namespace, printer: _Printer, pressed: threading.Event) -> None:
    """``consume --group G --server URL``: a member of G (a :class:`Consumer`), sharing the topic with the others.

    Commits after printing (no record is lost or printed twice across a rebalance); leaves the group on exit.
    """
    client = client_options(args)
    cert, key = client["client_cert"] or (None, None)
    consumer = Consumer(
        {
            "bootstrap.servers": reachable(args),
            "group.id": args.group,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
            "enable.auto.commit": False,
            "api.key": client["api_key"],
            "ssl.ca.location": client["ca_file"],
            "ssl.certificate.location": cert,
            "ssl.key.location": key,
        }
    )
    deadline = _idle_deadline(args)
    uncommitted = False
    try:
        consumer.subscribe([args.topic])
        while not printer.done and not pressed.is_set():
            wait_s = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
            msgs = consumer.consume(printer.wanted(500), timeout=wait_s)
            if not msgs:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                continue
            for m in msgs:
                printer.write(m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value())
            printer.out.flush()
            uncommitted = True
            consumer.commit(asynchronous=False)
            uncommitted = False
            deadline = _idle_deadline(args)
    except KeyboardInterrupt:
        if uncommitted:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
