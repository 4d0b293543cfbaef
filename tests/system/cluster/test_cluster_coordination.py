"""Cluster coordination on a real ZooKeeper: registry, controller election, leaders and their epochs.

Three coordinators (nodes) share one chroot of the session's ZooKeeper
server. A node that leaves (its session closes, as when its process dies and
the session times out) loses its partitions to the live ones with
``leader_epoch + 1``; the controller's death elects another with a higher
``controller_epoch``; a deposed controller's writes change nothing.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from logstore.cluster import ClusterMetadata, NodeInfo, PartitionState, ZooKeeperController
from logstore.cluster import controller as controller_module
from logstore.errors import DuplicateBrokerRegistrationError

pytestmark = pytest.mark.zookeeper


def _until(what: Callable[[], bool], timeout_s: float = 20) -> None:
    """Wait for ZooKeeper's watches to deliver a state (they are asynchronous), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


@pytest.fixture
def chroot(zookeeper: str) -> str:
    return f"{zookeeper}/test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def nodes(chroot: str) -> Iterator[Callable[..., ZooKeeperController]]:
    started: list[ZooKeeperController] = []

    def start(node_id: int, **kw: object) -> ZooKeeperController:
        c = ZooKeeperController(
            chroot, NodeInfo(node_id, f"http://127.0.0.1:{9000 + node_id}"), session_timeout_ms=4000, **kw
        )
        c.start()
        started.append(c)
        return c

    yield start
    for c in started:
        c.close()


def _all_led(meta: ClusterMetadata, topic: str, n: int, live: set[int]) -> bool:
    return all((s := meta.leader(topic, p)) is not None and s.leader in live for p in range(n))


def _leaders(meta: ClusterMetadata, topic: str, n: int) -> list[PartitionState]:
    out = [meta.leader(topic, p) for p in range(n)]
    assert all(s is not None for s in out)
    return [s for s in out if s is not None]


def test_three_nodes_one_controller_and_six_partitions_spread(nodes: Callable[..., ZooKeeperController]) -> None:
    a, b, c = nodes(1), nodes(2), nodes(3)
    a.register_topic("orders", 6)
    # Each node's cache follows ZooKeeper's watches on its own: wait for every view, then read one.
    _until(lambda: all(_all_led(x.metadata(), "orders", 6, {1, 2, 3}) for x in (a, b, c)))
    meta = c.metadata()
    assert [n.node_id for n in meta.nodes] == [1, 2, 3]
    assert meta.node(2) == NodeInfo(2, "http://127.0.0.1:9002")
    assert sum(x.is_controller for x in (a, b, c)) == 1
    assert meta.controller in (1, 2, 3) and meta.controller_epoch == 1
    assert Counter(s.leader for s in _leaders(meta, "orders", 6)) == {1: 2, 2: 2, 3: 2}
    assert {s.leader_epoch for s in _leaders(meta, "orders", 6)} == {0}


def test_a_dead_nodes_partitions_move_with_a_higher_epoch(nodes: Callable[..., ZooKeeperController]) -> None:
    a, b, c = nodes(1), nodes(2), nodes(3)
    a.register_topic("orders", 6)
    _until(lambda: _all_led(a.metadata(), "orders", 6, {1, 2, 3}))
    before = a.metadata()
    victim = next(x for x in (a, b, c) if not x.is_controller)
    survivor = next(x for x in (a, b, c) if x is not victim)
    victim.close()
    live = {1, 2, 3} - {victim.node.node_id}
    _until(lambda: _all_led(survivor.metadata(), "orders", 6, live))
    after = survivor.metadata()
    for p in range(6):
        old, new = before.leader("orders", p), after.leader("orders", p)
        assert old is not None and new is not None
        if old.leader == victim.node.node_id:
            assert new.leader_epoch == old.leader_epoch + 1
        else:
            assert new == old  # live leaders keep their partitions and epochs


