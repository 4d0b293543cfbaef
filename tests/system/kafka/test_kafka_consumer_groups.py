"""Kafka's classic consumer group protocol with librdkafka (confluent-kafka) consumers against `logstore serve`.

Members join with ``subscribe()``, librdkafka's own assignor divides the
partitions (client-side assignment), and the group rebalances when a member
joins, leaves or goes silent. Throughout, each partition has at most one
owner, every record is read exactly once across the rebalances (each owner
commits what it read before it gives a partition up, and the next owner
starts there), and the commits land in ``_offsets``, readable over HTTP.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.server import Server, free_port

ck = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

PARTITIONS = 6


def _kafka_server(server: Callable[..., Server]) -> tuple[Server, str]:
    port = free_port()
    s = server(listeners=f"PLAINTEXT://127.0.0.1:{port}", **{"group.initial.rebalance.delay.ms": 0})
    return s, f"127.0.0.1:{port}"


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    client = admin.AdminClient({"bootstrap.servers": bootstrap})
    for future in client.create_topics([admin.NewTopic(topic, partitions)]).values():
        future.result(timeout=30)


def _produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(start, start + n):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def _http_committed(s: Server, group: str, topic: str) -> dict[int, int]:
    with s.client() as http:
        described = http.get(f"/v1/groups/{group}")
    assert described.status_code == 200, described.text
    return {
        p["partition"]: p["committed_offset"]
        for t in described.json()["topics"]
        if t["topic"] == topic
        for p in t["partitions"]
    }


class Member:
    """One consumer of the group, polled by the test's thread; it commits what it read, and on revocation."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, owners: dict[int, str], **extra: Any):
        self.name = name
        self.owners = owners
        self.read: list[tuple[int, int]] = []
        self.assigned: set[int] = set()
        self.errors: list[str] = []
        self.closed = False
        self.consumer = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 200,
                **extra,
            }
        )
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        for tp in partitions:
            holder = self.owners.get(tp.partition)
            if holder is not None:
                self.errors.append(f"{self.name} got partition {tp.partition} while {holder} owns it")
            self.owners[tp.partition] = self.name
            self.assigned.add(tp.partition)

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        for tp in partitions:
            if self.owners.get(tp.partition) == self.name:
                del self.owners[tp.partition]
            self.assigned.discard(tp.partition)

    def poll(self) -> None:
        msgs = self.consumer.consume(100, timeout=0.05)
        offsets = {}
        for msg in msgs:
            if msg.error() is not None:
                self.errors.append(str(msg.error()))
                continue
            if msg.partition() not in self.assigned:
                self.errors.append(f"{self.name} read partition {msg.partition()} it does not own")
            self.read.append((msg.partition(), msg.offset()))
            offsets[msg.partition()] = msg.offset() + 1
        if offsets:
            topic = msgs[0].topic()
            self.consumer.commit(
                offsets=[ck.TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
            )

    def close(self) -> None:
        """Leave the group (LeaveGroup); all it read is committed already. Once: later calls do nothing."""
        if not self.closed:
            self.closed = True
            self.consumer.close()


def _poll_until(members: list[Member], done: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        if done():
            return
    raise AssertionError(
        f"timed out waiting for {what}: " + "; ".join(f"{m.name} {sorted(m.assigned)}" for m in members)
    )


def _all_read(members: list[Member], n: int) -> Callable[[], bool]:
    return lambda: sum(len(m.read) for m in members) >= n


def _spread(members: list[Member]) -> Callable[[], bool]:
    """Every partition owned, and every live member owns some (the rebalance has settled)."""
    return lambda: (
        sorted(p for m in members for p in m.assigned) == list(range(PARTITIONS)) and all(m.assigned for m in members)
    )


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_a_group_of_three_rebalances_on_join_and_leave_and_reads_every_record_once(
    server: Callable[..., Server], assignor: str
) -> None:
    """Eager (range: every member gives everything up at each rebalance) and incremental (cooperative-sticky:
    only what moves is revoked, in a second rebalance) assignment, both the clients' own."""
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, "orders", PARTITIONS)
    _produce(bootstrap, "orders", 0, 300)
    owners: dict[int, str] = {}
    strategy = {"partition.assignment.strategy": assignor}
    a = Member("a", bootstrap, "billing", "orders", owners, **strategy)
    b = Member("b", bootstrap, "billing", "orders", owners, **strategy)
    members = [a, b]
    try:
        _poll_until([a, b], _spread([a, b]), "a and b to share the partitions")
        _poll_until([a, b], _all_read([a, b], 300), "the first 300 records")

        c = Member("c", bootstrap, "billing", "orders", owners, **strategy)  # joins: a rebalance over three
        members.append(c)
        _produce(bootstrap, "orders", 300, 300)
        _poll_until([a, b, c], lambda: _spread([a, b, c])() and _all_read([a, b, c], 600)(), "a, b and c to share")
        assert all(len(m.assigned) == 2 for m in (a, b, c))

        a.close()  # leaves: b and c take its partitions
        _produce(bootstrap, "orders", 600, 300)
        _poll_until([b, c], lambda: _spread([b, c])() and _all_read([a, b, c], 900)(), "b and c to take a's partitions")

        read = sorted(r for m in (a, b, c) for r in m.read)
        assert read == sorted({(i % PARTITIONS, i // PARTITIONS) for i in range(900)})  # each record once: none lost
        assert [e for m in (a, b, c) for e in m.errors] == []
        assert _http_committed(s, "billing", "orders") == {p: 150 for p in range(PARTITIONS)}
    finally:
        for m in members:
            m.close()


def test_commit_then_seek_and_a_new_member_resumes_at_the_commit(server: Callable[..., Server]) -> None:
    s, bootstrap = _kafka_server(server)
    _create(bootstrap, "ledger", 1)
    producer = ck.Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce("ledger", value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "audit",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["ledger"])
    values = []
    deadline = time.monotonic() + 60
    while len(values) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
            if len(values) == 10:
                consumer.commit(message=msg, asynchronous=False)  # committed: offset 10
    assert values == [f"v{i}".encode() for i in range(10)]
    assert consumer.committed([ck.TopicPartition("ledger", 0)], timeout=30)[0].offset == 10
    consumer.seek(ck.TopicPartition("ledger", 0, 3))  # read again from 3; the commit stays at 10
    msg = None
    while msg is None or msg.error() is not None:
        msg = consumer.poll(1)
    assert (msg.offset(), msg.value()) == (3, b"v3")
    consumer.close()
    assert _http_committed(s, "audit", "ledger") == {0: 10}  # the same commit through the HTTP door

    again = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "audit", "auto.offset.reset": "earliest"})
    again.subscribe(["ledger"])
    msg = None
    deadline = time.monotonic() + 60
    while (msg is None or msg.error() is not None) and time.monotonic() < deadline:
        msg = again.poll(0.5)
    assert msg is not None and (msg.offset(), msg.value()) == (10, b"v10")
    again.close()
