"""Partition assignors: Kafka's documented distributions, exactly, and cooperative-sticky's guarantees."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.errors import InvalidRequestError
from logstore.groups.assignors import Assignment, assign, cooperative_sticky, range_assign, roundrobin
from logstore.structs import TopicPartition as TP


def tps(spec: str) -> list[TP]:
    """``"t0p0 t1p2"`` → partitions (Kafka's javadoc notation)."""
    out = []
    for item in spec.split():
        topic, _, p = item.rpartition("p")
        out.append(TP(topic, int(p)))
    return sorted(out)


def test_range_matches_kafkas_javadoc_example() -> None:
    # RangeAssignor javadoc: two consumers, two topics of three partitions each.
    got = range_assign({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}, {"t0": 3, "t1": 3})
    assert got == {"C0": tps("t0p0 t0p1 t1p0 t1p1"), "C1": tps("t0p2 t1p2")}


def test_range_gives_extras_to_the_first_members_per_topic() -> None:
    got = range_assign({"b": ["t"], "a": ["t"], "c": ["t"]}, {"t": 8})
    assert got == {"a": tps("tp0 tp1 tp2"), "b": tps("tp3 tp4 tp5"), "c": tps("tp6 tp7")}


def test_roundrobin_matches_kafkas_javadoc_example_same_subscriptions() -> None:
    got = roundrobin({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}, {"t0": 3, "t1": 3})
    assert got == {"C0": tps("t0p0 t0p2 t1p1"), "C1": tps("t0p1 t1p0 t1p2")}


def test_roundrobin_matches_kafkas_javadoc_example_different_subscriptions() -> None:
    subs = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    got = roundrobin(subs, {"t0": 1, "t1": 2, "t2": 3})
    assert got == {"C0": tps("t0p0"), "C1": tps("t1p0"), "C2": tps("t1p1 t2p0 t2p1 t2p2")}


def test_unknown_assignor_is_rejected_by_name() -> None:
    with pytest.raises(InvalidRequestError, match="range, roundrobin, cooperative-sticky"):
        assign("sticky", {"a": ["t"]}, {"t": 1})


@pytest.mark.parametrize("name", ["range", "roundrobin", "cooperative-sticky"])
def test_every_partition_goes_to_exactly_one_subscriber(name: str) -> None:
    subs = {"a": ["x", "y"], "b": ["y"], "c": ["x", "z"]}
    counts = {"x": 5, "y": 4, "z": 3}
    got = assign(name, subs, counts)
    owners: dict[TP, str] = {}
    for m, parts in got.items():
        for tp in parts:
            assert tp.topic in subs[m]
            assert tp not in owners
            owners[tp] = m
    assert set(owners) == {TP(t, p) for t, n in counts.items() for p in range(n)}


def _balanced(a: Assignment) -> bool:
    sizes = [len(v) for v in a.values()]
    return not sizes or max(sizes) - min(sizes) <= 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7)), min_size=20, max_size=20), st.integers(1, 24))
def test_cooperative_sticky_is_balanced_and_moves_only_what_balance_forces(
    steps: list[tuple[bool, int]], partitions: int
) -> None:
    """20 random joins and leaves: balanced after each, every partition owned once, and a member that
    stays loses partitions only when it held more than its share of the new group."""
    members: set[str] = {"m0"}
    current: Assignment = cooperative_sticky({"m0": ["t"]}, {"t": partitions}, {})
    for join, who in steps:
        name = f"m{who}"
        if join:
            members.add(name)
        elif len(members) > 1:
            members.discard(name)
        subs = {m: ["t"] for m in members}
        new = cooperative_sticky(subs, {"t": partitions}, current)
        assert _balanced(new)
        assert sorted(tp for v in new.values() for tp in v) == [TP("t", p) for p in range(partitions)]
        floor = partitions // len(members)
        for m in members & set(current):
            lost = set(current[m]) - set(new[m])
            if lost:  # moved only because it held more than its share, and it gains nothing meanwhile
                assert len(current[m]) > floor
                assert len(new[m]) >= floor
                assert set(new[m]) <= set(current[m])
        current = new


def test_cooperative_sticky_keeps_owners_when_a_member_joins() -> None:
    before = cooperative_sticky({"a": ["t"], "b": ["t"]}, {"t": 6}, {})
    after = cooperative_sticky({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 6}, before)
    assert all(set(after[m]) <= set(before[m]) for m in ("a", "b"))
    assert [len(after[m]) for m in ("a", "b", "c")] == [2, 2, 2]


def test_cooperative_sticky_seeded_loop_with_mixed_subscriptions() -> None:
    rng = random.Random(12)
    counts = {"x": 7, "y": 5}
    subs: dict[str, list[str]] = {}
    current: Assignment = {}
    for step in range(20):
        if subs and rng.random() < 0.4:
            subs.pop(rng.choice(sorted(subs)))
        else:
            subs[f"m{step}"] = rng.choice([["x"], ["y"], ["x", "y"]])
        new = cooperative_sticky(subs, counts, current)
        owners = [tp for v in new.values() for tp in v]
        assert len(owners) == len(set(owners))
        wanted = {TP(t, p) for ts in subs.values() for t in ts for p in range(counts[t])}
        assert set(owners) == wanted
        current = new
