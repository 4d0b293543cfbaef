"""Preferred-leader election: a node that died and came back gets its share of the partitions again.

Three real nodes and a real ZooKeeper; a node is killed (SIGKILL), its partitions move to the others,
it is restarted and leads nothing (placement is sticky). Then a preferred-leader election — asked for with
``logstore cluster elect-leaders``, or made by the controller itself every
``leader.imbalance.check.interval.seconds`` — hands its partitions back to it from their live leaders.
Meanwhile producers write without pause: two Python ``Producer`` (acks=1 and acks=all, routing to the
leaders) and one plain HTTP writer per node (acks=1 and acks=all in turn, forwarded by that node). Nothing
acknowledged may be lost, moved or doubled, every partition's offsets stay gap-free, no commit comes from a
stale leader epoch (docs/cluster.md, "Preferred leaders").
"""

from __future__ import annotations

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
from logstore.cluster.placement import preferred_leaders
from logstore.config import load_config
from logstore.errors import LogstoreError
from logstore.log.catalog import Catalog
from tests.support.cli import cli
from tests.support.helpers import assert_gap_free
from tests.support.server import Server
from tests.system.cluster.cluster_helpers import (
    PARTITIONS,
    create_topic,
    leader_epochs_in_log,
    leaders,
    led_by,
    until,
)

pytestmark = pytest.mark.zookeeper

TOPIC = "orders"
PREFERRED = preferred_leaders([(TOPIC, p) for p in range(PARTITIONS)], [1, 2, 3])
"""partition key → its preferred leader with nodes 1, 2 and 3 live (two partitions each)."""


