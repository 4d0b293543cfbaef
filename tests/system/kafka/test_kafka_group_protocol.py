"""The classic group protocol's rules, frame by frame: generations, member ids, rebalance and session timeouts,
static members, and one door per group — each broken rule answered with Kafka's error."""

from __future__ import annotations

import concurrent.futures
import io
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from kafka_api.protocol import build
from tests.support.server import Server, free_port

NONE, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID = 0, 22, 23, 25
INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID = 26, 27, 79, 82
JOIN, HEARTBEAT, LEAVE, SYNC, COMMIT, DESCRIBE = (11, 5), (12, 3), (13, 3), (14, 3), (8, 7), (15, 4)
"""(API key, version): versions without tagged fields, so that header v1 frames them."""


def _call(bootstrap: str, api: tuple[int, int], body: dict[str, Any], timeout: float = 30) -> Any:
    """One request on its own connection; its response as ``kio`` reads it."""
    key, version = api
    out = io.BytesIO()
    entity_writer(RequestHeader)(
        out, RequestHeader(request_api_key=key, request_api_version=version, correlation_id=1, client_id="raw")
    )
    entity_writer(load_request_schema(key, version))(out, build(load_request_schema(key, version), body))
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", out.tell()) + out.getvalue())
        (size,) = struct.unpack(">i", _read(sock, 4))
        frame = _read(sock, size)
    response, _ = entity_reader(load_response_schema(key, version))(frame, 4)
    return response


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the connection closed"
        data += chunk
    return data


