"""The Python ``Producer`` as confluent-kafka's: a config dict, ``poll()`` serving delivery callbacks, ``flush()``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from logstore.client import OFFSET_INVALID, Message, Producer, RemoteStore
from logstore.errors import InvalidConfigError, LogstoreError, MessageTooLargeError
from tests.support.server import Server

StartServer = Callable[..., Server]


def test_a_confluent_config_dict_with_host_port_servers(server: StartServer) -> None:
    srv = server()
    RemoteStore(srv.url).create_topic("t", 2)
    host_port = srv.url.removeprefix("http://")
    delivered: list[tuple[LogstoreError | None, Message]] = []
    p = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:1,{host_port}",  # Kafka's host:port list; the first is down
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 100,
            "on_delivery": lambda e, m: delivered.append((e, m)),
        }
    )
    p.produce("t", b"v", key=b"k", partition=1, timestamp=1_700_000_000_000, headers=[("h", b"1"), ("h", b"2")])
    assert p.flush(30) == 0
    ((err, msg),) = delivered
    assert err is None and msg.error() is None
    assert (msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()) == ("t", 1, 0, b"k", b"v")
    assert msg.headers() == [("h", b"1"), ("h", b"2")] and msg.timestamp()[1] == 1_700_000_000_000
    p.close()
    stored = RemoteStore(srv.url).fetch("t", 1, 0).records
    assert stored["headers"].to_pylist() == [[{"key": "h", "value": b"1"}, {"key": "h", "value": b"2"}]]


def test_unknown_keys_are_refused_by_name_with_the_known_ones() -> None:
    with pytest.raises(InvalidConfigError, match=r"'compression\.codec'.*known keys: .*linger\.ms") as info:
        Producer({"bootstrap.servers": "127.0.0.1:8080", "compression.codec": "lz4"})
    assert info.value.name == "INVALID_CONFIG"
    with pytest.raises(InvalidConfigError, match=r"bootstrap\.servers"):
        Producer({"acks": "all"})
    with pytest.raises(InvalidConfigError, match="acks"):
        Producer({"bootstrap.servers": "127.0.0.1:8080", "acks": "most"})
    with pytest.raises(InvalidConfigError, match=r"linger\.ms"):
        Producer("http://127.0.0.1:8080", linger_ms="soon")


def test_callbacks_run_in_poll_on_the_callers_thread(server: StartServer) -> None:
    srv = server()
    RemoteStore(srv.url).create_topic("t", 1, {"message.max.bytes": 100})
    ran_on: list[str] = []
    results: list[tuple[LogstoreError | None, Message]] = []

    def report(err: LogstoreError | None, msg: Message) -> None:
        ran_on.append(threading.current_thread().name)
        results.append((err, msg))

    remote = RemoteStore(srv.url)
    with Producer(srv.url, linger_ms=1) as p:  # today's keyword form still works
        p.produce("t", "ok", callback=report)
        deadline = time.monotonic() + 30
        while remote.describe_topic("t").partitions[0].high_watermark < 1:  # delivered by the sender thread
            assert time.monotonic() < deadline
        assert results == []  # ... but its callback waits for poll()
        assert p.poll(30) == 1
        p.produce("t", "x" * 500, on_delivery=report)
        assert p.poll(30) == 1
        assert p.poll(0) == 0 and len(p) == 0
    assert ran_on == [threading.current_thread().name] * 2
    (ok_err, ok), (big_err, big) = results
    assert ok_err is None and ok.offset() == 0
    assert isinstance(big_err, MessageTooLargeError) and big.error() is big_err and big.offset() == OFFSET_INVALID


def test_flush_returns_how_many_are_still_queued(server: StartServer) -> None:
    srv = server()
    RemoteStore(srv.url).create_topic("t", 1)
    srv.kill()  # nothing can be delivered: the records stay queued until delivery.timeout.ms
    p = Producer({"bootstrap.servers": srv.url, "delivery.timeout.ms": 60_000, "linger.ms": 0})
    for i in range(3):
        p.produce("t", f"v{i}")
    assert p.flush(0.2) == 3
    srv.restart()
    assert p.flush(60) == 0
    p.close()


def test_a_callback_that_raises_leaves_the_other_reports_queued(server: StartServer) -> None:
    srv = server()
    RemoteStore(srv.url).create_topic("t", 1)
    seen: list[bytes | None] = []

    def report(err: LogstoreError | None, msg: Message) -> None:
        seen.append(msg.value())
        if msg.value() == b"first":
            raise RuntimeError("the application's bug")

    p = Producer({"bootstrap.servers": srv.url, "linger.ms": 50, "on_delivery": report})
    p.produce("t", "first")
    p.produce("t", "second")
    with pytest.raises(RuntimeError, match="application's bug"):
        p.flush(30)  # the exception comes out in the caller's thread ...
    assert seen == [b"first"]
    assert p.flush(30) == 0  # ... and the next call runs the report it left queued
    assert seen == [b"first", b"second"]
    p.close()


def test_a_header_of_the_wrong_type_is_refused_by_produce_and_the_producer_goes_on(server: StartServer) -> None:
    srv = server()
    RemoteStore(srv.url).create_topic("t", 1)
    with Producer(srv.url, linger_ms=0) as p:
        with pytest.raises(TypeError, match="header 'n'"):
            p.produce("t", "v", headers={"n": 5})  # type: ignore[dict-item]
        with pytest.raises(TypeError, match="value"):
            p.produce("t", 5)  # type: ignore[arg-type]
        p.produce("t", "after")
        assert p.flush(30) == 0  # the sender was not taken down by the bad record
    assert RemoteStore(srv.url).fetch("t", 0, 0).records["value"].to_pylist() == [b"after"]
