"""Cluster mode's per-partition fence in the writer: ``logstore.leader.<p>`` epochs in the Delta log.

Two leaders of one topic (different partitions) commit side by side without
fencing each other; a leader whose partition is claimed with a higher epoch is
fenced for that partition only and keeps its others; a lost race against a
commit on other partitions keeps the offsets planned.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest

from logstore.errors import FencedLeaderEpochError, NotLeaderOrFollowerError
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import AppendResult, ProducerBatch
from tests.support.helpers import assert_gap_free


def batch(parts: list[int], tag: str = "v", pid: str | None = None, seq: int | None = None) -> ProducerBatch:
    return ProducerBatch(input_table(parts, [f"{tag}{i}".encode() for i in range(len(parts))]), pid, seq)


def ok(result: object) -> AppendResult:
    assert isinstance(result, AppendResult), result
    return result


def leader_txns(store: LogStore, topic: str) -> list[dict[str, int]]:
    """Per commit, in version order, the ``logstore.leader.<p>`` epochs it carries."""
    log_dir = os.path.join(store.catalog.topic_path(topic), "_delta_log")
    out = []
    for name in sorted(n for n in os.listdir(log_dir) if n.endswith(".json")):
        with open(os.path.join(log_dir, name)) as f:
            actions = [json.loads(line) for line in f if line.strip()]
        out.append(
            {
                a["txn"]["appId"].removeprefix("logstore.leader."): a["txn"]["version"]
                for a in actions
                if "txn" in a and a["txn"]["appId"].startswith("logstore.leader.")
            }
        )
    return out


def test_two_leaders_of_one_topic_commit_side_by_side(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=4)
    a = TopicWriter(store.catalog, t, leader_epochs={})
    b = TopicWriter(store.catalog, t, leader_epochs={})
    a.claim({0: 0, 1: 0})
    b.claim({2: 0, 3: 0})
    for i in range(3):
        assert ok(a.append_held([batch([0, 1], f"a{i}")])[0]).offsets.to_pylist() == [i, i]
        assert ok(b.append_held([batch([2, 3, 3], f"b{i}")])[0]).offsets.to_pylist() == [i, 2 * i, 2 * i + 1]
    assert_gap_free(store.catalog, t)
    assert {"0": 0, "1": 0} in leader_txns(store, t) and {"2": 0, "3": 0} in leader_txns(store, t)


def test_a_writer_commits_only_the_partitions_it_leads(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    w = TopicWriter(store.catalog, t, leader_epochs={})
    w.claim({0: 3})
    result = w.append_held([batch([1])])[0]
    assert isinstance(result, NotLeaderOrFollowerError)
    assert ok(w.append_held([batch([0])])[0]).offsets.to_pylist() == [0]
    assert leader_txns(store, t)[-1] == {"0": 3}


def test_a_higher_epoch_fences_the_old_leader_for_that_partition_only(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    old = TopicWriter(store.catalog, t, leader_epochs={})
    old.claim({0: 0, 1: 0})
    ok(old.append_held([batch([0, 1])])[0])
    new = TopicWriter(store.catalog, t, leader_epochs={})
    new.claim({0: 1})
    with pytest.raises(FencedLeaderEpochError) as fenced:
        old.append_held([batch([0, 1], "late")])
    assert fenced.value.partitions == (0,)
    assert old.leader_epochs == {1: 0}
    # the zombie's other partition goes on; its commit of partition 0 never landed
    assert ok(old.append_held([batch([1], "p1")])[0]).offsets.to_pylist() == [1]
    assert ok(new.append_held([batch([0], "n")])[0]).offsets.to_pylist() == [1]
    epochs_of_0 = [c["0"] for c in leader_txns(store, t) if "0" in c]
    assert epochs_of_0 == sorted(epochs_of_0) == [0, 0, 1, 1]
    assert_gap_free(store.catalog, t)


def test_claiming_an_epoch_older_than_the_logs_is_refused(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    TopicWriter(store.catalog, t, leader_epochs={}).claim({0: 5})
    late = TopicWriter(store.catalog, t, leader_epochs={})
    with pytest.raises(FencedLeaderEpochError) as refused:
        late.claim({0: 4, 1: 0})
    assert refused.value.partitions == (0,)
    assert late.leader_epochs == {}


def test_a_race_lost_to_other_partitions_keeps_its_files_and_offsets(
    store: LogStore, make_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make_topic(partitions=2)
    a = TopicWriter(store.catalog, t, leader_epochs={})
    b = TopicWriter(store.catalog, t, leader_epochs={})
    a.claim({0: 0})
    b.claim({1: 0})
    write_files = a._appender.write_files
    won: list[int] = []

    def then_b_commits(records, compression):  # type: ignore[no-untyped-def]
        files = write_files(records, compression)
        if not won:  # once: the version a is about to create
            won.append(ok(b.append_held([batch([1, 1])])[0]).table_version)
        won.append(-1)
        return files

    monkeypatch.setattr(a._appender, "write_files", then_b_commits)
    result = ok(a.append_held([batch([0])])[0])
    assert result.offsets.to_pylist() == [0]
    assert result.table_version == won[0] + 1
    assert len(won) == 2  # files written once: no re-plan
    assert len(os.listdir(os.path.join(store.catalog.topic_path(t), "partition=0"))) == 1  # written once
    assert_gap_free(store.catalog, t)


def test_a_race_lost_to_a_replay_on_other_partitions_still_learns_their_offsets(
    store: LogStore, make_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make_topic(partitions=2)
    a = TopicWriter(store.catalog, t, leader_epochs={})
    replayer = TopicWriter(store.catalog, t, leader_epochs={})
    a.claim({0: 0})
    write_files = a._appender.write_files
    raced: list[int] = []

    def then_a_replay_commits(records, compression):  # type: ignore[no-untyped-def]
        files = write_files(records, compression)
        if not raced:  # a departed node's frame of partition 1, committed with no leader epoch
            raced.append(ok(replayer.append_foreign([batch([1, 1])])[0]).table_version)
        return files

    monkeypatch.setattr(a._appender, "write_files", then_a_replay_commits)
    ok(a.append_held([batch([0])])[0])
    assert a.high_watermark(1) == 2  # else, once a leads partition 1, it would reuse offsets 0 and 1
    a.claim({1: 0})
    assert ok(a.append_held([batch([1])])[0]).offsets.to_pylist() == [2]
    assert_gap_free(store.catalog, t)


def test_a_claim_of_the_logs_epoch_succeeds_only_for_the_node_that_holds_it(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=2)
    holder = TopicWriter(store.catalog, t, leader_epochs={}, node_id=1)
    holder.claim({0: 3, 1: 3})
    ok(holder.append_held([batch([0, 1])])[0])
    rival = TopicWriter(store.catalog, t, leader_epochs={}, node_id=2)
    with pytest.raises(FencedLeaderEpochError) as refused:
        rival.claim({0: 3})
    assert refused.value.partitions == (0,)
    assert rival.leader_epochs == {}
    # the holder goes on; the same node opening the topic again (a restart) claims its epoch again
    ok(holder.append_held([batch([0])])[0])
    again = TopicWriter(store.catalog, t, leader_epochs={}, node_id=1)
    again.claim({0: 3})
    assert again.leader_epochs == {0: 3}
    # a higher epoch is another node's to take
    rival.claim({0: 4})
    assert rival.leader_epochs == {0: 4}
    assert_gap_free(store.catalog, t)


def test_a_claim_that_loses_the_race_to_another_nodes_claim_of_the_same_epoch_is_fenced(
    store: LogStore, make_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make_topic(partitions=1)
    loser = TopicWriter(store.catalog, t, leader_epochs={}, node_id=2)
    winner = TopicWriter(store.catalog, t, leader_epochs={}, node_id=1)
    catch_up = loser._log.catch_up

    def then_the_winner_claims() -> None:  # the loser has read the log; the winner commits first
        catch_up()
        if not winner.leader_epochs:
            winner.claim({0: 5})

    monkeypatch.setattr(loser._log, "catch_up", then_the_winner_claims)
    with pytest.raises(FencedLeaderEpochError):
        loser.claim({0: 5})
    assert winner.leader_epochs == {0: 5} and loser.leader_epochs == {}


def test_a_claim_that_names_no_node_leaves_its_epoch_claimable_again(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    """Logs written before claims named their node: the epoch there is claimable again, as before."""
    t = make_topic(partitions=1)
    TopicWriter(store.catalog, t, leader_epochs={}).claim({0: 2})
    later = TopicWriter(store.catalog, t, leader_epochs={}, node_id=7)
    later.claim({0: 2})
    assert later.leader_epochs == {0: 2}
    with pytest.raises(FencedLeaderEpochError):
        TopicWriter(store.catalog, t, leader_epochs={}, node_id=8).claim({0: 2})
