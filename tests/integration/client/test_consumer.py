"""The Python ``Consumer`` (confluent-kafka's shape) against a real server: poll, commit, rebalances."""

from __future__ import annotations

import base64
import random
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from logstore.client import TIMESTAMP_CREATE_TIME, Consumer, Producer
from logstore.errors import UnknownMemberIdError
from logstore.structs import TopicPartition
from tests.support.server import Server

StartServer = Callable[..., Server]


def consumer(url: str, group: str, **conf: object) -> Consumer:
    base = {
        "bootstrap.servers": url,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "heartbeat.interval.ms": 100,
        "session.timeout.ms": 5000,
    }
    return Consumer(base | {k.replace("_", "."): v for k, v in conf.items()})


def test_poll_commit_close(server: StartServer) -> None:
    srv = server()
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
    with Producer(srv.url) as p:
        for i in range(10):
            p.produce("t", f"v{i}", key=f"k{i}", headers={"h": "x"}, partition=i % 2, timestamp_ms=1000 + i)
    assigned: list[TopicPartition] = []
    cons = consumer(srv.url, "g", enable_auto_commit=False)
    cons.subscribe(["t"], on_assign=lambda _c, parts: assigned.extend(parts))
    got = []
    while len(got) < 10:
        m = cons.poll(5)
        assert m is not None
        got.append(m)
    assert sorted(assigned) == [TopicPartition("t", 0), TopicPartition("t", 1)]
    m = next(x for x in got if x.value() == b"v3")
    assert (m.topic(), m.partition(), m.key(), m.headers(), m.timestamp()) == (
        "t",
        1,
        b"k3",
        [("h", b"x")],
        (TIMESTAMP_CREATE_TIME, 1003),
    )
    cons.commit(asynchronous=False)
    cons.close()
    committed = {p["partition"]: p["committed_offset"] for p in c.get("/v1/groups/g").json()["topics"][0]["partitions"]}
    assert committed == {0: 5, 1: 5}
    assert c.get("/v1/groups/g").json()["members"] == []


@pytest.mark.parametrize("commit_after_processing", [True, False], ids=["exactly-once", "auto-commit"])
def test_every_record_processed_through_ten_random_rebalances(
    server: StartServer, commit_after_processing: bool
) -> None:
    srv = server()
    c = srv.client()
    partitions, total = 6, 0
    assert c.post("/v1/topics", json={"name": "t", "partitions": partitions}).status_code == 201
    rng = random.Random(10)
    processed: Counter[tuple[int, int]] = Counter()
    active: list[Consumer] = []

    def start() -> None:
        cons = consumer(
            srv.url,
            "g",
            enable_auto_commit=not commit_after_processing,
            auto_commit_interval_ms=50,
            partition_assignment_strategy="cooperative-sticky",
        )
        cons.subscribe(["t"])
        active.append(cons)

    def poll_all(rounds: int) -> None:
        for _ in range(rounds):
            for cons in active:
                for m in cons.consume(100, timeout=0.02):
                    processed[(m.partition(), m.offset())] += 1
                if commit_after_processing:
                    cons.commit(asynchronous=False)

    start()
    rebalances = 0
    while rebalances < 10:
        records = [{"value": f"r{total + i}"} for i in range(60)]
        r = c.post("/v1/topics/t/records", json={"records": records})
        assert r.status_code == 200, r.text
        total += len(records)
        poll_all(3)
        if len(active) < 2 or (len(active) < 4 and rng.random() < 0.5):
            start()
        else:
            active.pop(rng.randrange(len(active))).close()
        rebalances += 1
    deadline = time.monotonic() + 30
    while len(processed) < total and time.monotonic() < deadline:
        poll_all(1)
    for cons in active:
        cons.close()
    missing = sorted({(p, o) for p in range(partitions) for o in range(200)} - set(processed))[:20]
    assert len(processed) == total, f"{total - len(processed)} records never processed: {missing}"
    duplicates = sum(n - 1 for n in processed.values())
    if commit_after_processing:
        assert duplicates == 0


def test_an_expired_consumer_gives_up_its_partitions_and_joins_again(server: StartServer) -> None:
    srv = server()
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    revoked: list[list[TopicPartition]] = []
    # heartbeats far apart from a short session: the coordinator expires it between polls
    cons = consumer(srv.url, "g", session_timeout_ms=200, heartbeat_interval_ms=60_000)
    cons.subscribe(["t"], on_revoke=lambda _c, parts: revoked.append(parts))
    assert cons.poll(0.1) is None and cons.assignment() == [TopicPartition("t", 0)]
    first = cons.member_id
    deadline = time.monotonic() + 10
    while c.get("/v1/groups/g").json().get("members") and time.monotonic() < deadline:
        time.sleep(0.05)  # the server's session sweep, not a client timing
    assert c.post("/v1/topics/t/records", json={"records": [{"value": "x"}]}).status_code == 200
    m = cons.poll(5)
    assert m is not None and m.value() == b"x"
    assert cons.member_id != first and revoked == [[TopicPartition("t", 0)]]
    cons.close()


