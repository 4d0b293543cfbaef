"""``logstore produce`` (stdin lines to a topic) and ``logstore consume`` (a topic's records to stdout).

Both work on the root or through ``--server``; ``consume --group G --server URL`` (no ``--partition``) joins G
as a member and shares the topic with the group's other members.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator

from logstore.client import Consumer, Producer
from logstore.config import LogstoreConfig
from logstore.errors import InvalidConfigError, LogstoreError
from logstore.log.partitioner import Partitioner
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import GroupTopicPartition, ProducerBatch
from logstore_cli._common import Subparsers, backend, client_options, require_store

__all__ = ["register"]

_PRODUCE_BATCH = 10_000


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add ``produce`` and ``consume``; ``common`` holds the options every command takes."""
    p = sub.add_parser("produce", help="produce lines from stdin", parents=[common])
    p.add_argument("topic")
    p.add_argument("--key-separator", help="split each line into key and value at the first separator")
    p.add_argument("--partition", type=int)
    p.add_argument(
        "--acks", choices=["0", "1", "all"], default="all", help="with --server; embedded writes are acks=all"
    )
    p.set_defaults(func=_produce)

    p = sub.add_parser("consume", help="print records to stdout", parents=[common])
    p.add_argument("topic")
    p.add_argument("--group")
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--max-records", type=int)
    p.add_argument("--partition", type=int)
    p.add_argument("--print-key", action="store_true")
    p.add_argument("--key-separator", default=":")
    p.add_argument("--timeout-ms", type=int, default=0, help="wait this long for new records before exiting")
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

        with Producer(args.server, acks=args.acks, **client_options(args)) as producer:
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


def _consume(args: argparse.Namespace, config: LogstoreConfig) -> None:
    if args.group and getattr(args, "server", None) and args.partition is None:
        _consume_as_member(args)
        return
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
    remaining = args.max_records if args.max_records is not None else -1
    deadline = time.monotonic() + args.timeout_ms / 1000
    out = sys.stdout.buffer
    while remaining != 0:
        progressed = False
        for part in sorted(positions):
            if remaining == 0:
                break
            recs = store.fetch(
                args.topic, part, positions[part], max_records=remaining if remaining > 0 else 10_000
            ).records
            if not len(recs):
                continue
            progressed = True
            for key, value in zip(recs["key"].to_pylist(), recs["value"].to_pylist(), strict=True):
                if args.print_key:
                    out.write((key or b"null") + args.key_separator.encode())
                out.write((value if value is not None else b"null") + b"\n")
            positions[part] = recs["offset"][-1].as_py() + 1
            remaining = max(-1, remaining - len(recs)) if remaining > 0 else remaining
        out.flush()
        if args.group:
            store.commit_offsets(args.group, args.topic, positions)
        if not progressed:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        else:
            deadline = time.monotonic() + args.timeout_ms / 1000


def _consume_as_member(args: argparse.Namespace) -> None:
    """``consume --group G --server URL``: a member of G (a :class:`Consumer`), sharing the topic with the others.

    Commits after printing (no record is lost or printed twice across a rebalance); leaves the group on exit.
    """
    client = client_options(args)
    cert, key = client["client_cert"] or (None, None)
    consumer = Consumer(
        {
            "bootstrap.servers": args.server,
            "group.id": args.group,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
            "enable.auto.commit": False,
            "api.key": client["api_key"],
            "ssl.ca.location": client["ca_file"],
            "ssl.certificate.location": cert,
            "ssl.key.location": key,
        }
    )
    out = sys.stdout.buffer
    remaining = args.max_records if args.max_records is not None else -1
    idle_s = args.timeout_ms / 1000
    try:
        consumer.subscribe([args.topic])
        while remaining != 0:
            msgs = consumer.consume(remaining if 0 < remaining < 500 else 500, timeout=max(idle_s, 0.5))
            if not msgs:
                break  # nothing for timeout-ms (at least half a second: the first assignment may still arrive)
            for m in msgs:
                if args.print_key:
                    out.write((m.key() or b"null") + args.key_separator.encode())
                value = m.value()
                out.write((value if value is not None else b"null") + b"\n")
            out.flush()
            consumer.commit(asynchronous=False)
            remaining = max(0, remaining - len(msgs)) if remaining > 0 else remaining
    finally:
        consumer.close()
