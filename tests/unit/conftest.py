"""The unit tier runs in the test's own process: a unit test that starts a child process fails.

No ``logstore serve``, no JVM (a SparkSession starts one), no ``subprocess``, ``multiprocessing`` or fork, no
parser processes (a node's ``num.parser.processes`` must be 0 here). That keeps ``make test-unit`` a fast loop
and means a unit test never depends on what is installed beside Python. While a unit test's fixtures are set
up and while it runs, every way this interpreter starts a process raises :class:`ChildProcessInUnitTest`; a
test whose code swallows that error still fails, with the same message.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest


class ChildProcessInUnitTest(RuntimeError):
    """A unit test (or a fixture it uses) tried to start a child process."""


_MOVE = "unit tests run in-process: move this test to tests/integration (or tests/system when it kills processes)"


def _refuse(what: str, attempts: list[str]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        shown = what
        if what == "subprocess.Popen" and len(args) > 1:  # (self, args, ...): name the command
            command = args[1]
            shown += f"({command if isinstance(command, str) else ' '.join(map(str, command))[:200]})"
        attempts.append(shown)
        raise ChildProcessInUnitTest(f"{shown} started a child process; {_MOVE}")

    return refuse


# (owner, attribute, name in the message); os's own may be absent on some platforms
_STARTERS: list[tuple[Any, str, str]] = [
    (subprocess.Popen, "__init__", "subprocess.Popen"),  # subprocess.run/call/check_output, asyncio, os.popen
    (multiprocessing.process.BaseProcess, "start", "multiprocessing.Process.start"),  # Pool and Manager too
    *[
        (os, name, f"os.{name}")
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "spawnv", "spawnve", "spawnvp")
        if hasattr(os, name)
    ],
]


@contextmanager
def _no_child_processes() -> Iterator[list[str]]:
    attempts: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        for owner, attribute, name in _STARTERS:
            mp.setattr(owner, attribute, _refuse(name, attempts))
        yield attempts


def _name_the_cause(attempts: list[str], error: BaseException) -> None:
    """A test that failed otherwise (a timeout waiting for a child that never started) names the child first."""
    if attempts and not isinstance(error, ChildProcessInUnitTest):
        raise ChildProcessInUnitTest(f"{', '.join(attempts)} started a child process; {_MOVE}") from error


def _fail_if_swallowed(attempts: list[str]) -> None:
    if attempts:
        pytest.fail(f"{', '.join(attempts)} started a child process (the error was caught); {_MOVE}", pytrace=False)


def _guarded() -> Generator[None, object, object]:
    """The body of a hook wrapper: the guard around what the wrapped hook does (set up, or run, one test)."""
    with _no_child_processes() as attempts:
        try:
            result = yield
        except (Exception, pytest.fail.Exception) as error:
            _name_the_cause(attempts, error)
            raise
    _fail_if_swallowed(attempts)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    """The fixtures of a unit test start no process either (a SparkSession, a server)."""
    return (yield from _guarded())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded())
