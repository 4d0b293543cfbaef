"""Preferred leaders: a balanced rendezvous assignment over the live nodes, and which partitions an election moves."""

from __future__ import annotations

from collections import Counter

from logstore.cluster import PartitionState, place_leaders
from logstore.cluster.placement import preferred_leaders
from logstore.cluster.rebalance import election_moves, imbalanced

TOPICS = [(f"t{i}", p) for i in range(10) for p in range(6)] + [(f"u{i}", p) for i in range(5) for p in range(4)]
"""Eighty partitions: ten topics of six, five of four."""


def test_preferred_leaders_are_balanced_overall_and_per_topic() -> None:
    for live in ([1, 2, 3], [1, 2, 3, 4, 5], [7]):
        preferred = preferred_leaders(TOPICS, live)
        loads = Counter(preferred.values())
        assert set(loads) == set(live)
        assert max(loads.values()) - min(loads.values()) <= 1, loads
        for topic in {t for t, _ in TOPICS}:
            per_topic = Counter(n for (t, _), n in preferred.items() if t == topic)
            counts = [per_topic.get(n, 0) for n in live]
            assert max(counts) - min(counts) <= 1, (topic, per_topic)
    assert preferred_leaders(TOPICS, []) == {}


def test_whole_topics_are_balanced_with_topic_placement() -> None:
    preferred = preferred_leaders(TOPICS, [1, 2, 3], "topic")
    by_topic = {t: {n for (tt, _), n in preferred.items() if tt == t} for t, _ in TOPICS}
    assert all(len(nodes) == 1 for nodes in by_topic.values())
    loads = Counter(next(iter(nodes)) for nodes in by_topic.values())
    assert max(loads.values()) - min(loads.values()) <= 1, loads


def test_a_node_leaving_and_coming_back_moves_mostly_its_own_partitions() -> None:
    full = preferred_leaders(TOPICS, [1, 2, 3])
    for gone in (1, 2, 3):
        without = preferred_leaders(TOPICS, [n for n in (1, 2, 3) if n != gone])
        others = [tp for tp, n in full.items() if n != gone]
        moved = [tp for tp in others if without[tp] != full[tp]]
        assert len(moved) <= len(others) // 4, f"node {gone} left: {len(moved)} of {len(others)} others moved"
    assert preferred_leaders(list(reversed(TOPICS)), [3, 1, 2]) == full  # order of arguments does not matter


def test_a_new_topic_starts_on_its_preferred_leaders_and_an_orphan_goes_to_the_least_loaded() -> None:
    six = [("orders", p) for p in range(6)]
    preferred = preferred_leaders(six, [1, 2, 3])
    placed = place_leaders(six, {}, [1, 2, 3], preferred=preferred)
    assert {tp: s.leader for tp, s in placed.items()} == preferred
    survivors = preferred_leaders(six, [1, 3])
    moved = place_leaders(six, placed, [1, 3], preferred=survivors)
    after = placed | moved
    assert Counter(s.leader for s in after.values()) == {1: 3, 3: 3}


def _states(leaders: dict[int, int], handover: dict[int, int] | None = None) -> dict[tuple[str, int], PartitionState]:
    handover = handover or {}
    return {("t", p): PartitionState(n, 3, handover.get(p)) for p, n in leaders.items()}


def test_an_election_moves_partitions_led_by_live_nodes_other_than_their_live_preferred_one() -> None:
    preferred = {("t", p): n for p, n in enumerate([1, 2, 3, 1, 2, 3])}
    current = _states({0: 1, 1: 1, 2: 3, 3: 3, 4: 9, 5: 3}, handover={5: 1})
    # t-1 and t-3 move; t-4's leader 9 is dead (the failover's); t-5 is being handed over already
    assert election_moves(current, preferred, {1, 2, 3}) == [("t", 1), ("t", 3)]
    assert election_moves(current, preferred, {1, 2, 3}, [("t", 3), ("t", 0)]) == [("t", 3)]
    assert election_moves(current, preferred, {1, 3}) == [("t", 3)]  # t-1's preferred leader is not live


def test_the_imbalance_check_moves_the_partitions_of_nodes_over_the_percentage() -> None:
    preferred = {("t", p): [1, 2, 3][p % 3] for p in range(30)}  # ten partitions each
    led = {p: [1, 2, 3][p % 3] for p in range(30)}
    led[1] = 1  # node 2 lacks one of its ten: 10 %, not over 10 %
    assert imbalanced(_states(led), preferred, {1, 2, 3}, 10) == []
    led[4] = 3  # now two of ten: 20 %
    assert imbalanced(_states(led), preferred, {1, 2, 3}, 10) == [("t", 1), ("t", 4)]
    assert imbalanced(_states(led), preferred, {1, 2, 3}, 20) == []
    back = {p: 1 if p % 3 == 1 else n for p, n in led.items()}  # a node that came back leads nothing
    assert len(imbalanced(_states(back), preferred, {1, 2, 3}, 10)) == 10


def test_a_partition_state_round_trips_through_its_znode_bytes() -> None:
    for state in (PartitionState(2, 7), PartitionState(2, 7, 3), PartitionState(2, 7, 3, drained=True)):
        assert PartitionState.from_json(state.to_json()) == state
    assert PartitionState(2, 7).to_json() == b'{"leader":2,"leader_epoch":7}'  # as before hand-overs existed
