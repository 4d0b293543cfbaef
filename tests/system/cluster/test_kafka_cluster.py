"""The Kafka listener in cluster mode: three nodes, each serving its own listener, registered in ZooKeeper.

Metadata names each partition's leader by that node's listener; a Produce or
Fetch at a node that does not lead the partition is answered
``NOT_LEADER_OR_FOLLOWER`` (librdkafka then refreshes its metadata);
FindCoordinator names the group's coordinator node. A leader killed with
SIGKILL in the middle of an acks=all stream loses nothing that was acknowledged.
"""

from __future__ import annotations

import io
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from kazoo.client import KazooClient

from logstore.cluster import group_coordinator
from tests.support.server import Server, free_port
from tests.system.cluster.cluster_helpers import PARTITIONS, create_topic, led_by, until
from tests.system.kafka.raw import CORRELATION_ID, produce_frame, produce_response, request

ck = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")


def _find_coordinator(bootstrap: str, group: str) -> tuple[int, int, int]:
    """(error code, node id, port) of a FindCoordinator v3 request for ``group``."""
    from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
    from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_reader, entity_writer

    out = io.BytesIO()
    header = RequestHeader(request_api_key=10, request_api_version=3, correlation_id=CORRELATION_ID, client_id="t")
    entity_writer(RequestHeader)(out, header)
    entity_writer(FindCoordinatorRequest)(out, FindCoordinatorRequest(key=group, key_type=0))
    frame = request(bootstrap, struct.pack(">i", out.tell()) + out.getvalue())
    response, _ = entity_reader(FindCoordinatorResponse)(frame, 5)
    return int(response.error_code.value), int(response.node_id), int(response.port)


def _offset_commit(bootstrap: str, group: str, offset: int) -> list[int]:
    """The partition error codes of an OffsetCommit v8 (no membership) of ``orders``-0 at ``offset``."""
    from kio.schema.offset_commit.v8.request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from kio.schema.offset_commit.v8.response import OffsetCommitResponse
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_reader, entity_writer

    body = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            OffsetCommitRequestTopic(
                name="orders",
                partitions=(
                    OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=None
                    ),
                ),
            ),
        ),
    )
    out = io.BytesIO()
    header = RequestHeader(request_api_key=8, request_api_version=8, correlation_id=CORRELATION_ID, client_id="t")
    entity_writer(RequestHeader)(out, header)
    entity_writer(OffsetCommitRequest)(out, body)
    response, _ = entity_reader(OffsetCommitResponse)(
        request(bootstrap, struct.pack(">i", out.tell()) + out.getvalue()), 5
    )
    return [int(p.error_code.value) for t in response.topics for p in t.partitions]


def _init_transactional(bootstrap: str, tid: str) -> int:
    """The error code of an InitProducerId v1 naming transactional id ``tid``."""
    import datetime

    from kio.schema.init_producer_id.v1.request import InitProducerIdRequest
    from kio.schema.init_producer_id.v1.response import InitProducerIdResponse
    from kio.schema.request_header.v1.header import RequestHeader
    from kio.serial import entity_reader, entity_writer

    out = io.BytesIO()
    header = RequestHeader(request_api_key=22, request_api_version=1, correlation_id=CORRELATION_ID, client_id="t")
    entity_writer(RequestHeader)(out, header)
    body = InitProducerIdRequest(transactional_id=tid, transaction_timeout=datetime.timedelta(seconds=60))
    entity_writer(InitProducerIdRequest)(out, body)
    frame = request(bootstrap, struct.pack(">i", out.tell()) + out.getvalue())
    response, _ = entity_reader(InitProducerIdResponse)(frame, 4)
    return int(response.error_code.value)


