"""Leader placement: sticky, spread by partition or by topic, every change of leader bumps the epoch."""

from __future__ import annotations

from collections import Counter

import pytest

from logstore.cluster import PartitionState, Placement, place_leaders
from logstore.cluster.placement import above_current

SIX = [("orders", p) for p in range(6)]


def test_partitions_spread_evenly_over_live_nodes_at_epoch_zero() -> None:
    placed = place_leaders(SIX, {}, [1, 2, 3])
    assert set(placed) == set(SIX)
    assert Counter(s.leader for s in placed.values()) == {1: 2, 2: 2, 3: 2}
    assert {s.leader_epoch for s in placed.values()} == {0}


def test_topic_placement_gives_a_topic_one_leader() -> None:
    parts = SIX + [("clicks", p) for p in range(4)] + [("audit", 0)]
    placed = place_leaders(parts, {}, [1, 2, 3], "topic")
    leaders = {t: {s.leader for (tt, _), s in placed.items() if tt == t} for t in ("orders", "clicks", "audit")}
    assert all(len(v) == 1 for v in leaders.values())
    assert len({next(iter(v)) for v in leaders.values()}) == 3  # three topics on three nodes


def test_live_leaders_are_kept_and_a_dead_nodes_partitions_move_with_epoch_plus_one() -> None:
    current = place_leaders(SIX, {}, [1, 2, 3])
    moved = place_leaders(SIX, current, [1, 3])
    gone = {tp for tp, s in current.items() if s.leader == 2}
    assert set(moved) == gone
    for tp, s in moved.items():
        assert s.leader in (1, 3)
        assert s.leader_epoch == current[tp].leader_epoch + 1
    after = current | moved
    assert Counter(s.leader for s in after.values()) == {1: 3, 3: 3}


@pytest.mark.parametrize("placement", ["partition", "topic"])
def test_new_partitions_of_a_topic_get_leaders_and_nothing_changes_without_live_nodes(placement: Placement) -> None:
    current = place_leaders(SIX[:4], {}, [1, 2], placement)
    added = place_leaders(SIX, current, [1, 2], placement)
    assert set(added) == set(SIX[4:])
    if placement == "topic":
        assert {s.leader for s in (current | added).values()} == {current[SIX[0]].leader}
    assert place_leaders(SIX, current, [], placement) == {}


def test_a_returning_node_does_not_take_partitions_back() -> None:
    current = {tp: PartitionState(1, 4) for tp in SIX}
    assert place_leaders(SIX, current, [1, 2, 3]) == {}


def test_a_state_written_over_zookeepers_never_lowers_its_epoch_nor_shares_it_with_another_leader() -> None:
    held = PartitionState(2, 7)
    assert above_current(PartitionState(1, 1), held) == PartitionState(1, 8)  # new leader: above what ZK holds
    assert above_current(PartitionState(1, 7), held) == PartitionState(1, 8)  # new leader at the same epoch
    assert above_current(PartitionState(2, 3), held) == PartitionState(2, 8)  # the same leader never goes down
    assert above_current(PartitionState(2, 7, handover_to=1), held) == PartitionState(2, 7, handover_to=1)
    assert above_current(PartitionState(1, 9), held) == PartitionState(1, 9)
    assert above_current(PartitionState(1, 0), None) == PartitionState(1, 0)
