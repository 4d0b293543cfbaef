"""Configuration: TOML, environment and CLI layers; unknown keys and bad values rejected by name."""

from pathlib import Path

import pytest

from logstore.config import LogstoreConfig, TopicConfig, env_name, load_config, usable_cores
from logstore.errors import InvalidConfigError
from tests.support.paths import REPO


def test_defaults_without_a_file() -> None:
    cfg = load_config(environ={}, path=None)
    assert cfg.root == "./data"
    assert cfg.topic_defaults.retention_ms == 7 * 24 * 3600 * 1000
    assert cfg.topic_defaults.message_max_bytes == 1024 * 1024


def test_shipped_config_file_matches_defaults() -> None:
    shipped = REPO / "conf" / "logstore.toml"
    assert load_config(shipped, environ={}) == LogstoreConfig()


def test_committer_threads_default_to_the_usable_cores_at_most_4() -> None:
    assert LogstoreConfig().num_io_threads == min(4, usable_cores())
    assert load_config(environ={}, overrides={"num.io.threads": 8}).num_io_threads == 8


def test_one_parser_process_by_default_when_there_is_a_second_core() -> None:
    assert LogstoreConfig().num_parser_processes == (1 if usable_cores() >= 2 else 0)
    assert load_config(environ={}, overrides={"num.parser.processes": 0}).num_parser_processes == 0


def test_layers_win_in_order(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('"linger.ms" = 7\n"batch.size" = 100\nretention = { ms = 1000 }\n')
    cfg = load_config(
        f, environ={"LOGSTORE_BATCH_SIZE": "200", "LOGSTORE_ROOT": "/x"}, overrides={"logstore.root": "/y"}
    )
    assert cfg.linger_ms == 7
    assert cfg.batch_size == 200
    assert cfg.topic_defaults.retention_ms == 1000
    assert cfg.root == "/y"


def test_env_names() -> None:
    assert env_name("linger.ms") == "LOGSTORE_LINGER_MS"
    assert env_name("logstore.root") == "LOGSTORE_ROOT"


def test_config_is_frozen() -> None:
    cfg = load_config(environ={})
    with pytest.raises(AttributeError):
        cfg.linger_ms = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("overrides", "environ", "fragment"),
    [
        ({"lingr.ms": 5}, {}, "'lingr.ms'"),
        ({}, {"LOGSTORE_LINGR_MS": "5"}, "LOGSTORE_LINGR_MS"),
        ({"linger.ms": "soon"}, {}, "linger.ms must be an integer"),
        ({"linger.ms": -1}, {}, "linger.ms must be at least 0"),
        ({"auto.create.topics.enable": "yes"}, {}, "true or false"),
        ({"cleanup.policy": "shred"}, {}, "cleanup.policy must be one of"),
        ({"retention.ms": True}, {}, "retention.ms must be an integer"),
    ],
)
def test_bad_config_is_named(overrides: dict[str, object], environ: dict[str, str], fragment: str) -> None:
    with pytest.raises(InvalidConfigError) as e:
        load_config(environ=environ, overrides=overrides)
    assert fragment in e.value.message
    assert e.value.name == "INVALID_CONFIG"


def test_unknown_key_in_file_is_named(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('"linger.ms" = 5\n"log.dirs" = "/tmp"\n')
    with pytest.raises(InvalidConfigError, match=r"log\.dirs"):
        load_config(f, environ={})


def test_topic_overrides_fall_back_to_service_defaults() -> None:
    cfg = load_config(environ={}, overrides={"retention.ms": 5000})
    topic = TopicConfig.from_overrides({"cleanup.policy": "delete,compact"}, cfg.topic_defaults)
    assert topic.retention_ms == 5000
    assert topic.cleanup_policy == "compact,delete"