def test_kafka_clients_follow_leaders_and_a_killed_leader_loses_nothing_acknowledged(
    cluster: Callable[..., Server], zk: KazooClient, tmp_path: Path
) -> None:
    ports = {i: free_port() for i in (1, 2, 3)}
    nodes = {i: cluster(i, listeners=f"PLAINTEXT://127.0.0.1:{ports[i]}") for i in (1, 2, 3)}
    state = create_topic(nodes[1], "orders", zk, {1, 2, 3})
    assert len({leader for leader, _ in state.values()}) > 1  # partitions led by different nodes

    # Metadata, from any node: every node by its own listener, every partition's leader as ZooKeeper has it
    meta = admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{ports[2]}"}).list_topics(timeout=30)
    assert {b.id: b.port for b in meta.brokers.values()} == ports
    assert {p: m.leader for p, m in meta.topics["orders"].partitions.items()} == {p: s[0] for p, s in state.items()}

    # a Produce at a node that does not lead the partition: NOT_LEADER_OR_FOLLOWER, nothing written
    follower = next(i for i in (1, 2, 3) if i != state[0][0])
    code, _ = produce_response(request(f"127.0.0.1:{ports[follower]}", produce_frame("orders", 0, [b"misdirected"])))
    assert code == 6

    # FindCoordinator: the group's coordinator node (rendezvous hashing over the live nodes), from any node
    for i in (1, 2, 3):
        chosen = group_coordinator("readers", [1, 2, 3])
        assert chosen is not None
        assert _find_coordinator(f"127.0.0.1:{ports[i]}", "readers") == (0, chosen, ports[chosen])

    # a group's commits are served by its coordinator only: NOT_COORDINATOR elsewhere, and nothing committed there
    chosen = group_coordinator("readers", [1, 2, 3])
    other = next(i for i in (1, 2, 3) if i != chosen)
    assert _offset_commit(f"127.0.0.1:{ports[other]}", "readers", 0) == [16]
    assert _offset_commit(f"127.0.0.1:{ports[chosen]}", "readers", 0) == [0]

    # the listener's transactional APIs are single-node: UNSUPPORTED_VERSION at every node, the id not created
    for i in (1, 2, 3):
        assert _init_transactional(f"127.0.0.1:{ports[i]}", "kafka-txn") == 35
    with nodes[1].client() as api:
        assert api.get("/v1/transactions/kafka-txn").status_code == 404

    # acks=all, idempotent, keyed records across every partition; the leader of partition 0 is killed mid-stream
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports.values())
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
        }
    )
    acked: list[tuple[int, int, bytes, bytes]] = []
    failed: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        else:
            failed.append(err)

    victim = state[0][0]
    n = 4000
    for i in range(n):
        producer.produce("orders", key=f"key-{i}".encode(), value=f"value-{i}".encode(), on_delivery=report)
        producer.poll(0)
        if i == n // 4:
            producer.flush(60)  # some acknowledged before the kill; the rest in flight or still to come
            before = len(acked)
        if i == n // 4 + 200:
            nodes[victim].kill()
    producer.flush(180)
    assert before > 0
    live = {1, 2, 3} - {victim}
    until(lambda: led_by(zk, "orders", live), timeout_s=60)

    rows = DeltaTable(str(tmp_path / "data" / "topics" / "orders")).to_pyarrow_table().to_pylist()
    stored = {(r["partition"], r["offset"]): (r["key"], r["value"]) for r in rows}
    lost = [a for a in acked if stored.get((a[0], a[1])) != (a[2], a[3])]
    assert lost == []
    assert len({a[0] for a in acked}) == PARTITIONS
    assert failed == [] and len(acked) == n  # librdkafka retried at the new leaders: everything landed
    values = [v for _, v in stored.values()]
    assert len(values) == len(set(values)) == n  # and once: idempotence across the failover

    # a consumer reads everything back from the new leaders (Fetch at a non-leader: NOT_LEADER_OR_FOLLOWER, refetch)
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition("orders", p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = set()
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            got.add((msg.partition(), msg.offset(), msg.key(), msg.value()))
    consumer.close()
    assert got == set(acked)
