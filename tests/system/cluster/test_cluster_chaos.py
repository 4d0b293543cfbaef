"""A cluster under chaos, written by the Python ``Producer``: nothing acknowledged is lost, nothing is doubled.

Three real ``logstore serve`` nodes and one real ZooKeeper; two idempotent
Producers (acks=all and acks=1, bootstrap = every node) write keyed records,
each with a unique value, to a topic of six partitions — and one HTTP
producer id writes keyed records to every partition in each request (split
by the node that receives it), turning to the next node with the same
sequence on any failure — while, one after the
other and each after the cluster recovered from the one before: a leader is
killed (SIGKILL), a leader is paused (SIGSTOP) past its ZooKeeper session and
resumed (SIGCONT), the controller is killed, and a leader is stopped
(SIGTERM). Afterwards the topic's Delta table holds every acknowledged record
at its acknowledged offset, no record twice, no gap, no commit from a stale
leader epoch, and ``/controller_epoch`` rose once, for the one controller
change. Partitions are unavailable at most the session timeout + 2 s after a
kill and at most 1 s after a SIGTERM (docs/design.md §8, issue 10).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient

from logstore.client import Message, Producer
from logstore.client._routing import record_partition
from logstore.config import load_config
from logstore.errors import LogstoreError
from logstore.log.catalog import Catalog
from tests.support.helpers import assert_gap_free
from tests.support.server import Server
from tests.system.cluster.cluster_helpers import (
    PARTITIONS,
    SESSION_MS,
    create_topic,
    leader_epochs_in_log,
    leaders,
    led_by,
    until,
)

pytestmark = pytest.mark.zookeeper

TOPIC = "orders"
ROUND = 4
"""Records per partition each feeder produces before it flushes: bounds what is in flight."""
RETRY_MS = 200
"""The Producers' ``retry_backoff_max_ms``: short, so unavailability measures the cluster's recovery, not a client's
sleep between two tries of a node that has not recovered yet."""


def _keys_by_partition() -> dict[int, bytes]:
    """One key per partition, found by the partitioner itself, so each record's partition is fixed by its key."""
    out: dict[int, bytes] = {}
    i = 0
    while len(out) < PARTITIONS:
        key = f"key-{i}".encode()
        p = record_partition(key, None, PARTITIONS)
        assert p is not None
        out.setdefault(p, key)
        i += 1
    return out


