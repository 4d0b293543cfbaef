"""Which node coordinates a consumer group in a cluster: rendezvous hashing over the live nodes."""

from __future__ import annotations

from collections import Counter

from logstore.cluster.placement import group_coordinator

GROUPS = [f"group-{i}" for i in range(600)]


def test_embedded_or_empty_cluster_has_no_coordinator() -> None:
    assert group_coordinator("g", []) is None


def test_the_coordinator_is_deterministic_and_independent_of_order() -> None:
    for g in GROUPS[:50]:
        assert group_coordinator(g, [1, 2, 3]) == group_coordinator(g, [3, 1, 2]) == group_coordinator(g, {2, 3, 1})


def test_groups_spread_over_the_live_nodes() -> None:
    load = Counter(group_coordinator(g, [1, 2, 3]) for g in GROUPS)
    assert set(load) == {1, 2, 3}
    assert min(load.values()) > len(GROUPS) / 3 * 0.7


def test_only_the_departed_nodes_groups_move() -> None:
    before = {g: group_coordinator(g, [1, 2, 3, 4]) for g in GROUPS}
    after = {g: group_coordinator(g, [1, 2, 4]) for g in GROUPS}
    moved = {g for g in GROUPS if before[g] != after[g]}
    assert moved == {g for g in GROUPS if before[g] == 3}
    assert all(after[g] in (1, 2, 4) for g in moved)


def test_a_returning_node_takes_back_exactly_its_groups() -> None:
    without = {g: group_coordinator(g, [1, 2]) for g in GROUPS}
    with_3 = {g: group_coordinator(g, [1, 2, 3]) for g in GROUPS}
    assert {g for g in GROUPS if without[g] != with_3[g]} == {g for g in GROUPS if with_3[g] == 3}
