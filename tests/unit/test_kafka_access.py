"""The Kafka listener's pure parts: listener addresses, SASL/PLAIN messages, empty error answers, config changes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafka_api.access import error_response, parse_plain
from kafka_api.admin import _changes
from kafka_api.server import parse_listener
from logstore.config import load_config
from logstore.errors import InvalidConfigError, SaslAuthenticationFailedError
from logstore.node.membership import advertised_kafka


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("PLAINTEXT://127.0.0.1:9092", ("PLAINTEXT", "127.0.0.1", 9092)),
        ("sasl_plaintext://localhost:19092", ("SASL_PLAINTEXT", "localhost", 19092)),
        ("SASL_SSL://[::1]:9093", ("SASL_SSL", "::1", 9093)),
        ("PLAINTEXT://:9092", ("PLAINTEXT", "0.0.0.0", 9092)),
    ],
)
def test_a_listener_names_its_protocol_host_and_port(value: str, parsed: tuple[str, str, int]) -> None:
    assert parse_listener(value, "listeners") == parsed


@pytest.mark.parametrize(
    "bad", ["SSL://127.0.0.1:9093", "127.0.0.1:9092", "PLAINTEXT://a:1,SASL_SSL://b:2", "PLAINTEXT://host"]
)
def test_a_listener_the_node_cannot_serve_is_refused_by_name(bad: str) -> None:
    with pytest.raises(InvalidConfigError, match="listeners="):
        parse_listener(bad, "listeners")


@pytest.mark.parametrize(
    ("overrides", "registered"),
    [
        ({"listeners": "SASL_SSL://0.0.0.0:9093"}, "127.0.0.1:9093"),
        (
            {"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://kafka-1:19092"},
            "kafka-1:19092",
        ),
        ({"listeners": ""}, None),
    ],
)
def test_a_node_registers_the_kafka_address_clients_should_use(
    overrides: dict[str, str], registered: str | None
) -> None:
    assert advertised_kafka(load_config(environ={}, path=None, overrides=overrides)) == registered


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        (b"\0alice\0lsk_1_s", ("User:alice", "lsk_1_s")),
        (b"alice\0alice\0lsk_1_s", ("User:alice", "lsk_1_s")),
        (b"\0User:svc\0lsk_1_s", ("User:svc", "lsk_1_s")),
    ],
)
def test_a_plain_message_names_the_principal_and_its_key(token: bytes, expected: tuple[str, str]) -> None:
    assert parse_plain(token) == expected


@pytest.mark.parametrize("token", [b"alice:lsk", b"\0\0lsk", b"\0alice\0", b"bob\0alice\0lsk_1_s"])
def test_a_malformed_plain_message_fails_authentication(token: bytes) -> None:
    with pytest.raises(SaslAuthenticationFailedError, match="Authentication failed"):
        parse_plain(token)


@pytest.mark.parametrize(("api_key", "version"), [(11, 9), (12, 4), (13, 5), (14, 5), (17, 1), (36, 2), (3, 12)])
def test_an_error_answer_of_any_api_carries_its_code_and_nothing_else(api_key: int, version: int) -> None:
    from kafka_api.protocol import FrameHeader, response_frame

    answer = error_response(api_key, version, 30)
    if hasattr(answer, "error_code"):
        assert int(answer.error_code) == 30
    response_frame(FrameHeader(api_key, version, 1, None), answer)  # writes as the version's schema says


def _entry(name: str, op: int, value: str | None) -> SimpleNamespace:
    return SimpleNamespace(name=name, config_operation=op, value=value)


def test_incremental_changes_set_delete_append_and_subtract() -> None:
    effective = {"cleanup.policy": "delete", "retention.ms": 1000}
    changes = _changes(
        effective,
        [_entry("retention.ms", 0, "5"), _entry("cleanup.policy", 2, "compact"), _entry("segment.bytes", 1, None)],
    )
    assert changes == {"retention.ms": "5", "cleanup.policy": "delete,compact", "segment.bytes": None}
    assert _changes(effective, [_entry("cleanup.policy", 3, "delete")]) == {"cleanup.policy": ""}
    with pytest.raises(InvalidConfigError, match="unknown topic config key 'nope'"):
        _changes(effective, [_entry("nope", 0, "1")])
    with pytest.raises(InvalidConfigError, match="config operation 7"):
        _changes(effective, [_entry("retention.ms", 7, "1")])