@dataclass
class _Writes:
    """What every writer was told: value → (partition, offset), and what failed."""

    acked: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    acked_at: dict[int, list[float]] = field(default_factory=dict)
    """partition → ``time.monotonic()`` of each acknowledgement."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ok(self, value: str, partition: int, offset: int | None) -> None:
        with self.lock:
            self.acked[value] = (partition, offset)
            self.acked_at.setdefault(partition, []).append(time.monotonic())

    def longest_pause(self, partition: int, since: float, until: float) -> float:
        """The longest time between two acknowledgements of ``partition`` from ``since`` to ``until`` (seconds)."""
        with self.lock:
            times = sorted(t for t in self.acked_at.get(partition, []) if since <= t <= until)
        return max((b - a for a, b in zip([since, *times], [*times, until], strict=True)), default=until - since)

    def fail(self, what: str) -> None:
        with self.lock:
            self.failed.append(what)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


def _keys() -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    i = 0
    while len(out) < PARTITIONS:
        key = f"key-{i}".encode()
        p = record_partition(key, None, PARTITIONS)
        assert p is not None
        out.setdefault(p, key)
        i += 1
    return out


def _produce_with_client(acks: str, bootstrap: str, writes: _Writes, stop: threading.Event) -> None:
    """A Python Producer (idempotent, straight to each partition's leader), four records per partition a round."""
    keys = _keys()
    producer = Producer(bootstrap, acks=acks, linger_ms=2, delivery_timeout_ms=60_000, retry_backoff_max_ms=200)

    def report(value: str) -> Callable[[LogstoreError | None, Message | None], None]:
        def on_delivery(error: LogstoreError | None, md: Message | None) -> None:
            if error is not None or md is None:
                writes.fail(f"{value}: {error}")
            else:
                writes.ok(value, md.partition(), md.offset())

        return on_delivery

    seq = 0
    try:
        while not stop.is_set():
            for _ in range(4):
                for key in keys.values():
                    value = f"client-{acks}-{seq}"
                    seq += 1
                    producer.produce(TOPIC, value, key=key, on_delivery=report(value))
            producer.flush()
    finally:
        producer.close()


def _produce_through(node: Server, writes: _Writes, stop: threading.Event) -> None:
    """Plain HTTP to one node, which forwards to the leader: one record a request, acks=1 and all in turn.

    Idempotent per partition (a producer id and a sequence of its own each), so a request retried after a
    refusal or a lost answer is written once.
    """
    sequences = dict.fromkeys(range(PARTITIONS), 0)
    with httpx.Client(base_url=node.url, timeout=30) as http:
        n = 0
        while not stop.is_set():
            p = n % PARTITIONS
            acks = "1" if (n // PARTITIONS) % 2 == 0 else "all"
            value = f"http-{node.port}-{n}"
            body = {
                "producer_id": f"http-{node.port}-{p}",
                "sequence": sequences[p],
                "records": [{"value": value, "partition": p}],
            }
            deadline = time.monotonic() + 60
            while True:
                try:
                    r = http.post(f"/v1/topics/{TOPIC}/records", params={"acks": acks}, json=body)
                except httpx.TransportError:
                    r = None
                if r is not None and r.status_code == 200:
                    offset = r.json()["offsets"][0]
                    writes.ok(value, offset["partition"], offset.get("offset"))
                    break
                if r is not None and r.status_code not in (421, 429, 500, 503):
                    writes.fail(f"{value}: {r.status_code} {r.text}")
                    break
                if time.monotonic() > deadline:
                    writes.fail(f"{value}: not accepted in 60 s: {None if r is None else r.text}")
                    break
                time.sleep(0.02)
            sequences[p] += 1
            n += 1


def _led(zk: KazooClient, node_id: int) -> set[int]:
    return {p for p, (leader, _) in leaders(zk, TOPIC, PARTITIONS).items() if leader == node_id}


def _on_preferred(zk: KazooClient) -> bool:
    """Every partition led by its preferred leader, with no hand-over under way."""
    state = leaders(zk, TOPIC, PARTITIONS)
    if len(state) != PARTITIONS:
        return False
    raw = [zk.get(f"/brokers/topics/{TOPIC}/partitions/{p}/state")[0] for p in range(PARTITIONS)]
    return all(state[p][0] == PREFERRED[(TOPIC, p)] for p in range(PARTITIONS)) and all(
        b"handover_to" not in r for r in raw
    )


def _run(
    cluster: Callable[..., Server],
    zk: KazooClient,
    root: Path,
    elect: Callable[[dict[int, Server]], None],
    **config: object,
) -> None:
    """Kill node 2, restart it, ``elect``, all under load; then check the log."""
    nodes = {n: cluster(n, **config) for n in (1, 2, 3)}
    create_topic(nodes[1], TOPIC, zk, {1, 2, 3})
    assert _on_preferred(zk)
    writes = _Writes()
    stop = threading.Event()
    bootstrap = ",".join(n.url for n in nodes.values())
    threads = [
        threading.Thread(target=_produce_with_client, args=(acks, bootstrap, writes, stop), daemon=True)
        for acks in ("1", "all")
    ] + [threading.Thread(target=_produce_through, args=(node, writes, stop), daemon=True) for node in nodes.values()]
    for t in threads:
        t.start()
    try:
        until(lambda: writes.count() >= 200, timeout_s=60)

        nodes[2].kill()
        until(lambda: led_by(zk, TOPIC, {1, 3}), timeout_s=30)
        moved_epochs = leaders(zk, TOPIC, PARTITIONS)
        moving = {p for p, (leader, _) in moved_epochs.items() if leader != PREFERRED[(TOPIC, p)]}
        started = time.monotonic()  # the automatic check may move them as soon as node 2 is back
        nodes[2].restart()
        until(lambda: zk.exists("/brokers/ids/2"))
        before = writes.count()
        until(lambda: writes.count() >= before + 200, timeout_s=60)

        elect(nodes)
        until(lambda: _on_preferred(zk), timeout_s=60)
        settled = time.monotonic()
        assert _led(zk, 2) == {p for p in range(PARTITIONS) if PREFERRED[(TOPIC, p)] == 2}
        after = leaders(zk, TOPIC, PARTITIONS)
        for p in _led(zk, 2):
            assert after[p][1] > moved_epochs[p][1], f"partition {p}: no new leader epoch for the move: {after}"
        before = writes.count()
        until(lambda: writes.count() >= before + 200, timeout_s=60)
        pauses = {p: writes.longest_pause(p, started, time.monotonic()) for p in sorted(moving)}
        print(
            f"leaders settled {settled - started:.2f}s after node 2 was restarted; longest pause between two "
            "acknowledgements of a moved partition: " + ", ".join(f"p{p}={s:.2f}s" for p, s in pauses.items())
        )
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a writer did not finish"
    _check_log(root, writes, zk)


def _check_log(root: Path, writes: _Writes, zk: KazooClient) -> None:
    assert not writes.failed, f"writes failed: {writes.failed[:5]}"
    catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": str(root)}))
    # acks=1 records are committed after their acknowledgement: wait until the log holds every one
    until(lambda: sum(len(v) for v in assert_gap_free(catalog, TOPIC).values()) >= len(writes.acked), timeout_s=30)
    by_partition = assert_gap_free(catalog, TOPIC)
    values = [v.decode() for vs in by_partition.values() for v in vs]
    doubled = [v for v, n in Counter(values).items() if n > 1]
    assert not doubled, f"duplicates: {sorted(doubled)[:10]}"
    lost = []
    for value, (p, offset) in writes.acked.items():
        log = by_partition.get(p, [])
        if offset is None:
            found = value if value.encode() in log else None
        else:
            found = log[offset].decode() if offset < len(log) else None
        if found != value:
            lost.append(f"{value} acknowledged at {p}/{offset}, which holds {found}")
    assert not lost, f"{len(lost)} acknowledged records lost or moved: {lost[:10]}"
    current = leaders(zk, TOPIC, PARTITIONS)
    for p, epochs in leader_epochs_in_log(root, TOPIC).items():
        assert epochs == sorted(epochs), f"partition {p}: a commit from a stale epoch: {epochs}"
        assert epochs[-1] <= current[p][1], f"partition {p}: a commit past the epoch ZooKeeper holds: {epochs}"
    print(f"acknowledged {len(writes.acked)} records, none lost, moved or doubled")


def test_an_election_asked_for_gives_a_restarted_node_its_partitions_back_losing_nothing(
    cluster: Callable[..., Server], zk: KazooClient, tmp_path: Path
) -> None:
    def elect(nodes: dict[int, Server]) -> None:
        assert _led(zk, 2) == set(), "the restarted node leads partitions before the election"
        r = cli(nodes[1].root, "cluster", "elect-leaders", "--server", nodes[3].url)
        assert r.returncode == 0, r.stdout + r.stderr
        moved = sorted(f"{TOPIC}-{p}" for p in range(PARTITIONS) if PREFERRED[(TOPIC, p)] == 2)
        lines = r.stdout.splitlines()
        assert lines[0] == f"Successfully completed leader election (PREFERRED) for partitions {', '.join(moved)}"
        print(r.stdout)

    _run(cluster, zk, tmp_path / "data", elect, **{"auto.leader.rebalance.enable": "false"})


def test_the_controller_rebalances_leaders_by_itself_every_check_interval(
    cluster: Callable[..., Server], zk: KazooClient, tmp_path: Path
) -> None:
    def wait(nodes: dict[int, Server]) -> None:
        pass  # the controller's own check, every second here

    _run(cluster, zk, tmp_path / "data", wait, **{"leader.imbalance.check.interval.seconds": 1})
