"""Which store a maintenance notebook or job works on: the root as the CLI takes it, and none is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from logstore.errors import InvalidConfigError
from maintenance import store_config


def test_the_root_parameter_wins_over_logstore_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.setenv("LOGSTORE_ROOT", str(tmp_path / "b"))
    assert store_config(str(tmp_path / "a")).root == str(tmp_path / "a")
    assert store_config("").root == str(tmp_path / "b")


def test_the_config_file_under_the_working_directory_names_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOGSTORE_ROOT", raising=False)
    monkeypatch.delenv("LOGSTORE_CONFIG", raising=False)
    (tmp_path / "conf").mkdir()
    (tmp_path / "store").mkdir()
    (tmp_path / "conf" / "logstore.toml").write_text(f'"logstore.root" = "{tmp_path / "store"}"\n')
    monkeypatch.chdir(tmp_path)
    assert store_config().root == str(tmp_path / "store")


def test_a_root_that_is_not_a_directory_is_an_error_naming_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOGSTORE_ROOT", raising=False)
    monkeypatch.delenv("LOGSTORE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidConfigError, match=r"logstore\.root './data'") as e:
        store_config()
    for setting in ("MAINTENANCE_ROOT", "spark.logstore.root", "LOGSTORE_ROOT", "logstore.root"):
        assert setting in str(e.value)