@dataclass
class _Feeder:
    """One ``Producer`` fed keyed records with unique values by one thread; every delivery report kept."""

    acks: str
    bootstrap: str
    keys: dict[int, bytes]
    acked: dict[str, tuple[int, int]] = field(default_factory=dict)
    """value → (partition, offset) of its delivery report."""
    delivered_at: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    """partition → (produced, delivered) ``time.monotonic()`` of each successful delivery report."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(value, error) of each failed delivery."""
    misplaced: list[str] = field(default_factory=list)
    """Values reported in another partition than their key's."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, stop: threading.Event) -> None:
        producer = Producer(
            self.bootstrap, acks=self.acks, linger_ms=2, delivery_timeout_ms=60_000, retry_backoff_max_ms=RETRY_MS
        )
        try:
            seq = 0
            while not stop.is_set():
                for _ in range(ROUND):
                    for p, key in self.keys.items():
                        value = f"{self.acks}-{seq}"
                        seq += 1
                        producer.produce(TOPIC, value, key=key, on_delivery=self._report(value, p))
                producer.flush()
        finally:
            producer.close()

    def _report(self, value: str, partition: int) -> Callable[[LogstoreError | None, Message | None], None]:
        produced = time.monotonic()

        def on_delivery(error: LogstoreError | None, md: Message | None) -> None:
            now = time.monotonic()
            with self.lock:
                if error is not None:
                    self.failed.append((value, f"{error.name}: {error}"))
                    return
                assert md is not None
                got_partition, offset = md.partition(), md.offset()
                if got_partition != partition:
                    self.misplaced.append(value)
                self.acked[value] = (got_partition, offset)
                self.delivered_at.setdefault(got_partition, []).append((produced, now))

        return on_delivery

    def delivered_after(self, partition: int, since: float) -> float | None:
        with self.lock:
            return min((t for produced, t in self.delivered_at.get(partition, []) if produced > since), default=None)


@dataclass
class _SpanningFeeder:
    """One producer id whose every idempotent request holds records of every partition, sent to any node.

    A request fails whole when any of its leaders fails; it is sent again, same
    sequence, to the next node until one answers 200 (at most ``delivery_s``).
    """

    urls: list[str]
    keys: dict[int, bytes]
    acks: str = "all"
    pid: str = "spanning"
    delivery_s: float = 60.0
    acked: dict[str, tuple[int, int]] = field(default_factory=dict)
    failed: list[tuple[str, str]] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    retries: int = 0
    answered_at: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, stop: threading.Event) -> None:
        with httpx.Client(timeout=5) as client:
            seq = turn = 0
            while not stop.is_set():
                records = [
                    {"key": key.decode(), "value": f"span-{seq}-{p}-{i}"}
                    for p, key in self.keys.items()
                    for i in range(2)
                ]
                body = {"records": records, "producer_id": self.pid, "sequence": seq}
                deadline = time.monotonic() + self.delivery_s
                while True:
                    url = self.urls[turn % len(self.urls)]
                    try:
                        r = client.post(f"{url}/v1/topics/{TOPIC}/records", params={"acks": self.acks}, json=body)
                    except httpx.HTTPError as e:
                        r, why = None, repr(e)
                    if r is not None and r.status_code == 200:
                        self._answered(records, r.json()["offsets"])
                        break
                    why = r.text if r is not None else why
                    if (r is not None and r.status_code in (400, 409)) or time.monotonic() > deadline:
                        with self.lock:
                            self.failed += [(str(rec["value"]), why) for rec in records]
                        break
                    self.retries += 1
                    turn += 1  # the same sequence again, at the next node
                    time.sleep(0.02)
                seq += 1

    def _answered(self, records: list[dict[str, str]], offsets: list[dict[str, int]]) -> None:
        with self.lock:
            for record, at in zip(records, offsets, strict=True):
                value = record["value"]
                if at["partition"] != int(value.split("-")[2]):
                    self.misplaced.append(value)
                self.acked[value] = (at["partition"], at["offset"])
            self.answered_at.append(time.monotonic())

    def answered_after(self, since: float) -> bool:
        with self.lock:
            return any(t > since for t in self.answered_at)


def _unavailability(feeders: list[_Feeder], partitions: set[int], since: float) -> dict[int, float]:
    """Per partition, seconds from ``since`` until every feeder had a record produced after it acknowledged."""
    out = {}
    for p in partitions:
        firsts = [f.delivered_after(p, since) for f in feeders]
        out[p] = max(t if t is not None else float("inf") for t in firsts) - since
    return out


def _all_delivered_after(feeders: list[_Feeder], since: float) -> bool:
    return all(f.delivered_after(p, since) is not None for f in feeders for p in range(PARTITIONS))


def _controller(zk: KazooClient) -> int | None:
    if not zk.exists("/controller"):
        return None
    return int(json.loads(zk.get("/controller")[0])["node_id"])


def _controller_epoch(zk: KazooClient) -> int:
    return int(zk.get("/controller_epoch")[0] or b"0")


def _registered(zk: KazooClient, node_id: int) -> bool:
    return zk.exists(f"/brokers/ids/{node_id}") is not None


def _led(zk: KazooClient, node_id: int) -> set[int]:
    return {p for p, (leader, _) in leaders(zk, TOPIC, PARTITIONS).items() if leader == node_id}


def _a_leader(zk: KazooClient, among: set[int]) -> int:
    """A node of ``among`` that leads at least one partition and is not the controller."""
    controller = _controller(zk)
    for node_id in sorted(among):
        if node_id != controller and _led(zk, node_id):
            return node_id
    raise AssertionError(f"no node of {among} leads a partition without being the controller")


def test_producers_lose_and_double_nothing_through_kills_a_pause_and_a_shutdown(
    cluster: Callable[..., Server], zk: KazooClient, tmp_path: Path
) -> None:
    nodes = {i: cluster(i) for i in (1, 2, 3)}
    create_topic(nodes[1], TOPIC, zk, {1, 2, 3})
    first_controller = until(lambda: _controller(zk))
    epoch_at_start = _controller_epoch(zk)
    bootstrap = ",".join(n.url for n in nodes.values())
    keys = _keys_by_partition()
    feeders = [_Feeder(acks, bootstrap, keys) for acks in ("all", "1")]
    spanning = _SpanningFeeder([n.url for n in nodes.values()], keys)
    stop = threading.Event()
    runners: list[_Feeder | _SpanningFeeder] = [*feeders, spanning]
    threads = [threading.Thread(target=f.run, args=(stop,), daemon=True) for f in runners]
    for t in threads:
        t.start()
    until(lambda: _all_delivered_after(feeders, 0.0) and spanning.answered_after(0.0), timeout_s=60)
    print()
    report: list[str] = []

    def say(line: str) -> None:
        print(line)
        report.append(line)

    def _moved_after(partitions: set[int], since_wall: float) -> float:
        """Seconds from ``since_wall`` until the controller wrote the partitions' new states.

        By ZooKeeper's clock (the znodes' mtime, this machine's), not by this test's polling.
        """
        return (
            max(zk.get(f"/brokers/topics/{TOPIC}/partitions/{p}/state")[1].mtime / 1000 for p in partitions)
            - since_wall
        )

    def kill(node_id: int, live: set[int], role: str) -> dict[int, float]:
        """SIGKILL ``node_id``; wait until ``live`` leads every partition and each one took records again."""
        moved = _led(zk, node_id)
        killed_at, killed_wall = time.monotonic(), time.time()
        nodes[node_id].kill()
        until(lambda: led_by(zk, TOPIC, live), timeout_s=30)
        until(lambda: _all_delivered_after(feeders, killed_at), timeout_s=30)
        moved_after = _moved_after(moved, killed_wall)
        gaps = _unavailability(feeders, moved, killed_at)
        say(
            f"kill -9 of {role} {node_id}: partitions {sorted(moved)} led elsewhere after {moved_after:.2f}s; first "
            "acknowledged record per partition: " + ", ".join(f"p{p}={s:.2f}s" for p, s in sorted(gaps.items()))
        )
        return gaps

    # 1. kill -9 a leader that is not the controller; restart it (it rejoins leading nothing: placement is sticky)
    victim = _a_leader(zk, {1, 2, 3})
    gaps = kill(victim, {1, 2, 3} - {victim}, "leader")
    assert max(gaps.values()) <= SESSION_MS / 1000 + 2, report[-1]
    nodes[victim].restart()
    until(lambda: _registered(zk, victim))
    assert _controller_epoch(zk) == epoch_at_start

    # 2. SIGSTOP a leader past its session: its partitions move; resumed, it commits nothing and rejoins
    zombie = _a_leader(zk, {1, 2, 3})
    paused = _led(zk, zombie)
    old_epochs = {p: e for p, (_, e) in leaders(zk, TOPIC, PARTITIONS).items() if p in paused}
    proc = nodes[zombie].proc
    assert proc is not None
    paused_at = time.monotonic()
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        until(lambda: led_by(zk, TOPIC, {1, 2, 3} - {zombie}), timeout_s=30)
        # the new leaders claimed the partitions in the Delta log: the zombie's epoch is stale there too
        until(
            lambda: all(
                max(leader_epochs_in_log(tmp_path / "data", TOPIC).get(p, [-1])) > old_epochs[p] for p in paused
            ),
            timeout_s=30,
        )
        # ZooKeeper may expire the session a little before the timeout (it counts from the last heartbeat):
        # the pause itself lasts past it, as the fault it stands for does
        time.sleep(max(0.0, SESSION_MS / 1000 + 0.5 - (time.monotonic() - paused_at)))
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    resumed_at = time.monotonic()
    paused_s = resumed_at - paused_at
    until(lambda: _registered(zk, zombie), timeout_s=30)
    until(lambda: _all_delivered_after(feeders, resumed_at), timeout_s=30)
    say(f"SIGSTOP of leader {zombie} (partitions {sorted(paused)}) for {paused_s:.2f}s, SIGCONT: rejoined")
    assert _controller_epoch(zk) == epoch_at_start

    # 3. kill -9 the controller: another is elected, once; its partitions move
    controller = _controller(zk)
    assert controller == first_controller
    gaps = kill(controller, {1, 2, 3} - {controller}, "controller")
    assert max(gaps.values(), default=0.0) <= SESSION_MS / 1000 + 2, report[-1]
    until(lambda: _controller(zk) not in (None, controller))
    assert _controller_epoch(zk) == epoch_at_start + 1
    nodes[controller].restart()
    until(lambda: _registered(zk, controller))

    # 4. SIGTERM a leader: a controlled shutdown hands its partitions over within 1 s
    leaving = _a_leader(zk, {1, 2, 3})
    handed = _led(zk, leaving)
    proc = nodes[leaving].proc
    assert proc is not None
    stopped_at, stopped_wall = time.monotonic(), time.time()
    proc.send_signal(signal.SIGTERM)
    until(lambda: led_by(zk, TOPIC, {1, 2, 3} - {leaving}), timeout_s=10)
    moved_after = _moved_after(handed, stopped_wall)
    until(lambda: _all_delivered_after(feeders, stopped_at), timeout_s=30)
    gaps = _unavailability(feeders, handed, stopped_at)
    say(
        f"SIGTERM of leader {leaving}: partitions {sorted(handed)} led elsewhere after {moved_after:.2f}s; "
        "first acknowledged record per partition: " + ", ".join(f"p{p}={s:.2f}s" for p, s in sorted(gaps.items()))
    )
    assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    assert moved_after <= 1.0, report[-1]
    assert max(gaps.values()) <= 2.0, report[-1]  # as in test_cluster_nodes: the hand-over plus a client's retry
    assert _controller_epoch(zk) == epoch_at_start + 1
    until(lambda: spanning.answered_after(stopped_at), timeout_s=30)
    say(f"spanning producer: {len(spanning.answered_at)} requests answered, {spanning.retries} retries")

    stop.set()
    for t in threads:
        t.join(timeout=90)
        assert not t.is_alive(), "a producer did not finish its last flush"
    _check_log(tmp_path / "data", runners, zk)


def _check_log(root: Path, feeders: list[_Feeder | _SpanningFeeder], zk: KazooClient) -> None:
    for f in feeders:
        assert not f.failed, f"acks={f.acks}: deliveries failed: {f.failed[:5]}"
        assert not f.misplaced, f"acks={f.acks}: records reported outside their key's partition: {f.misplaced[:5]}"
    acked = {value: at for f in feeders for value, at in f.acked.items()}
    print(f"acknowledged {sum(len(f.acked) for f in feeders)} records")
    catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": str(root)}))
    # acks=1 records are committed after their acknowledgement: wait until the log holds every one of them
    until(lambda: sum(len(v) for v in assert_gap_free(catalog, TOPIC).values()) >= len(acked), timeout_s=30)
    by_partition = assert_gap_free(catalog, TOPIC)  # gap 0
    values = [v.decode() for vs in by_partition.values() for v in vs]
    doubled = [v for v, n in Counter(values).items() if n > 1]
    assert not doubled, f"duplicates: {sorted(doubled)[:10]}"
    lost = []
    for value, (p, offset) in acked.items():
        log = by_partition.get(p, [])
        found = log[offset].decode() if offset < len(log) else None
        if found != value:
            lost.append(f"{value} acknowledged at {p}/{offset}, which holds {found}")
    assert not lost, f"{len(lost)} acknowledged records lost or moved: {lost[:10]}"
    current = leaders(zk, TOPIC, PARTITIONS)
    for p, epochs in leader_epochs_in_log(root, TOPIC).items():
        assert epochs == sorted(epochs), f"partition {p}: a commit from a stale epoch: {epochs}"
        assert epochs[-1] <= current[p][1], f"partition {p}: a commit past the epoch ZooKeeper holds: {epochs}"
