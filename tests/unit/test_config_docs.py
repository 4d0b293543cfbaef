"""docs/configuration.md is generated from the keys declared in logstore/config.py, and stays so."""

from __future__ import annotations

from logstore.config import LogstoreConfig, env_name
from tools.config_docs import PAGE, REGENERATE, main, render


def test_the_configuration_page_is_what_the_declared_keys_render() -> None:
    """The committed page equals the generator's output: a key added or changed in config.py changes the page."""
    assert PAGE.read_text(encoding="utf-8") == render(), (
        f"docs/configuration.md is out of date with logstore/config.py; regenerate it: {REGENERATE}"
    )


def test_every_key_and_its_environment_variable_is_on_the_page() -> None:
    """Service keys and topic keys alike, each with the LOGSTORE_* variable that overrides it."""
    page = render()
    for key in LogstoreConfig.known_keys():
        assert f"| `{key}` |" in page, key
        assert f"`{env_name(key)}`" in page, key


def test_check_mode_passes_on_the_committed_page() -> None:
    """``python -m tools.config_docs --check`` is what a hook or CI step runs; it agrees with the test above."""
    assert main(["--check"]) == 0, f"regenerate it: {REGENERATE}"
