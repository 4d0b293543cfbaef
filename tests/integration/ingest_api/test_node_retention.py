"""A served node applies retention by itself every ``log.retention.check.interval.ms``, while producing goes on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from logstore.client import Message, Producer, RemoteStore
from logstore.errors import LogstoreError, OffsetOutOfRangeError
from tests.support.server import Server

HOUR_MS = 3600 * 1000


def test_the_node_drops_old_files_by_itself_while_producing_goes_on(server: Callable[..., Server]) -> None:
    srv = server(**{"log.retention.check.interval.ms": 50})
    remote = RemoteStore(srv.url)
    remote.create_topic("t", 1, {"retention.ms": HOUR_MS})
    old_ms = int(time.time() * 1000) - 2 * HOUR_MS
    with srv.client() as c:
        for commit in range(3):  # three commits, three data files, every record two hours old
            records = [{"value": f"old-{commit}-{i}", "timestamp": old_ms} for i in range(5)]
            assert c.post("/v1/topics/t/records", json={"records": records}).status_code == 200
    acked: dict[int, str] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def produce_young() -> None:
        with Producer(srv.url, linger_ms=2) as p:
            i = 0
            while not stop.is_set():
                value = f"young-{i}"

                def done(e: LogstoreError | None, m: Message, value: str = value) -> None:
                    assert e is None, e
                    with lock:
                        acked[m.offset()] = value

                p.produce("t", value, on_delivery=done)
                p.flush(10)
                i += 1

    producer = threading.Thread(target=produce_young)
    producer.start()
    try:
        deadline = time.monotonic() + 30
        while remote.describe_topic("t").partitions[0].log_start_offset < 15:
            assert time.monotonic() < deadline, srv.log
            time.sleep(0.05)
        while len(acked) < 20:  # producing goes on after the files went
            assert time.monotonic() < deadline, srv.log
            time.sleep(0.05)
    finally:
        stop.set()
        producer.join()

    part = remote.describe_topic("t").partitions[0]
    assert part.log_start_offset == 15  # exactly the three old files: no young record went
    assert part.high_watermark == 15 + len(acked)
    fetched = remote.fetch("t", 0, 15, max_records=100_000).records
    values = [v.decode() for v in fetched["value"].to_pylist()]
    assert dict(zip(fetched["offset"].to_pylist(), values, strict=True)) == acked  # each at its acknowledged offset
    with pytest.raises(OffsetOutOfRangeError):
        remote.fetch("t", 0, 0)
    with srv.client() as c:
        metrics = c.get("/metrics").text
    assert 'logstore_retention_files_removed_total{topic="t"} 3.0' in metrics
