"""Consumer groups with members over HTTP (docs/design.md §9), against a real `logstore serve`."""

from __future__ import annotations

import base64
import random
import time
from collections.abc import Callable
from typing import Any

import httpx
import pyarrow as pa
import pytest

from logstore.errors import GroupSubscribedToTopicError
from logstore.groups.leases import GroupLease
from logstore.wire.arrow_fetch import ARROW_STREAM, MEMBER_RECORDS_SCHEMA
from tests.support.server import Server

StartServer = Callable[..., Server]


def create(c: httpx.Client, name: str, partitions: int) -> None:
    r = c.post("/v1/topics", json={"name": name, "partitions": partitions})
    assert r.status_code == 201, r.text


def produce_each(c: httpx.Client, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    records = [
        {"partition": p, "value": f"{p}:{i}"} for p in range(partitions) for i in range(start, start + per_partition)
    ]
    r = c.post(f"/v1/topics/{topic}/records", json={"records": records})
    assert r.status_code == 200, r.text


def join(c: httpx.Client, group: str, topics: list[str], **extra: Any) -> dict[str, Any]:
    r = c.post(f"/v1/groups/{group}/members", json={"topics": topics, **extra})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def heartbeat(c: httpx.Client, group: str, member: str) -> dict[str, Any]:
    r = c.post(f"/v1/groups/{group}/members/{member}/heartbeat")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def owned(state: dict[str, Any]) -> set[tuple[str, int]]:
    return {(a["topic"], a["partition"]) for a in state["assignment"]}


def error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["error_code"] == code, r.text


def settle(c: httpx.Client, group: str, members: list[str], want: int, timeout_s: float = 10) -> dict[str, Any]:
    """Heartbeat every member (each acknowledges what it was last told) until they own ``want`` partitions."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = {m: heartbeat(c, group, m) for m in members}
        union = [tp for s in states.values() for tp in owned(s)]
        assert len(union) == len(set(union)), "a partition has two owners"
        if len(union) == want or time.monotonic() > deadline:
            return states


def test_three_members_share_twelve_partitions_then_two_take_over_a_silent_ones(server: StartServer) -> None:
    c = server().client()
    create(c, "t", 12)
    produce_each(c, "t", 12, 5)
    ms = [join(c, "g", ["t"], session_timeout_ms=1500, **{"auto.offset.reset": "earliest"}) for _ in range(3)]
    ids = [m["member_id"] for m in ms]
    states = settle(c, "g", ids, 12)
    assert sorted(len(owned(s)) for s in states.values()) == [4, 4, 4]
    assert set().union(*(owned(s) for s in states.values())) == {("t", p) for p in range(12)}

    # each member reads its partitions and commits 3 of the 5 records of each
    for m in ids:
        got = c.get(f"/v1/groups/g/members/{m}/records", params={"max_records": 1000}).json()["records"]
        assert {(r["topic"], r["partition"]) for r in got} == owned(states[m])
        offs = [{"topic": "t", "partition": p, "offset": 3} for _, p in owned(states[m])]
        r = c.post(f"/v1/groups/g/members/{m}/offsets", json={"generation": states[m]["generation"], "offsets": offs})
        assert r.status_code == 204, r.text

    silent, alive = ids[0], ids[1:]
    silent_gen = states[silent]["generation"]
    silent_parts = owned(states[silent])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = {m: heartbeat(c, "g", m) for m in alive}
        union = [tp for s in states.values() for tp in owned(s)]
        assert len(union) == len(set(union))
        if len(union) == 12:
            break
        time.sleep(0.2)
    assert sorted(len(owned(s)) for s in states.values()) == [6, 6]

    # the survivors resume from the last commits: offsets 3 and 4 of every partition, nothing else
    seen: dict[int, list[int]] = {}
    for m in alive:
        for r in c.get(f"/v1/groups/g/members/{m}/records", params={"max_records": 1000}).json()["records"]:
            seen.setdefault(r["partition"], []).append(r["offset"])
    for _, p in silent_parts:
        assert seen[p] == [3, 4]

    # the replaced member is fenced: its late commit is refused, its heartbeat tells it to join again
    late = {"generation": silent_gen, "offsets": [{"topic": "t", "partition": p, "offset": 5} for _, p in silent_parts]}
    error(c.post(f"/v1/groups/g/members/{silent}/offsets", json=late), 409, "ILLEGAL_GENERATION")
    error(c.post(f"/v1/groups/g/members/{silent}/heartbeat"), 404, "UNKNOWN_MEMBER_ID")
    error(c.post("/v1/groups/g/members/member-never/offsets", json=late), 404, "UNKNOWN_MEMBER_ID")
    committed = {p["partition"]: p["committed_offset"] for p in c.get("/v1/groups/g").json()["topics"][0]["partitions"]}
    assert all(committed[p] == 3 for _, p in silent_parts)


def test_stale_generation_commit_is_409_and_describe_shows_members(server: StartServer) -> None:
    c = server().client()
    create(c, "t", 4)
    a = join(c, "g", ["t"])
    b = join(c, "g", ["t"])
    a_now = settle(c, "g", [a["member_id"], b["member_id"]], 4)[a["member_id"]]
    assert a_now["generation"] != a["generation"]  # a gave up partitions to b
    body = {"generation": a["generation"], "offsets": [{"topic": "t", "partition": 0, "offset": 0}]}
    error(c.post(f"/v1/groups/g/members/{a['member_id']}/offsets", json=body), 409, "ILLEGAL_GENERATION")
    described = c.get("/v1/groups/g").json()
    assert {m["member_id"]: m["generation"] for m in described["members"]} == {
        a["member_id"]: a_now["generation"],
        b["member_id"]: heartbeat(c, "g", b["member_id"])["generation"],
    }
    assert sum(len(m["assignment"]) for m in described["members"]) == 4
    # leave: the other member gets everything at once
    assert c.delete(f"/v1/groups/g/members/{b['member_id']}").status_code == 204
    assert len(heartbeat(c, "g", a["member_id"])["assignment"]) == 4
    error(
        c.post("/v1/groups/g/members", json={"topics": ["t"], "assignor": "roundrobin"}),
        409,
        "INCONSISTENT_GROUP_PROTOCOL",
    )
    error(c.post("/v1/groups/g/members", json={"topics": ["nope"]}), 404, "UNKNOWN_TOPIC_OR_PARTITION")


def test_long_poll_and_round_robin_over_partitions(server: StartServer) -> None:
    c = server().client()
    create(c, "t", 3)
    m = join(c, "g", ["t"], **{"auto.offset.reset": "earliest"})["member_id"]
    produce_each(c, "t", 3, 10)
    firsts = []
    for _ in range(3):
        got = c.get(f"/v1/groups/g/members/{m}/records", params={"max_records": 2}).json()["records"]
        assert len(got) == 2
        firsts.append(got[0]["partition"])
    assert sorted(firsts) == [0, 1, 2]  # each partition leads a fetch in turn: none starves
    started = time.monotonic()
    r = c.get(f"/v1/groups/g/members/{m}/records", params={"max_records": 100, "wait_ms": 300})
    assert len(r.json()["records"]) == 30 - 6
    r = c.get(f"/v1/groups/g/members/{m}/records", params={"max_records": 100, "wait_ms": 300})
    assert r.json()["records"] == [] and time.monotonic() - started >= 0.3


def test_cooperative_sticky_over_http_never_two_owners_never_revokes_unmoved(server: StartServer) -> None:
    c = server().client()
    create(c, "t", 10)
    rng = random.Random(7)
    members: list[str] = []
    last: dict[str, set[tuple[str, int]]] = {}
    for _step in range(20):
        if members and (len(members) > 4 or rng.random() < 0.4):
            gone = members.pop(rng.randrange(len(members)))
            assert c.delete(f"/v1/groups/g/members/{gone}").status_code == 204
            last.pop(gone)
        else:
            s = join(c, "g", ["t"], assignor="cooperative-sticky")
            members.append(s["member_id"])
            last[s["member_id"]] = owned(s)
        for _ in range(4):  # a few heartbeat rounds: revocations acknowledged, partitions handed over
            for m in members:
                now = owned(heartbeat(c, "g", m))
                described = c.get("/v1/groups/g").json()["members"]
                everyone = [(a["topic"], a["partition"]) for d in described for a in d["assignment"]]
                assert len(everyone) == len(set(everyone)), "a partition has two owners"
                if now < last[m] or not (last[m] <= now):
                    # a revocation: only from a member above its share of the group
                    assert len(last[m]) > 10 // len(members)
                last[m] = now
    assert sum(len(v) for v in last.values()) == 10


def test_http_members_and_a_spark_group_reader_exclude_each_other(server: StartServer, tmp_path: Any) -> None:
    srv = server()
    c = srv.client()
    create(c, "t", 2)
    m = join(c, "g", ["t"])["member_id"]
    other = GroupLease(str(srv.root), "g")  # what a Spark query with group=g takes
    with pytest.raises(GroupSubscribedToTopicError):
        other.acquire(["t"])
    assert c.delete(f"/v1/groups/g/members/{m}").status_code == 204
    other.acquire(["t"])  # released when the last member left
    try:
        error(c.post("/v1/groups/g/members", json={"topics": ["t"]}), 409, "GROUP_SUBSCRIBED_TO_TOPIC")
    finally:
        other.release()
    join(c, "g", ["t"])


def test_offsets_of_a_group_with_live_members_move_only_through_its_members(server: StartServer) -> None:
    c = server().client()
    create(c, "t", 1)
    m = join(c, "g", ["t"])["member_id"]
    error(c.post("/v1/groups/g/offsets", json={"topic": "t", "partitions": {"0": 0}}), 404, "UNKNOWN_MEMBER_ID")
    error(c.post("/v1/groups/g/reset", json={"topic": "t", "to": "earliest"}), 404, "UNKNOWN_MEMBER_ID")
    assert c.get("/v1/groups").json() == {"groups": ["g"]}
    assert c.delete(f"/v1/groups/g/members/{m}").status_code == 204
    assert c.post("/v1/groups/g/reset", json={"topic": "t", "to": "earliest"}).status_code == 200


def test_a_topic_that_gains_partitions_rebalances_and_the_new_ones_get_owners(server: StartServer) -> None:
    c = server().client()
    create(c, "t", 4)
    ids = [join(c, "g", ["t"], **{"auto.offset.reset": "earliest"})["member_id"] for _ in range(2)]
    assert sorted(len(owned(s)) for s in settle(c, "g", ids, 4).values()) == [2, 2]
    r = c.patch("/v1/topics/t", json={"partitions": 6})
    assert r.status_code == 200, r.text
    produce_each(c, "t", 6, 1)
    states = settle(c, "g", ids, 6)  # the node's sweep sees the new count and rebalances; no member rejoins
    assert set().union(*(owned(s) for s in states.values())) == {("t", p) for p in range(6)}
    assert sorted(len(owned(s)) for s in states.values()) == [3, 3]
    got = {
        r["partition"]
        for m in ids
        for r in c.get(f"/v1/groups/g/members/{m}/records", params={"max_records": 100}).json()["records"]
    }
    assert got == set(range(6))


def test_a_member_that_heartbeats_but_never_fetches_is_removed_after_max_poll_interval(server: StartServer) -> None:
    c = server().client()
    create(c, "t", 2)
    idle = join(c, "g", ["t"], **{"max.poll.interval.ms": 400})["member_id"]
    busy = join(c, "g", ["t"], **{"max.poll.interval.ms": 60_000})["member_id"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = c.post(f"/v1/groups/g/members/{idle}/heartbeat")
        if r.status_code != 200:
            break
        c.get(f"/v1/groups/g/members/{busy}/records").raise_for_status()
    error(r, 404, "UNKNOWN_MEMBER_ID")
    assert "max.poll.interval.ms=400" in r.json()["message"]
    assert owned(settle(c, "g", [busy], 2)[busy]) == {("t", 0), ("t", 1)}
    r = c.post("/v1/groups/g/members", json={"topics": ["t"], "max.poll.interval.ms": 0})
    error(r, 422, "INVALID_REQUEST")


def test_member_fetch_in_arrow_form_when_asked_json_otherwise(server: StartServer) -> None:
    c = server().client()
    create(c, "t", 2)
    raw = bytes([0xFF, 0x00, 0x80])  # not UTF-8: JSON must base64 it, Arrow sends it as is
    records = [
        {"partition": 0, "key": "k", "value": {"b64": base64.b64encode(raw).decode()}, "timestamp": 1_000},
        {"partition": 1, "value": "plain", "headers": [{"key": "h", "value": "1"}, {"key": "h", "value": "2"}]},
        {"partition": 1, "value": None},
    ]
    r = c.post("/v1/topics/t/records", json={"records": records})
    assert r.status_code == 200, r.text
    m = join(c, "g", ["t"], **{"auto.offset.reset": "earliest"})["member_id"]
    r = c.get(f"/v1/groups/g/members/{m}/records", headers={"Accept": ARROW_STREAM})
    assert r.status_code == 200 and r.headers["content-type"] == ARROW_STREAM
    table = pa.ipc.open_stream(r.content).read_all()
    assert table.schema == MEMBER_RECORDS_SCHEMA
    rows = sorted(table.to_pylist(), key=lambda x: (x["partition"], x["offset"]))
    assert [(x["topic"], x["partition"], x["offset"], x["key"], x["value"]) for x in rows] == [
        ("t", 0, 0, b"k", raw),
        ("t", 1, 0, None, b"plain"),
        ("t", 1, 1, None, None),
    ]
    assert rows[0]["timestamp"].timestamp() == 1.0
    assert rows[1]["headers"] == [{"key": "h", "value": b"1"}, {"key": "h", "value": b"2"}]
    # the position moved: nothing more, still a stream with the schema
    empty = pa.ipc.open_stream(c.get(f"/v1/groups/g/members/{m}/records", headers={"Accept": ARROW_STREAM}).content)
    assert empty.read_all().num_rows == 0 and empty.schema == MEMBER_RECORDS_SCHEMA
    # JSON stays the default
    other = join(c, "h", ["t"], **{"auto.offset.reset": "earliest"})["member_id"]
    r = c.get(f"/v1/groups/h/members/{other}/records")
    assert r.headers["content-type"] == "application/json"
    assert [x["value"] for x in sorted(r.json()["records"], key=lambda x: (x["partition"], x["offset"]))] == [
        {"b64": "/wCA"},
        "plain",
        None,
    ]
