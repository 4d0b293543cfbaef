"""One idempotent producer id writes every partition of a cluster, through any node (docs/design.md §3).

Three real ``logstore serve`` nodes and one real ZooKeeper; a topic of six
partitions spread over them. Sequences are checked per (producer, partition):
keyless requests (placed by ``(producer_id, sequence)``) land on any leader,
a keyed request spanning every partition is split by the node that received
it, a retry of a request whose share landed at one leader writes only the
other shares, a retry after a leader change gets the original offsets, and the
Python ``Producer`` delivers every record.
"""

from __future__ import annotations

from collections.abc import Callable
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
from tests.system.cluster.cluster_helpers import PARTITIONS, create_topic, leaders, led_by, produce, until

pytestmark = pytest.mark.zookeeper

TOPIC = "orders"
PID = "one-producer"


def _keys() -> dict[int, str]:
    """One key per partition, found by the partitioner itself."""
    out: dict[int, str] = {}
    i = 0
    while len(out) < PARTITIONS:
        key = f"key-{i}"
        p = record_partition(key.encode(), None, PARTITIONS)
        assert p is not None
        out.setdefault(p, key)
        i += 1
    return out


def _placed(r: httpx.Response) -> list[tuple[int, int]]:
    assert r.status_code == 200, r.text
    return [(o["partition"], o["offset"]) for o in r.json()["offsets"]]


def test_one_producer_id_writes_every_partition_through_any_node(
    cluster: Callable[..., Server], zk: KazooClient, tmp_path: Path
) -> None:
    nodes = {i: cluster(i) for i in (1, 2, 3)}
    state = create_topic(nodes[1], TOPIC, zk, {1, 2, 3})
    assert len({leader for leader, _ in state.values()}) == 3, state  # every node leads partitions
    urls = [n.url for n in nodes.values()]
    keys = _keys()
    seq = 0
    written: dict[str, tuple[int, int]] = {}

    def send(records: list[dict[str, object]], url: str, sequence: int, **params: str) -> list[tuple[int, int]]:
        placed = _placed(produce(url, TOPIC, {"records": records, "producer_id": PID, "sequence": sequence}, **params))
        for record, at in zip(records, placed, strict=True):
            written[str(record["value"])] = at
        return placed

    # keyless requests: each sequence lands on the partition (producer_id, sequence) picks, whoever leads it
    keyless_partitions = set()
    for _ in range(12):
        placed = send([{"value": f"keyless-{seq}-{i}"} for i in range(3)], urls[seq % 3], seq)
        keyless_partitions |= {p for p, _ in placed}
        seq += 1
    assert len({state[p][0] for p in keyless_partitions}) > 1  # they went to several leaders

    # keyed requests spanning every partition, through each node in turn: split by the node that received them
    for _ in range(6):
        records = [{"key": keys[p], "value": f"keyed-{seq}-{p}-{i}"} for p in range(PARTITIONS) for i in range(2)]
        placed = send(records, urls[seq % 3], seq)
        assert [p for p, _ in placed] == [p for p in range(PARTITIONS) for _ in range(2)]
        seq += 1

    # a request whose share landed at one leader (the other shares failed): its retry writes only the others
    leader_of_0 = nodes[state[0][0]]
    share = [{"key": keys[p], "value": f"split-{seq}-{p}"} for p in range(PARTITIONS) if state[p][0] == state[0][0]]
    first = send(share, leader_of_0.url, seq, forward="false")
    whole = [{"key": keys[p], "value": f"split-{seq}-{p}"} for p in range(PARTITIONS)]
    other = next(u for u in urls if u != leader_of_0.url)
    retried = dict(zip((str(r["value"]) for r in whole), send(whole, other, seq), strict=True))
    assert [retried[str(r["value"])] for r in share] == first  # the landed share: its original offsets
    seq += 1

    # a retry after a leader change: the new leaders read the sequences from the table
    records = [{"key": keys[p], "value": f"moved-{seq}-{p}"} for p in range(PARTITIONS)]
    original = send(records, urls[0], seq)
    victim = state[0][0]
    nodes[victim].kill()
    live = {1, 2, 3} - {victim}
    until(lambda: led_by(zk, TOPIC, live), timeout_s=30)
    survivor = nodes[min(live)].url

    def retry() -> list[tuple[int, int]] | None:
        r = produce(survivor, TOPIC, {"records": records, "producer_id": PID, "sequence": seq})
        return _placed(r) if r.status_code == 200 else None  # a new leader may still be claiming its partitions

    assert until(retry, timeout_s=30) == original
    assert all(leaders(zk, TOPIC, PARTITIONS)[p][0] != victim for p in range(PARTITIONS))

    # the Python Producer, bootstrapped at one node: keyless and keyed records, every one delivered
    delivered: dict[str, tuple[int, int]] = {}
    failed: list[str] = []

    def report(value: str) -> Callable[[LogstoreError | None, Message | None], None]:
        def on_delivery(error: LogstoreError | None, md: Message | None) -> None:
            if error is not None:
                failed.append(f"{value}: {error}")
            elif md is not None:
                delivered[value] = (md.partition(), md.offset())

        return on_delivery

    with Producer(survivor, linger_ms=2, batch_records=5, delivery_timeout_ms=30_000) as producer:
        for i in range(20):
            producer.produce(TOPIC, f"client-keyless-{i}", on_delivery=report(f"client-keyless-{i}"))
        for i in range(30):
            value = f"client-keyed-{i}"
            producer.produce(TOPIC, value, key=keys[i % PARTITIONS], on_delivery=report(value))
        producer.flush(60)
    assert not failed, failed[:5]
    assert len(delivered) == 50
    assert all(delivered[f"client-keyed-{i}"][0] == i % PARTITIONS for i in range(30))
    written |= delivered

    catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": str(tmp_path / "data")}))
    by_partition = assert_gap_free(catalog, TOPIC)
    values = [v.decode() for vs in by_partition.values() for v in vs]
    assert sorted(values) == sorted(written)  # every record once, none twice
    for value, (p, offset) in written.items():
        assert by_partition[p][offset].decode() == value