def test_a_polling_consumer_learns_of_a_rebalance_before_its_next_heartbeat(server: StartServer) -> None:
    srv = server()
    assert srv.client().post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
    # a's heartbeats are a minute apart: only its fetches (the generation they answer with) can tell it in time
    a = consumer(srv.url, "g", heartbeat_interval_ms=60_000, session_timeout_ms=120_000)
    a.subscribe(["t"])
    assert a.poll(0.1) is None and len(a.assignment()) == 2
    b = consumer(srv.url, "g")
    b.subscribe(["t"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (b.assignment() and len(a.assignment()) == 1):
        a.poll(0.1)
        b.poll(0.1)
    assert len(a.assignment()) == 1 and len(b.assignment()) == 1
    assert set(a.assignment()) != set(b.assignment())
    a.close()
    b.close()


def test_a_consumer_that_stops_polling_leaves_and_its_next_poll_says_so(server: StartServer) -> None:
    srv = server()
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
    revoked: list[list[TopicPartition]] = []
    slow = consumer(srv.url, "g", max_poll_interval_ms=500)
    slow.subscribe(["t"], on_revoke=lambda _c, parts: revoked.append(parts))
    fast = consumer(srv.url, "g")
    fast.subscribe(["t"])
    deadline = time.monotonic() + 10
    while (len(slow.assignment()), len(fast.assignment())) != (1, 1) and time.monotonic() < deadline:
        slow.poll(0.05)
        fast.poll(0.05)
    mine = slow.assignment()
    assert len(mine) == 1, (mine, fast.assignment())
    first = slow.member_id
    revoked.clear()  # what fast's joining took
    # slow's application stops polling: its heartbeat thread leaves the group, so fast gets both partitions
    while len(fast.assignment()) < 2 and time.monotonic() < deadline:
        fast.poll(0.05)
    assert len(fast.assignment()) == 2
    with pytest.raises(UnknownMemberIdError, match=r"max\.poll\.interval\.ms=500"):
        slow.poll(0)
    assert revoked == [mine] and slow.assignment() == []
    slow.poll(0)  # joins again
    assert slow.member_id not in (None, first)
    for cons in (slow, fast):
        cons.close()


def test_a_consumer_draining_its_buffer_slowly_is_not_taken_for_a_stopped_one(server: StartServer) -> None:
    srv = server()
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    records = [{"value": f"v{i}"} for i in range(8)]
    assert c.post("/v1/topics/t/records", json={"records": records}).status_code == 200
    cons = consumer(srv.url, "g", max_poll_interval_ms=600, max_poll_records=8)
    cons.subscribe(["t"])
    first = cons.poll(5)  # one fetch buffers all 8
    assert first is not None
    member, got = cons.member_id, [first.value()]
    for _ in range(7):
        time.sleep(0.2)  # the application's processing, well within max.poll.interval.ms between polls
        m = cons.poll(5)
        assert m is not None
        got.append(m.value())
    # 1.4 s after the one fetch that brought them: the server would have removed a member that fetched no more
    assert got == [f"v{i}".encode() for i in range(8)] and cons.member_id == member
    cons.close()


def test_raw_bytes_and_repeated_header_keys_reach_the_consumer_as_produced(server: StartServer) -> None:
    srv = server()
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    raw = bytes(range(256))
    headers = [{"key": "h", "value": "1"}, {"key": "h", "value": None}]
    records = [{"value": {"b64": base64.b64encode(raw).decode()}, "headers": headers}, {"value": None, "key": "k"}]
    assert c.post("/v1/topics/t/records", json={"records": records}).status_code == 200
    cons = consumer(srv.url, "g")
    cons.subscribe(["t"])
    got = cons.consume(2, timeout=5)
    assert [(m.value(), m.key(), m.headers()) for m in got] == [
        (raw, None, [("h", b"1"), ("h", None)]),
        (None, b"k", []),
    ]
    cons.close()


def test_a_commit_another_thread_makes_while_the_consumer_closes_lands_before_it_leaves(server: StartServer) -> None:
    """close() lets the committer finish before the member leaves (Kafka's close: commit, then leave the group).

    A worker thread commits in a loop while the application closes the consumer: every commit it got
    queued lands; none is refused as a departed member's (ILLEGAL_GENERATION), and the last one is the
    group's committed offset.
    """
    srv = server()
    c = srv.client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    with Producer(srv.url) as p:
        for i in range(100):
            p.produce("t", f"v{i}", partition=0)
    cons = consumer(srv.url, "g", enable_auto_commit=False)
    cons.subscribe(["t"])
    assert cons.poll(5) is not None  # the partition is assigned and applied
    refused: list[Exception] = []
    landed: list[int] = []
    started = threading.Event()

    def worker() -> None:
        for offset in range(1, 101):
            try:
                cons.commit(offsets={TopicPartition("t", 0): offset}, asynchronous=False)
            except RuntimeError:
                return  # the committer is shut down: the consumer is closed, nothing was sent
            except Exception as e:
                refused.append(e)
                return
            landed.append(offset)
            started.set()

    t = threading.Thread(target=worker)
    t.start()
    assert started.wait(10)
    cons.close()
    t.join(30)
    assert refused == []
    group = c.get("/v1/groups/g").json()
    assert group["members"] == []
    assert group["topics"][0]["partitions"][0]["committed_offset"] == landed[-1]
