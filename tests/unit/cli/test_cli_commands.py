"""How the ``logstore`` command is put together: every command group module registered, every command reachable,
with a handler, a ``--help``, help text for each option, ``--root`` everywhere and the connection options
(``--server``, ``--api-key``, TLS) exactly on the commands that talk to a server."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import logstore_cli
from logstore_cli import main
from logstore_cli.cli import COMMAND_GROUPS, build_parser

CONNECTION_OPTIONS = {"--server", "--api-key", "--ca-file", "--client-cert", "--client-key"}
OFFLINE = {"serve", "zookeeper", "maintain", "demo"}
"""Commands that never talk to a server: they work on the root (or run a server, or ZooKeeper)."""


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser under ``parser`` (itself included) with the words that reach it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def _is_leaf(parser: argparse.ArgumentParser) -> bool:
    return not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)


def test_every_command_group_module_is_registered() -> None:
    groups = [
        m.name for m in pkgutil.iter_modules(logstore_cli.__path__) if not m.name.startswith("_") and m.name != "cli"
    ]
    assert groups, "no command group modules found"
    for name in groups:
        module = importlib.import_module(f"logstore_cli.{name}")
        assert module.register in COMMAND_GROUPS, f"logstore_cli.{name}.register is not in cli.COMMAND_GROUPS"


def test_every_command_has_a_handler_and_takes_the_options_it_uses() -> None:
    leaves = [(path, p) for path, p in _commands(build_parser()) if _is_leaf(p)]
    assert ("topics", "create") in [path for path, _ in leaves]
    for path, parser in _commands(build_parser()):
        options = {s for a in parser._actions for s in a.option_strings}
        assert "--root" in options, path
        if path and path[0] in OFFLINE:
            assert not options & CONNECTION_OPTIONS, (path, options & CONNECTION_OPTIONS)
        else:
            assert options >= CONNECTION_OPTIONS, (path, CONNECTION_OPTIONS - options)
    for path, parser in leaves:
        assert callable(parser.get_default("func")), path


def test_every_command_and_option_has_help() -> None:
    for path, parser in _commands(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    assert choice.help, (*path, choice.dest)
            else:
                assert action.help, (path, action.option_strings or action.dest)


def test_top_level_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out and ":func:" not in out
    for command in ("cluster", "demo", "keys", "acls", "quotas", "zookeeper", "maintain"):
        assert f"\n    {command} " in out, command


def test_every_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    for path, _ in _commands(build_parser()):
        with pytest.raises(SystemExit) as exit_:
            main([*path, "--help"])
        assert exit_.value.code == 0, path
        assert capsys.readouterr().out.startswith(f"usage: {' '.join(('logstore', *path))} "), path


def test_top_level_help_lists_the_commands_in_registration_order(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    order = "{topics,produce,consume,groups,transactions,serve,keys,acls,quotas,zookeeper,cluster,maintain,demo}"
    assert order in capsys.readouterr().out


def test_root_may_be_given_before_or_after_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The common options are on every parser; a subcommand's (absent) default must not erase an earlier value."""
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(["--root", str(first), "topics", "create", "only-in-a", "--partitions", "1"]) == 0
    capsys.readouterr()
    assert main(["--root", str(first), "topics", "list"]) == 0
    assert capsys.readouterr().out.split() == ["TOPIC", "only-in-a"]
    assert main(["topics", "list", "--root", str(first)]) == 0
    assert capsys.readouterr().out.split() == ["TOPIC", "only-in-a"]
    assert main(["--root", str(second), "topics", "create", "only-in-b", "--partitions", "1"]) == 0
    capsys.readouterr()
    assert main(["--root", str(first), "topics", "list", "--root", str(second)]) == 0  # the later one wins
    assert capsys.readouterr().out.split() == ["TOPIC", "only-in-b"]
