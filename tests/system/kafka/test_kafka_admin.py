"""CreatePartitions and IncrementalAlterConfigs from Kafka's admin clients, against a real ``logstore serve``.

They take the HTTP API's path (``PATCH /v1/topics/{t}``): what one door
changes, the other shows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.server import Server, free_port

ck = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")


def _node(server: Callable[..., Server]) -> tuple[Server, Any]:
    port = free_port()
    s = server(listeners=f"PLAINTEXT://127.0.0.1:{port}")
    client = admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    for f in client.create_topics([admin.NewTopic("t", 2)]).values():
        f.result(timeout=30)
    return s, client


def _error(future: Any) -> int:
    with pytest.raises(ck.KafkaException) as e:
        future.result(timeout=30)
    code: int = e.value.args[0].code()
    return code


def test_create_partitions_adds_partitions_and_never_removes_them(server: Callable[..., Server]) -> None:
    s, client = _node(server)
    client.create_partitions([admin.NewPartitions("t", 5)], validate_only=True)["t"].result(timeout=30)
    with s.client() as http:
        assert len(http.get("/v1/topics/t").json()["partitions"]) == 2  # validate_only: unchanged
    client.create_partitions([admin.NewPartitions("t", 5)])["t"].result(timeout=30)
    with s.client() as http:
        assert len(http.get("/v1/topics/t").json()["partitions"]) == 5
    assert len(client.list_topics("t", timeout=30).topics["t"].partitions) == 5
    producer = ck.Producer({"bootstrap.servers": client_bootstrap(s)})
    reports: list[Any] = []
    producer.produce("t", value=b"in the new partition", partition=4, on_delivery=lambda e, m: reports.append(e))
    producer.flush(30)
    assert reports == [None]
    for count in (5, 3):  # the same count, or fewer: INVALID_PARTITIONS
        assert _error(client.create_partitions([admin.NewPartitions("t", count)])["t"]) == 37
    assert _error(client.create_partitions([admin.NewPartitions("missing", 3)])["missing"]) == 3


def client_bootstrap(s: Server) -> str:
    listener = str(s.config["listeners"])
    return listener.partition("://")[2]


def test_incremental_alter_configs_sets_appends_and_deletes_topic_overrides(server: Callable[..., Server]) -> None:
    s, client = _node(server)
    topic = admin.ConfigResource(admin.ResourceType.TOPIC, "t")

    def alter(*entries: tuple[str, str | None, Any], validate_only: bool = False) -> Any:
        resource = admin.ConfigResource(
            admin.ResourceType.TOPIC,
            "t",
            incremental_configs=[admin.ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries],
        )
        return client.incremental_alter_configs([resource], validate_only=validate_only)[resource]

    op = admin.AlterConfigOpType
    alter(("retention.ms", "1000", op.SET), validate_only=True).result(timeout=30)
    with s.client() as http:
        assert http.get("/v1/topics/t").json()["config"]["retention.ms"] != 1000
    alter(("retention.ms", "1000", op.SET), ("cleanup.policy", "compact", op.APPEND)).result(timeout=30)
    with s.client() as http:
        config = http.get("/v1/topics/t").json()["config"]
    assert config["retention.ms"] == 1000
    assert set(config["cleanup.policy"].split(",")) == {"delete", "compact"}
    described = client.describe_configs([topic])[topic].result(timeout=30)
    assert described["retention.ms"].value == "1000"
    alter(("retention.ms", None, op.DELETE), ("cleanup.policy", "delete", op.SUBTRACT)).result(timeout=30)
    with s.client() as http:
        config = http.get("/v1/topics/t").json()["config"]
    assert config["retention.ms"] != 1000
    assert config["cleanup.policy"] == "compact"
    assert _error(alter(("no.such.key", "1", op.SET))) == ck.KafkaError.INVALID_CONFIG
    assert _error(alter(("retention.ms", "soon", op.SET))) == ck.KafkaError.INVALID_CONFIG
    with s.client() as http:
        assert http.get("/v1/topics/t").json()["config"]["cleanup.policy"] == "compact"