def test_the_controllers_death_elects_another_with_a_higher_epoch(
    nodes: Callable[..., ZooKeeperController],
) -> None:
    a, b, c = nodes(1), nodes(2), nodes(3)
    _until(lambda: a.metadata().controller is not None)
    first = a.metadata()
    controller = next(x for x in (a, b, c) if x.node.node_id == first.controller)
    rest = [x for x in (a, b, c) if x is not controller]
    controller.close()
    _until(lambda: rest[0].metadata().controller not in (None, first.controller))
    assert rest[0].metadata().controller_epoch == first.controller_epoch + 1
    rest[0].register_topic("late", 2)  # the new controller places leaders
    _until(lambda: _all_led(rest[1].metadata(), "late", 2, {x.node.node_id for x in rest}))


def test_a_deposed_controller_writes_nothing(chroot: str, nodes: Callable[..., ZooKeeperController]) -> None:
    a = nodes(1)
    _until(lambda: a.is_controller)
    a.register_topic("orders", 1)
    _until(lambda: _all_led(a.metadata(), "orders", 1, {1}))
    # Another controller is elected behind its back: /controller_epoch moves on.
    zk = KazooClient(hosts=chroot)
    zk.start(timeout=10)
    data, _ = zk.get("/controller_epoch")
    zk.set("/controller_epoch", str(int(data) + 1).encode())
    state_before = zk.get("/brokers/topics/orders/partitions/0/state")[0]
    a.register_topic("orders", 3)  # work for the (stale) controller
    # It finds its epoch stale, writes nothing, resigns, and wins the next election with a newer epoch.
    _until(lambda: a.metadata().controller_epoch == int(data) + 2)
    _until(lambda: _all_led(a.metadata(), "orders", 3, {1}))
    assert zk.get("/brokers/topics/orders/partitions/0/state")[0] == state_before
    assert json.loads(zk.get("/controller")[0])["epoch"] == int(data) + 2
    zk.stop()


def test_a_controller_elected_again_keeps_the_epochs_others_gave_a_topic_created_again(
    chroot: str, nodes: Callable[..., ZooKeeperController]
) -> None:
    """A controller deposed while others delete a topic, create it again and place its leaders finds, once elected
    again, the epochs they gave: it must not place the new topic's partitions anew at epoch 0, below an epoch their
    leader may have claimed already (that leader would be fenced, and the partition unavailable, until it died)."""
    a = nodes(1)
    _until(lambda: a.is_controller)
    a.register_topic("churn", 1, "old-id")
    _until(lambda: _all_led(a.metadata(), "churn", 1, {1}))
    zk = KazooClient(hosts=chroot)
    zk.start(timeout=10)
    try:
        # Another controller is elected behind a's back and stays: a finds its epoch stale at its next write.
        data, stat = zk.get("/controller_epoch")
        txn = zk.transaction()
        txn.delete("/controller")
        txn.create("/controller", json.dumps({"node_id": 99, "epoch": int(data) + 1}).encode(), ephemeral=True)
        txn.set_data("/controller_epoch", str(int(data) + 1).encode(), version=stat.version)
        assert not any(isinstance(r, Exception) for r in txn.commit())
        a.register_topic("work", 1)
        _until(lambda: not a.is_controller)
        # Under the other controller the topic is created again and its partition, placed at epoch 0, fails over.
        a.unregister_topic("churn")
        a.register_topic("churn", 1, "new-id")
        state = "/brokers/topics/churn/partitions/0/state"
        zk.create(state, PartitionState(1, 1).to_json(), makepath=True)
        zk.delete("/controller")  # it leaves: a is elected again
        _until(lambda: a.is_controller)
        a.register_topic("after", 1)  # placed by a round of a's, the one that placed anything else too
        _until(lambda: _all_led(a.metadata(), "after", 1, {1}))
        assert PartitionState.from_json(zk.get(state)[0]) == PartitionState(1, 1)
    finally:
        zk.stop()
        zk.close()


def test_a_taken_node_id_refuses_to_register(nodes: Callable[..., ZooKeeperController]) -> None:
    nodes(1)
    with pytest.raises(DuplicateBrokerRegistrationError, match=r"node.id 1 is registered"):
        nodes(1)