def _subscription(*topics: str) -> bytes:
    """A ``ConsumerProtocolSubscription`` v0: the topics, no user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def _join_once(bootstrap: str, group: str, member_id: str = "", *, topic: str = "t", **extra: Any) -> Any:
    body = {
        "group_id": group,
        "session_timeout": 6000,
        "rebalance_timeout": 6000,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": _subscription(topic)}],
    } | extra
    return _call(bootstrap, JOIN, body)


def _join(bootstrap: str, group: str, member_id: str = "", **extra: Any) -> Any:
    """JoinGroup as a client does it: a new dynamic member joins again with the id MEMBER_ID_REQUIRED gave it."""
    answer = _join_once(bootstrap, group, member_id, **extra)
    if answer.error_code == MEMBER_ID_REQUIRED:
        answer = _join_once(bootstrap, group, answer.member_id, **extra)
    return answer


def _sync(
    bootstrap: str, group: str, generation: int, member_id: str, assignments: dict[str, bytes], **extra: Any
) -> Any:
    body = {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": None}
    body["assignments"] = [{"member_id": m, "assignment": a} for m, a in assignments.items()]
    return _call(bootstrap, SYNC, body | extra)


def _heartbeat(bootstrap: str, group: str, generation: int, member_id: str, instance_id: str | None = None) -> int:
    body = {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": instance_id}
    return int(_call(bootstrap, HEARTBEAT, body).error_code)


def _commit(bootstrap: str, group: str, generation: int, member_id: str, offset: int = 1) -> int:
    partitions = [{"partition_index": 0, "committed_offset": offset, "committed_metadata": None}]
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": member_id,
        "group_instance_id": None,
        "topics": [{"name": "t", "partitions": partitions}],
    }
    (topic,) = _call(bootstrap, COMMIT, body).topics
    return int(topic.partitions[0].error_code)


def _state(bootstrap: str, group: str) -> Any:
    (described,) = _call(bootstrap, DESCRIBE, {"groups": [group], "include_authorized_operations": False}).groups
    return described


def _until(check: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _started(server: Callable[..., Server], initial_delay_ms: int = 0) -> tuple[Server, str]:
    port = free_port()
    s = server(listeners=f"PLAINTEXT://127.0.0.1:{port}", **{"group.initial.rebalance.delay.ms": initial_delay_ms})
    with s.client() as http:
        assert http.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code in (200, 201)
        records = [{"value": str(i), "partition": 0} for i in range(10)]
        assert http.post("/v1/topics/t/records", json={"records": records}).status_code == 200
    return s, f"127.0.0.1:{port}"


def test_wrong_generation_unknown_member_rebalance_and_session_timeout_get_kafkas_errors(
    server: Callable[..., Server],
) -> None:
    _, bootstrap = _started(server)
    first = _join(bootstrap, "g")
    assert (first.error_code, first.generation_id, first.leader) == (NONE, 1, first.member_id)
    assert [m.member_id for m in first.members] == [first.member_id]  # the leader gets every subscription
    m1 = first.member_id
    synced = _sync(bootstrap, "g", 1, m1, {m1: b"assignment-1"})
    assert (synced.error_code, synced.assignment) == (NONE, b"assignment-1")
    assert _state(bootstrap, "g").group_state == "Stable"

    assert _heartbeat(bootstrap, "g", 1, m1) == NONE
    assert _heartbeat(bootstrap, "g", 2, m1) == ILLEGAL_GENERATION
    assert _heartbeat(bootstrap, "g", 1, "nobody") == UNKNOWN_MEMBER_ID
    assert _sync(bootstrap, "g", 7, m1, {}).error_code == ILLEGAL_GENERATION
    assert _commit(bootstrap, "g", 1, m1, offset=1) == NONE
    assert _commit(bootstrap, "g", 0, m1, offset=2) == ILLEGAL_GENERATION
    assert _commit(bootstrap, "g", 1, "nobody", offset=2) == UNKNOWN_MEMBER_ID
    assert _commit(bootstrap, "g", -1, "", offset=2) == UNKNOWN_MEMBER_ID  # no simple commit into a live group
    assert _join(bootstrap, "g", protocol_type="connect").error_code == INCONSISTENT_GROUP_PROTOCOL
    assert _join(bootstrap, "g", session_timeout=1000).error_code == INVALID_SESSION_TIMEOUT

    # A second member joins: the group rebalances; m1 learns it by heartbeat and, silent, is dropped after
    # rebalance.timeout.ms; the newcomer completes the next generation alone, as leader.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        second = pool.submit(_join, bootstrap, "g")
        _until(lambda: _heartbeat(bootstrap, "g", 1, m1) == REBALANCE_IN_PROGRESS, "m1 to see the rebalance")
        assert _commit(bootstrap, "g", 1, m1, offset=3) == NONE  # its generation still holds until it is over
        started = time.monotonic()
        joined = second.result(timeout=30)
    assert 4 < time.monotonic() - started < 10  # rebalance.timeout.ms=6000 from the join
    assert (joined.error_code, joined.generation_id, joined.leader) == (NONE, 2, joined.member_id)
    assert [m.member_id for m in joined.members] == [joined.member_id]
    assert _heartbeat(bootstrap, "g", 1, m1) == UNKNOWN_MEMBER_ID
    assert _commit(bootstrap, "g", 1, m1, offset=4) == UNKNOWN_MEMBER_ID
    m2 = joined.member_id
    assert _commit(bootstrap, "g", 2, m2, offset=5) == REBALANCE_IN_PROGRESS  # no assignment yet
    assert _sync(bootstrap, "g", 2, m2, {m2: b"all"}).assignment == b"all"

    # m2 goes silent: after session.timeout.ms (6 s) it is removed and the group is Empty.
    silent = time.monotonic()
    _until(lambda: _state(bootstrap, "g").group_state == "Empty", "the silent member's session to expire")
    assert time.monotonic() - silent > 5
    assert _heartbeat(bootstrap, "g", 2, m2) == UNKNOWN_MEMBER_ID
    assert _commit(bootstrap, "g", -1, "", offset=6) == NONE  # an empty group takes simple commits again


def test_a_new_member_gets_its_id_first_and_only_joining_with_it_makes_it_a_member(
    server: Callable[..., Server],
) -> None:
    _, bootstrap = _started(server)
    first = _join_once(bootstrap, "fresh")
    assert (first.error_code, first.member_id.startswith("raw-")) == (MEMBER_ID_REQUIRED, True)
    assert _state(bootstrap, "fresh").members == ()  # nothing left behind if the client never comes back
    assert _join_once(bootstrap, "fresh", "raw-invented").error_code == UNKNOWN_MEMBER_ID
    joined = _join_once(bootstrap, "fresh", first.member_id)
    assert (joined.error_code, joined.member_id, joined.generation_id) == (NONE, first.member_id, 1)
    static = _join_once(bootstrap, "fresh-static", group_instance_id="w")  # static members join at once
    assert (static.error_code, static.generation_id) == (NONE, 1)


def test_a_leave_rebalances_at_once_and_describe_shows_members_and_assignments(server: Callable[..., Server]) -> None:
    _, bootstrap = _started(server, initial_delay_ms=1500)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # both in the first rebalance's initial delay
        started = time.monotonic()
        a, b = pool.submit(_join, bootstrap, "pair"), pool.submit(_join, bootstrap, "pair")
        ja, jb = a.result(timeout=30), b.result(timeout=30)
    assert time.monotonic() - started > 1.4  # group.initial.rebalance.delay.ms waited for more members
    assert ja.generation_id == jb.generation_id == 1
    leader, follower = (ja, jb) if ja.leader == ja.member_id else (jb, ja)
    assert sorted(m.member_id for m in leader.members) == sorted([ja.member_id, jb.member_id])
    assert follower.members == ()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_sync, bootstrap, "pair", 1, follower.member_id, {})
        plan = {leader.member_id: b"p0", follower.member_id: b"p1"}
        assert _sync(bootstrap, "pair", 1, leader.member_id, plan).assignment == b"p0"
        assert waiting.result(timeout=30).assignment == b"p1"  # the follower waited for the leader's plan
    described = _state(bootstrap, "pair")
    assert (described.group_state, described.protocol_type, described.protocol_data) == ("Stable", "consumer", "range")
    assert {(m.member_id, m.client_id, m.member_assignment) for m in described.members} == {
        (leader.member_id, "raw", b"p0"),
        (follower.member_id, "raw", b"p1"),
    }
    assert {m.client_host for m in described.members} == {"/127.0.0.1"}  # as Kafka writes an address

    left = _call(
        bootstrap,
        LEAVE,
        {"group_id": "pair", "members": [{"member_id": follower.member_id, "group_instance_id": None}]},
    )
    assert [m.error_code for m in left.members] == [NONE]
    assert _heartbeat(bootstrap, "pair", 1, leader.member_id) == REBALANCE_IN_PROGRESS
    again = _join(bootstrap, "pair", leader.member_id)  # the only member: the rebalance completes at once
    assert (again.error_code, again.generation_id) == (NONE, 2)
    gone = _call(
        bootstrap, LEAVE, {"group_id": "pair", "members": [{"member_id": "nobody", "group_instance_id": None}]}
    )
    assert [m.error_code for m in gone.members] == [UNKNOWN_MEMBER_ID]


def test_a_static_member_rejoins_without_a_rebalance_and_fences_its_old_self(server: Callable[..., Server]) -> None:
    _, bootstrap = _started(server)
    dynamic = _join(bootstrap, "static")  # the leader, throughout
    d = dynamic.member_id
    assert _sync(bootstrap, "static", 1, d, {d: b"all"}).assignment == b"all"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        worker = pool.submit(_join, bootstrap, "static", group_instance_id="worker-1")
        _until(lambda: _heartbeat(bootstrap, "static", 1, d) == REBALANCE_IN_PROGRESS, "the rebalance")
        again = _join(bootstrap, "static", d)
        joined = worker.result(timeout=30)
    assert again.generation_id == joined.generation_id == 2 and again.leader == d
    w1 = joined.member_id
    plan = {d: b"dynamic-part", w1: b"static-part"}
    assert _sync(bootstrap, "static", 2, d, plan).assignment == b"dynamic-part"
    assert _sync(bootstrap, "static", 2, w1, {}, group_instance_id="worker-1").assignment == b"static-part"

    # worker-1 restarts: a new member id, the same generation and assignment, no rebalance for the other member
    restarted = _join(bootstrap, "static", group_instance_id="worker-1")
    assert (restarted.error_code, restarted.generation_id, restarted.leader) == (NONE, 2, d)
    assert restarted.member_id != w1
    synced = _sync(bootstrap, "static", 2, restarted.member_id, {}, group_instance_id="worker-1")
    assert synced.assignment == b"static-part"
    assert _heartbeat(bootstrap, "static", 2, d) == NONE
    assert _heartbeat(bootstrap, "static", 2, w1, "worker-1") == FENCED_INSTANCE_ID


def test_a_group_is_served_by_one_door_at_a_time(server: Callable[..., Server]) -> None:
    s, bootstrap = _started(server)
    with s.client() as http:
        member = http.post("/v1/groups/http-group/members", json={"topics": ["t"]})
        assert member.status_code in (200, 201), member.text
    refused = _join(bootstrap, "http-group")
    assert refused.error_code == INCONSISTENT_GROUP_PROTOCOL
    assert _commit(bootstrap, "http-group", -1, "") == UNKNOWN_MEMBER_ID  # its HTTP members own the offsets

    joined = _join(bootstrap, "kafka-group")
    assert joined.error_code == NONE
    with s.client() as http:
        refused_http = http.post("/v1/groups/kafka-group/members", json={"topics": ["t"]})
    assert refused_http.status_code == 409, refused_http.text
    assert refused_http.json()["error_code"] == "INCONSISTENT_GROUP_PROTOCOL"
    assert "Kafka protocol listener" in refused_http.json()["message"]
    left = _call(
        bootstrap,
        LEAVE,
        {"group_id": "kafka-group", "members": [{"member_id": joined.member_id, "group_instance_id": None}]},
    )
    assert [m.error_code for m in left.members] == [NONE]
    with s.client() as http:  # the Kafka members left: the group's leases are released, HTTP members may come
        deadline = time.monotonic() + 30
        while (answer := http.post("/v1/groups/kafka-group/members", json={"topics": ["t"]})).status_code == 409:
            assert time.monotonic() < deadline, answer.text
            time.sleep(0.05)
        assert answer.status_code in (200, 201), answer.text
