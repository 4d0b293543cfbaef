"""Security on the Kafka listener: SASL/PLAIN with API keys, the HTTP API's ACLs with Kafka's error codes, quotas.

A real ``logstore serve`` with ``security.enabled=true``; keys, ACLs and
quotas written to the root's security store before it starts. Clients are
librdkafka (confluent-kafka) with ``security.protocol=SASL_PLAINTEXT`` and
``sasl.mechanism=PLAIN``, and raw frames for what no client sends.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from logstore.security import (
    AclBinding,
    FileSecurityStore,
    Operation,
    PatternType,
    Permission,
    Quota,
    ResourceType,
    new_key,
)
from tests.support.server import Server, free_port
from tests.system.kafka.raw import (
    CORRELATION_ID,
    fetch_frame,
    fetch_response,
    produce_frame,
    produce_response,
    request,
)

ck = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

StartServer = Callable[..., Server]


def _allow(principal: str, op: Operation, rtype: ResourceType, name: str) -> AclBinding:
    return AclBinding(principal, rtype, name, PatternType.LITERAL, op, Permission.ALLOW)


def _secured(tmp_path: Path, server: StartServer, protocol: str = "SASL_PLAINTEXT", **config: object) -> tuple:
    """A node with keys for admin (a super user), alice and bob; alice may write and read ``orders``, use group
    ``g`` and describe (only) ``secret``; nobody but admin may see ``hidden``. Returns (server, bootstrap, keys)."""
    root = tmp_path / "data"
    store = FileSecurityStore(str(root))
    keys = {}
    for who in ("admin", "alice", "bob"):
        record, keys[who] = new_key(f"User:{who}")
        store.add_key(record)
    store.add_acls(
        [
            _allow("User:alice", Operation.WRITE, ResourceType.TOPIC, "orders"),
            _allow("User:alice", Operation.READ, ResourceType.TOPIC, "orders"),
            _allow("User:alice", Operation.READ, ResourceType.GROUP, "g"),
            _allow("User:alice", Operation.DESCRIBE, ResourceType.TOPIC, "secret"),
        ]
    )
    store.set_quota(Quota("User:bob", producer_byte_rate=10_000))
    store.add_acls([_allow("User:bob", Operation.WRITE, ResourceType.TOPIC, "orders")])
    port = free_port()
    node = server(
        root,
        listeners=f"{protocol}://127.0.0.1:{port}",
        **{"security.enabled": "true", "super.users": "User:admin", "quota.window.num": "2"},
        **config,
    )
    with node.client(api_key=keys["admin"]) as http:
        for name in ("orders", "secret", "hidden"):
            assert http.post("/v1/topics", json={"name": name, "partitions": 2}).status_code == 201
    return node, f"127.0.0.1:{port}", keys


def _conf(bootstrap: str, user: str, password: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
        **extra,
    }


def _produce(conf: dict[str, Any], topic: str, n: int) -> list[Any]:
    """Produce ``n`` keyed records; every delivery report's error (None when delivered)."""
    producer = ck.Producer({**conf, "acks": "all", "message.timeout.ms": 20_000})
    reports: list[Any] = []
    for i in range(n):
        producer.produce(
            topic, key=f"k{i}".encode(), value=f"v{i}".encode(), on_delivery=lambda e, m: reports.append(e)
        )
    producer.flush(30)
    return reports