def test_controlled_shutdown_hands_partitions_over_within_a_second(
    nodes: Callable[..., ZooKeeperController],
) -> None:
    a, b = nodes(1), nodes(2)
    a.register_topic("orders", 4)
    _until(lambda: _all_led(a.metadata(), "orders", 4, {1, 2}))
    leaving = a if a.is_controller else b  # the controller itself leaving is the harder case
    staying = b if leaving is a else a
    started = time.monotonic()
    leaving.shutdown(timeout_s=5)
    took = time.monotonic() - started
    _until(lambda: _all_led(staying.metadata(), "orders", 4, {staying.node.node_id}), timeout_s=5)
    print(f"controlled shutdown handed over in {took * 1000:.0f} ms")
    assert took < 1.0
    _until(lambda: staying.is_controller)


def test_a_new_leader_gets_an_epoch_above_the_one_zookeeper_holds_not_the_controllers_view(
    chroot: str, nodes: Callable[..., ZooKeeperController]
) -> None:
    """A state written behind the controller's back with a higher epoch (another controller's, say): the leader the
    controller then moves the partition to gets an epoch above it, never the controller's cached epoch + 1 (a log
    holding the higher epoch would fence the new leader, or two nodes would hold one epoch)."""
    a = nodes(1)
    _until(lambda: a.is_controller)
    b = nodes(2)
    _until(lambda: {n.node_id for n in a.metadata().nodes} == {1, 2})
    a.register_topic("fence", 2)
    _until(lambda: _all_led(a.metadata(), "fence", 2, {1, 2}))
    p = next(p for p, s in enumerate(_leaders(a.metadata(), "fence", 2)) if s.leader == 2)
    zk = KazooClient(hosts=chroot)
    zk.start(timeout=10)
    try:
        state = f"/brokers/topics/fence/partitions/{p}/state"
        zk.set(state, PartitionState(2, 7).to_json())
        b.close()  # node 2 leaves: a moves its partition to node 1
        _until(lambda: PartitionState.from_json(zk.get(state)[0]).leader == 1)
        assert PartitionState.from_json(zk.get(state)[0]) == PartitionState(1, 8)
    finally:
        zk.stop()
        zk.close()


def test_a_state_changed_while_the_controller_writes_it_is_read_again_not_overwritten(
    chroot: str, nodes: Callable[..., ZooKeeperController], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's write of a state checks the znode's version: a concurrent write (here: an epoch raised between
    the controller's read and its commit) fails the write, which is retried over the new state; the controller is
    not taken for deposed."""
    a = nodes(1)
    _until(lambda: a.is_controller)
    b = nodes(2)
    _until(lambda: {n.node_id for n in a.metadata().nodes} == {1, 2})
    a.register_topic("race", 2)
    _until(lambda: _all_led(a.metadata(), "race", 2, {1, 2}))
    controller_epoch = a.metadata().controller_epoch
    p = next(p for p, s in enumerate(_leaders(a.metadata(), "race", 2)) if s.leader == 2)
    state = f"/brokers/topics/race/partitions/{p}/state"
    zk = KazooClient(hosts=chroot)
    zk.start(timeout=10)
    stage = controller_module.stage_state

    def then_another_writes(zk_: KazooClient, txn: object, path: str, new: PartitionState) -> PartitionState:
        staged = stage(zk_, txn, path, new)  # type: ignore[arg-type]
        if path == state and PartitionState.from_json(zk.get(state)[0]).leader_epoch < 9:
            zk.set(state, PartitionState(2, 9).to_json())  # between the controller's read and its commit
        return staged

    monkeypatch.setattr(controller_module, "stage_state", then_another_writes)
    try:
        b.close()  # node 2 leaves: a moves its partition to node 1
        _until(lambda: PartitionState.from_json(zk.get(state)[0]).leader == 1)
        assert PartitionState.from_json(zk.get(state)[0]) == PartitionState(1, 10)
        assert a.is_controller and a.metadata().controller_epoch == controller_epoch
    finally:
        zk.stop()
        zk.close()
