"""The nemesis checker (bench/nemesis_check.py) on hand-written histories: each rule counts its anomaly, and only it.

Every history here is a clean one plus one fault of the kind a rule exists for; the clean one counts 0 everywhere,
so each test shows its rule can fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.nemesis_check import ANOMALIES, check, main

Op = dict[str, Any]


def op(
    kind: str, t0: float, t1: float, req: dict[str, Any], ok: bool = True, status: int | None = 200, **ans: Any
) -> Op:
    return {"op": kind, "proc": "p", "node": 1, "t0": t0, "t1": t1, "req": req, "ok": ok, "status": status, "ans": ans}


def produce(t0: float, values: list[str], offsets: list[int | None], topic: str = "t", partition: int = 0,
            acks: str = "all", ok: bool = True, status: int | None = 200) -> Op:  # fmt: skip
    records = [{"value": v, "partition": partition} for v in values]
    ans = {"offsets": [{"partition": partition, "offset": o} for o in offsets]} if ok else {}
    return op("produce", t0, t0 + 0.1, {"topic": topic, "acks": acks, "records": records}, ok, status, **ans)


def final(rows: list[tuple[int, int, str]], topic: str = "t") -> Op:
    return op("final", 1000, 1000, {"topic": topic}, records=[list(r) for r in rows])


def clean() -> list[Op]:
    """Two acknowledged writes, a consumer that joins, reads, commits and heartbeats, the final table."""
    return [
        op("setup", 0, 0, {"seed": 7}),
        produce(1, ["a", "b"], [0, 1]),
        produce(2, ["c"], [2], acks="1"),
        op("join", 3, 3.1, {"group": "g"}, member_id="m1", generation=1, assignment=[["t", 0]]),
        op("fetch", 4, 4.1, {"group": "g", "member_id": "m1"}, records=[["t", 0, 0, "a"], ["t", 0, 1, "b"]]),
        op("commit", 5, 5.1, {"group": "g", "member_id": "m1", "generation": 1, "offsets": [["t", 0, 2]]}, status=204),
        op("fetch", 6, 6.1, {"group": "g", "member_id": "m1"}, records=[["t", 0, 2, "c"]]),
        op("heartbeat", 7, 7.1, {"group": "g", "member_id": "m1"}, member_id="m1", generation=1, assignment=[["t", 0]]),
        op("group_offsets", 8, 8.1, {"group": "g"}, offsets=[["t", 0, 2]]),
        final([(0, 0, "a"), (0, 1, "b"), (0, 2, "c")]),
    ]


def counts(ops: list[Op]) -> dict[str, int]:
    result = check(ops)
    return {k: result[k] for k in ANOMALIES if result[k]}


def test_a_clean_history_has_no_anomaly() -> None:
    result = check(clean())
    assert {k: result[k] for k in ANOMALIES} == dict.fromkeys(ANOMALIES, 0)
    assert result["seed"] == 7 and result["acked"] == 3 and result["worst_unavailability_s"] is None


def test_an_acknowledged_record_missing_from_the_table_is_lost() -> None:
    ops = clean()
    ops[-1] = final([(0, 0, "a"), (0, 1, "b")])  # "c", acks=1, is gone
    assert counts(ops) == {"lost": 1}


def test_a_record_not_acknowledged_or_sent_with_acks_0_may_be_missing() -> None:
    ops = clean()
    ops[-1:-1] = [produce(9, ["x"], [], ok=False, status=None), produce(9, ["y"], [3], acks="0")]
    assert counts(ops) == {}


def test_records_of_a_deleted_incarnation_are_not_lost_but_the_new_incarnations_are() -> None:
    ops = clean()[:3]  # "a", "b", "c" in incarnation 0
    ops += [
        op("delete_topic", 10, 10.5, {"topic": "t"}, status=204),
        produce(10.2, ["during"], [0]),  # overlaps the window: not judged
        op("create_topic", 11, 11.5, {"topic": "t"}, status=201),
        produce(12, ["new"], [0]),
        final([(0, 0, "new")]),
    ]
    assert counts(ops) == {}
    ops[-1] = final([(0, 0, "other"), (0, 1, "x")])
    assert counts(ops) == {"lost": 1}


def test_a_value_stored_twice_is_a_duplicate() -> None:
    ops = clean()
    ops[-1] = final([(0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (0, 3, "b")])
    assert counts(ops) == {"duplicate": 1}


def test_an_acknowledged_record_at_another_offset_is_misplaced() -> None:
    ops = clean()
    ops[-1] = final([(0, 0, "b"), (0, 1, "a"), (0, 2, "c")])
    assert counts(ops) == {"misplaced": 2}


def test_an_acks_1_answer_without_an_offset_promises_no_place() -> None:
    ops = clean()
    ops[2] = produce(2, ["c"], [None], acks="1")
    assert counts(ops) == {}


def test_a_missing_offset_is_a_gap() -> None:
    ops = clean()
    ops[-1] = final([(0, 0, "a"), (0, 1, "b"), (0, 3, "c")])
    assert counts(ops) == {"gaps": 1, "misplaced": 1}


def test_two_records_at_one_offset_reuse_it() -> None:
    ops = clean()
    ops[-1] = final([(0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (0, 2, "d")])
    assert counts(ops) == {"reused_offsets": 1}


@pytest.mark.parametrize("status", [400, 409, 422])
def test_a_correct_producer_refused_is_counted(status: int) -> None:
    ops = clean()
    ops[-1:-1] = [produce(9, ["x"], [], ok=False, status=status)]
    assert counts(ops) == {"refused": 1}


def test_a_record_fetched_again_below_a_completed_commit_is_a_reread() -> None:
    ops = clean()
    again = op("fetch", 5.5, 5.6, {"group": "g", "member_id": "m1"}, records=[["t", 0, 1, "b"]])
    ops.insert(6, again)
    assert counts(ops) == {"reread_after_commit": 1}
    again["t0"] = 5.05  # began before the commit answered: at-least-once allows it
    assert counts(ops) == {}


def test_a_partition_held_by_two_members_at_once_has_two_owners() -> None:
    ops = clean()
    m2 = {"group": "g", "member_id": "m2"}
    ops += [
        op("join", 3.5, 3.6, {"group": "g"}, member_id="m2", generation=2, assignment=[["t", 0]]),
        op("heartbeat", 6.5, 6.6, m2, member_id="m2", generation=2, assignment=[["t", 0]]),
    ]
    assert counts(ops) == {"double_owner": 1}
    ops[-1]["ans"]["assignment"] = []  # m2 was told at once that it does not own it: no overlap is certain
    assert counts(ops) == {}


def test_a_committed_offset_seen_below_an_earlier_commit_moved_backwards() -> None:
    ops = clean()
    ops.insert(-1, op("group_offsets", 9, 9.1, {"group": "g"}, offsets=[["t", 0, 1]]))
    assert counts(ops) == {"commit_backwards": 1}


def test_unavailability_runs_from_a_failed_attempt_to_the_next_acknowledged_write() -> None:
    ops = clean()
    ops[-1:-1] = [
        produce(10, ["f1"], [], ok=False, status=503),
        produce(11, ["f2"], [], ok=False, status=None),
        produce(12, ["gone"], [], ok=False, status=404),  # the partition did not exist: not an outage
        produce(12, ["no"], [], ok=False, status=409),  # a refusal is counted as such, not as an outage
        produce(14.9, ["d"], [3]),
    ]
    ops[-1] = final([(0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (0, 3, "d")])
    result = check(ops)
    assert result["refused"] == 1
    assert result["worst_unavailability_s"] == pytest.approx(5.0) and result["worst_unavailability_at"] == [
        "t",
        0,
        10,
        15.0,
    ]
    ops.insert(-1, op("fault", 11, 13, {"kind": "cluster_down"}))  # the nemesis's own downtime is not counted
    assert check(ops)["worst_unavailability_s"] == pytest.approx(3.0)
    ops.insert(-1, op("idle", 13.5, 14.5, {}))  # nor a time no client wrote
    assert check(ops)["worst_unavailability_s"] == pytest.approx(2.0)


def test_a_partition_that_never_recovers_is_unavailable_until_the_end() -> None:
    ops = clean()
    ops[-1:-1] = [produce(10, ["f1"], [], ok=False, status=503), produce(30, ["x"], [0], partition=1)]
    ops[-1] = final([(0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (1, 0, "x")])
    assert check(ops)["worst_unavailability_s"] == pytest.approx(20.1)


def test_a_partition_of_a_deleted_incarnation_is_unavailable_only_until_the_delete() -> None:
    ops = clean()
    ops[-1:-1] = [
        produce(10, ["f1"], [], ok=False, status=503),
        op("delete_topic", 12, 12.5, {"topic": "t"}, status=204),
        op("create_topic", 13, 13.5, {"topic": "t", "partitions": 1}, status=201),
        produce(40, ["new"], [0]),  # the new incarnation's first write comes late: not the old one's outage
    ]
    ops[-1] = final([(0, 0, "new")])
    assert check(ops)["worst_unavailability_s"] == pytest.approx(2.0)


def test_the_command_line_checks_a_saved_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in clean()))
    assert main([str(path)]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["seed"] == 7 and all(line[k] == 0 for k in ANOMALIES)


def test_a_node_that_cannot_start_again_is_a_failed_restart() -> None:
    ops = clean()
    ops.insert(-1, op("fault", 9, 20, {"kind": "kill_node"}, ok=False, status=None))
    assert counts(ops) == {"restart_failed": 1}


def test_a_final_table_that_cannot_be_read_is_unreadable() -> None:
    ops = clean()
    ops[-1] = op("final", 1000, 1000, {"topic": "t"}, ok=False, status=None)
    assert counts(ops) == {"unreadable": 1}


def test_a_failed_delete_opens_a_window_that_a_create_finding_the_topic_closes() -> None:
    ops = clean()[:3]
    ops += [
        op("delete_topic", 10, 10.5, {"topic": "t"}, ok=False, status=500),
        op("create_topic", 11, 11.5, {"topic": "t"}, ok=False, status=409),
        produce(12, ["new"], [3]),
        final([(0, 0, "a"), (0, 1, "b"), (0, 2, "c")]),
    ]
    assert counts(ops) == {"lost": 1}  # after the window, in the last incarnation: judged


def probe(t0: float, status: int, principal: str = "User:probe-1") -> Op:
    """A produce sent with the probe principal's key (``--security``)."""
    ok = status == 200
    ans = {"offsets": [{"partition": 0, "offset": None}]} if ok else {}
    records = [{"value": f"probe-{t0}", "partition": 0}]
    req = {"topic": "t", "acks": "all", "principal": principal, "records": records}
    return op("produce", t0, t0 + 0.1, req, ok, status, **ans)


def test_a_probe_answered_against_a_change_older_than_the_bound_is_stale_authorization() -> None:
    ops = clean()
    grant = op("security_change", 10, 10.2, {"principal": "User:probe-1", "allowed": True}, status=None)
    revoke = op("security_change", 20, 20.2, {"principal": "User:probe-1", "allowed": False}, status=None)
    probes = [probe(10.5, 403), probe(16, 200), probe(21, 200), probe(26, 403)]  # each within the rules
    ops[-1:-1] = [grant, *probes, revoke]
    ops[-1]["ans"]["records"] += [[0, 3, "probe-16"], [0, 4, "probe-21"]]  # acknowledged probes are stored
    assert counts(ops) == {}
    assert check(ops)["worst_unavailability_s"] is None  # refusals by authorisation are not outages
    ops.insert(-1, probe(15.3, 403))  # granted 5.1 s before: every node must allow it by now
    ops.insert(-1, probe(25.3, 200))  # revoked 5.1 s before: every node must refuse it by now
    ops.insert(-1, probe(25.3, 503))  # says nothing of authorisation
    ops.insert(-1, probe(15.3, 403, principal="User:probe-2"))  # no change of its own: not judged
    assert check(ops)["stale_authorization"] == 2