def test_an_allowed_principal_produces_consumes_and_commits_over_sasl_plain(
    tmp_path: Path, server: StartServer
) -> None:
    node, bootstrap, keys = _secured(tmp_path, server)
    conf = _conf(bootstrap, "alice", keys["alice"])
    assert _produce(conf, "orders", 20) == [None] * 20
    consumer = ck.Consumer({**conf, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition("orders", p, ck.OFFSET_BEGINNING) for p in range(2)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    consumer.commit(asynchronous=False)
    committed = consumer.committed([ck.TopicPartition("orders", p) for p in range(2)], timeout=30)
    consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
    assert sum(tp.offset for tp in committed) == 20
    # groups: alice sees and describes only the ones she may DESCRIBE (READ implies it)
    with node.client(api_key=keys["admin"]) as http:
        commit = {"topic": "orders", "partitions": {"0": 0}}
        assert http.post("/v1/groups/others/offsets", json=commit).status_code == 200
    alices = admin.AdminClient(conf)
    listed = alices.list_consumer_groups().result(timeout=30)
    assert {g.group_id for g in listed.valid} == {"g"}
    described = alices.describe_consumer_groups(["g", "others"])
    assert described["g"].result(timeout=30).group_id == "g"
    with pytest.raises(ck.KafkaException) as hidden:
        described["others"].result(timeout=30)
    assert hidden.value.args[0].code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED
    # Metadata lists only what alice may describe (READ and WRITE imply DESCRIBE), as Kafka does
    topics = admin.AdminClient(conf).list_topics(timeout=30).topics
    assert set(topics) == {"orders", "secret"}


def test_a_denied_topic_answers_topic_authorization_failed(tmp_path: Path, server: StartServer) -> None:
    node, bootstrap, keys = _secured(tmp_path, server)
    conf = _conf(bootstrap, "alice", keys["alice"])
    errors = _produce(conf, "secret", 3)
    assert [e.code() for e in errors] == [ck.KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    # a Fetch of a topic alice may describe but not read (librdkafka retries it quietly: a raw frame shows it)
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        _authenticate(sock, "alice", keys["alice"])
        code, _, records = fetch_response(_exchange(sock, fetch_frame("secret", 0, 0, max_wait_ms=0)))
    assert (code, records) == (29, b"")
    # a group alice may not describe: she cannot find its coordinator, so nothing of hers reaches it
    # (librdkafka reports the refused FindCoordinator through poll; a commit queued meanwhile would only
    # hold close() for its 45 s wait for a coordinator, so none is)
    other = ck.Consumer({**conf, "group.id": "not-hers"})
    seen = None
    deadline = time.monotonic() + 30
    while seen is None and time.monotonic() < deadline:
        msg = other.poll(0.2)
        if msg is not None and msg.error() is not None:
            seen = msg.error().code()
    other.close()
    assert seen == ck.KafkaError.GROUP_AUTHORIZATION_FAILED
    # creating a topic needs CREATE on it or on the cluster
    alices_admin = admin.AdminClient(conf)
    futures = alices_admin.create_topics([admin.NewTopic("alices", 1)])
    with pytest.raises(ck.KafkaException) as create:
        futures["alices"].result(timeout=30)
    assert create.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    with node.client(api_key=keys["admin"]) as http:
        assert http.get("/v1/topics/secret/partitions/0/records", params={"offset": 0}).json()["records"] == []
    assert "DENIED" in node.log()


@pytest.mark.parametrize(("user", "password_of"), [("alice", "wrong"), ("alice", "bob"), ("mallory", "alice")])
def test_a_bad_password_fails_authentication(tmp_path: Path, server: StartServer, user: str, password_of: str) -> None:
    node, bootstrap, keys = _secured(tmp_path, server)
    password = keys.get(password_of, "lsk_0000_nothing")
    errors: list[Any] = []
    producer = ck.Producer({**_conf(bootstrap, user, password, error_cb=errors.append), "message.timeout.ms": 5000})
    reports = []
    producer.produce("orders", value=b"never", on_delivery=lambda e, m: reports.append(e))
    producer.flush(20)
    assert reports and reports[0] is not None
    assert any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors), errors
    assert any("Invalid username or password" in e.str() for e in errors), errors
    with node.client(api_key=keys["admin"]) as http:
        for p in range(2):
            assert http.get(f"/v1/topics/orders/partitions/{p}/records", params={"offset": 0}).json()["records"] == []


def _frame(api_key: int, version: int, body_cls: Any, body: Any) -> bytes:
    from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
    from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
    from kio.serial import entity_writer

    header_cls = HeaderV2 if body_cls.__flexible__ else HeaderV1
    out = io.BytesIO()
    entity_writer(header_cls)(
        out,
        header_cls(request_api_key=api_key, request_api_version=version, correlation_id=CORRELATION_ID, client_id="t"),
    )
    entity_writer(body_cls)(out, body)
    return struct.pack(">i", out.tell()) + out.getvalue()


def _exchange(sock: Any, frame: bytes) -> bytes:
    sock.sendall(frame)
    head = sock.recv(4, 0x100)  # MSG_WAITALL
    if len(head) < 4:
        return b""
    (size,) = struct.unpack(">i", head)
    out = b""
    while len(out) < size:
        chunk = sock.recv(size - len(out))
        if not chunk:
            break
        out += chunk
    return out


def _authenticate(sock: socket.socket, user: str, password: str) -> None:
    """SaslHandshake v1 (PLAIN) and SaslAuthenticate v2 on ``sock``; both must succeed."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    answer = _exchange(sock, _frame(17, 1, SaslHandshakeRequest, SaslHandshakeRequest(mechanism="PLAIN")))
    assert struct.unpack_from(">h", answer, 4)[0] == 0
    token = f"\0{user}\0{password}".encode()
    answer = _exchange(sock, _frame(36, 2, SaslAuthenticateRequest, SaslAuthenticateRequest(auth_bytes=token)))
    assert struct.unpack_from(">h", answer, 5)[0] == 0


def test_requests_out_of_the_sasl_sequence_are_illegal_sasl_state(tmp_path: Path, server: StartServer) -> None:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
    from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

    node, bootstrap, keys = _secured(tmp_path, server)
    host, port = bootstrap.split(":")
    # a Produce before authenticating: answered as failed, the connection closed, nothing written
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        answer = _exchange(sock, produce_frame("orders", 0, [b"sneaky"]))
        assert struct.unpack_from(">i", answer, 0)[0] == CORRELATION_ID
        assert sock.recv(1) == b""
    assert "ILLEGAL_SASL_STATE" in node.log()
    # SaslAuthenticate before SaslHandshake: the same
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        token = b"\0alice\0" + keys["alice"].encode()
        answer = _exchange(sock, _frame(36, 2, SaslAuthenticateRequest, SaslAuthenticateRequest(auth_bytes=token)))
        assert struct.unpack_from(">h", answer, 5)[0] == 34
        assert sock.recv(1) == b""
    # another mechanism: UNSUPPORTED_SASL_MECHANISM, PLAIN offered
    from kio.serial import entity_reader

    with socket.create_connection((host, int(port)), timeout=30) as sock:
        answer = _exchange(sock, _frame(17, 1, SaslHandshakeRequest, SaslHandshakeRequest(mechanism="SCRAM-SHA-256")))
        response, _ = entity_reader(SaslHandshakeResponse)(answer, 4)
        assert (int(response.error_code.value), response.mechanisms) == (33, ("PLAIN",))
    # SASL handshake v0: the PLAIN message as a bare frame, answered by an empty one; then requests are served
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0

    with socket.create_connection((host, int(port)), timeout=30) as sock:
        answer = _exchange(sock, _frame(17, 0, HandshakeV0, HandshakeV0(mechanism="PLAIN")))
        assert struct.unpack_from(">h", answer, 4)[0] == 0
        token = b"\0alice\0" + keys["alice"].encode()
        assert _exchange(sock, struct.pack(">i", len(token)) + token) == b""
        answer = _exchange(sock, produce_frame("orders", 0, [b"after v0"]))
        assert struct.unpack_from(">i", answer, 0)[0] == CORRELATION_ID
    with node.client(api_key=keys["admin"]) as http:
        records = http.get("/v1/topics/orders/partitions/0/records", params={"offset": 0}).json()["records"]
    assert [r["value"] for r in records] == ["after v0"]


def test_a_plaintext_listener_of_a_secured_node_serves_user_anonymous_under_the_acls(
    tmp_path: Path, server: StartServer
) -> None:
    node, bootstrap, keys = _secured(tmp_path, server, protocol="PLAINTEXT")
    assert produce_response(request(bootstrap, produce_frame("orders", 0, [b"anonymous"])))[0] == 29
    FileSecurityStore(str(node.root)).add_acls(
        [_allow("User:ANONYMOUS", Operation.WRITE, ResourceType.TOPIC, "orders")]
    )
    deadline = time.monotonic() + 30  # the node sees the store's change within seconds
    while time.monotonic() < deadline:
        if produce_response(request(bootstrap, produce_frame("orders", 0, [b"anonymous"])))[0] == 0:
            break
    else:
        pytest.fail("User:ANONYMOUS was not allowed after its ACL was added")
    with node.client(api_key=keys["admin"]) as http:
        records = http.get("/v1/topics/orders/partitions/0/records", params={"offset": 0}).json()["records"]
    assert [r["value"] for r in records] == ["anonymous"]


def test_a_producer_over_its_quota_is_throttled_never_refused(tmp_path: Path, server: StartServer) -> None:
    _, bootstrap, keys = _secured(tmp_path, server)
    throttles: list[int] = []
    conf = _conf(bootstrap, "bob", keys["bob"], throttle_cb=lambda ev: throttles.append(ev.throttle_time))
    producer = ck.Producer({**conf, "acks": "all", "linger.ms": 0, "batch.num.messages": 1})
    reports: list[Any] = []
    started = time.monotonic()
    for _ in range(12):
        producer.produce("orders", partition=0, value=b"x" * 5000, on_delivery=lambda e, m: reports.append(e))
        producer.flush(60)
        producer.poll(0)
    elapsed = time.monotonic() - started
    assert reports == [None] * 12  # slowed, never errored
    assert throttles and max(throttles) > 0, throttles
    # 60 kB at 10 kB/s over a 2-sample window: at least a few seconds
    assert elapsed > 2, elapsed


def test_sasl_ssl_serves_tls_with_the_nodes_certificate(tmp_path: Path, server: StartServer) -> None:
    from tests.support.pki import make_ca, make_cert

    ca = make_ca(tmp_path)
    cert, key = make_cert(tmp_path, ca, "node", "/CN=node", server=True)
    tls = {"server.ssl.certfile": str(cert), "server.ssl.keyfile": str(key)}
    _, bootstrap, keys = _secured(tmp_path, server, protocol="SASL_SSL", ca_file=str(ca[1]), **tls)
    conf = _conf(bootstrap, "alice", keys["alice"], **{"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca[1])})
    assert _produce(conf, "orders", 5) == [None] * 5


_JARS = Path(__file__).resolve().parents[3] / ".cache" / "kafka"
_java_tools = pytest.mark.skipif(
    shutil.which("java") is None or not any(_JARS.glob("kafka_2.13-*.jar")),
    reason="Kafka's tools need Java and 'make kafka' (Kafka's jars from Maven Central in .cache/kafka)",
)


def _tool(main: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    classpath = os.pathsep.join(str(j) for j in sorted(_JARS.glob("*.jar")))
    return subprocess.run(
        ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath, main, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _client_properties(path: Path, user: str, password: str) -> str:
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{password}";\n'
    )
    return str(path)


@_java_tools
def test_kafka_console_tools_with_a_client_properties_file(tmp_path: Path, server: StartServer) -> None:
    node, bootstrap, keys = _secured(tmp_path, server)
    alice = _client_properties(tmp_path / "alice.properties", "alice", keys["alice"])
    lines = [f"line-{i}" for i in range(3)]
    produced = _tool(
        "kafka.tools.ConsoleProducer",
        *("--bootstrap-server", bootstrap, "--topic", "orders", "--producer.config", alice),
        *("--producer-property", "acks=all"),
        stdin="\n".join(lines) + "\n",
    )
    assert produced.returncode == 0, produced.stderr[-4000:]
    got = []
    for partition in ("0", "1"):  # assigned partitions: the group protocol (subscribe) is not served here
        consumed = _tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            *("--bootstrap-server", bootstrap, "--topic", "orders", "--consumer.config", alice),
            *("--partition", partition, "--offset", "earliest", "--timeout-ms", "8000"),
        )
        got += consumed.stdout.split()
    assert sorted(got) == lines
    listed = _tool(
        "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--list", "--command-config", alice
    )
    assert listed.returncode == 0, listed.stderr[-4000:]
    assert listed.stdout.split() == ["orders", "secret"]  # not "hidden": alice may not describe it
    # denied: producing to a topic alice may only describe
    denied = _tool(
        "kafka.tools.ConsoleProducer",
        *("--bootstrap-server", bootstrap, "--topic", "secret", "--producer.config", alice),
        *("--producer-property", "max.block.ms=20000"),
        stdin="nope\n",
    )
    assert "TopicAuthorizationException" in denied.stdout + denied.stderr, denied.stderr[-4000:]
    # a bad password: the tool fails on authentication
    bad = _client_properties(tmp_path / "bad.properties", "alice", keys["bob"])
    refused = _tool(
        "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--list", "--command-config", bad
    )
    assert refused.returncode != 0
    assert "Invalid username or password" in refused.stdout + refused.stderr, refused.stderr[-4000:]
    with node.client(api_key=keys["admin"]) as http:
        records = http.get("/v1/topics/secret/partitions/0/records", params={"offset": 0}).json()["records"]
    assert records == []


def test_a_consumer_over_its_quota_gets_throttle_time_ms(tmp_path: Path, server: StartServer) -> None:
    from kio.schema.fetch.v12.response import FetchResponse
    from kio.serial import entity_reader

    node, bootstrap, keys = _secured(tmp_path, server)
    FileSecurityStore(str(node.root)).set_quota(Quota("User:alice", consumer_byte_rate=5_000))
    with node.client(api_key=keys["admin"]) as http:
        records = [{"value": "x" * 1000} for _ in range(40)]
        assert http.post("/v1/topics/orders/records", json={"records": records, "partition": 0}).status_code == 200
    host, port = bootstrap.split(":")
    throttles = []
    deadline = time.monotonic() + 30  # the node sees the quota within seconds of the store's change
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        _authenticate(sock, "alice", keys["alice"])
        while time.monotonic() < deadline and not any(throttles):
            answer = _exchange(sock, fetch_frame("orders", 0, 0, max_wait_ms=0))
            response, _ = entity_reader(FetchResponse)(answer, 5)
            assert len(response.responses[0].partitions[0].records or b"") > 30_000  # never refused, always served
            throttles.append(response.throttle_time.total_seconds())
    assert any(t > 0 for t in throttles), throttles


def test_a_transactional_producer_needs_write_on_its_transactional_id(tmp_path: Path, server: StartServer) -> None:
    node, bootstrap, keys = _secured(tmp_path, server)
    conf = _conf(bootstrap, "alice", keys["alice"], **{"transactional.id": "alice-etl"})
    with pytest.raises(ck.KafkaException) as denied:
        ck.Producer(conf).init_transactions(30)
    assert denied.value.args[0].code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    acl = {
        "principal": "User:alice",
        "resource_type": "transactional_id",
        "resource_name": "alice-etl",
        "pattern_type": "literal",
        "operation": "WRITE",
        "permission": "ALLOW",
    }
    with node.client(api_key=keys["admin"]) as http:
        r = http.post("/v1/admin/acls", json={"acls": [acl]})
        assert r.status_code == 200, r.text
    producer = ck.Producer(conf)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("orders", value=b"in a transaction", partition=0)
    producer.commit_transaction(30)
    with node.client(api_key=keys["admin"]) as http:
        r = http.get("/v1/topics/orders/partitions/0/records", params={"offset": 0})
        assert [rec["value"] for rec in r.json()["records"]] == ["in a transaction"]
    # a topic alice may not write: its record fails delivery, the transaction must abort, nothing lands
    reports: list[Any] = []
    producer.begin_transaction()
    try:
        producer.produce("hidden", value=b"no", on_delivery=lambda e, m: reports.append(e))
    except ck.KafkaException as e:  # librdkafka had already learned the refusal (metadata): it says so at once
        assert e.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, e
    else:
        with pytest.raises(ck.KafkaException) as refused:
            producer.commit_transaction(30)
        assert refused.value.args[0].txn_requires_abort(), refused.value
        assert [e.code() for e in reports] == [ck.KafkaError.TOPIC_AUTHORIZATION_FAILED]
    producer.abort_transaction(30)
    with node.client(api_key=keys["admin"]) as http:
        assert http.get("/v1/topics/hidden").json()["partitions"][0]["high_watermark"] == 0
