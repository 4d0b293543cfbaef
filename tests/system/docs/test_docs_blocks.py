"""Every Python, shell and SQL block of README.md and docs/*.md runs as written, page by page, in order.

Each page gets a fresh working directory whose ``./data`` is a fresh store, and — when one of its blocks talks
to ``127.0.0.1:8080`` or ``localhost:8080`` — a real ``logstore serve`` on that store (on a free port: the
blocks' ``8080`` is rewritten to it). Python blocks of a page share one namespace, as cells of a notebook do,
and run in this process with the run's one SparkSession (``session()`` in a block returns it); a SQL block's
statements run on that session. Spark's JVM and its Python workers keep the working directory they started
in, so a Python or SQL block's quoted paths that start with ``./`` are rewritten to the page's directory. A
streaming query a block leaves running is run to the end of its input (``processAllAvailable``: a query that
failed raises) and stopped. Shell blocks run in ``bash -e -o pipefail`` in the page's directory, with
``logstore`` the command of this checkout and ``curl`` failing on an HTTP error status. A block that cannot
run here (a long-running ``make run``, a cluster of nodes, an endless poll loop) is preceded by
``<!-- not-run: reason -->``; the marker needs a reason.

A failure names the page and the line of the block's opening fence.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.paths import REPO
from tests.support.server import Server

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LANGUAGES = {"python", "sh", "bash", "sql"}
"""Fences that run; ``toml``, ``json`` and plain fences are shown, not run."""
BLOCK_TIMEOUT_S = 300

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```|~~~)(?P<lang>[\w-]*)\s*$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not-run:(?P<reason>.*?)-->\s*$")
_RELATIVE_DELTA_PATH = re.compile(r"delta\.`\.{1,2}/")
_SERVER = re.compile(r"\b(?:localhost|127\.0\.0\.1):8080\b")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """1-based line of the opening fence."""
    lang: str
    code: str
    not_run: str | None
    """The marker's reason; None: the block runs."""

    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` in a language that runs, in order."""
    lines = page.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(m["fence"]):
            end += 1
        if m["lang"] in LANGUAGES:
            before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            marker = _NOT_RUN.match(before)
            body = "\n".join(line[len(m["indent"]) :] for line in lines[i + 1 : end])
            out.append(Block(page, i + 1, m["lang"], body + "\n", marker["reason"].strip() if marker else None))
        i = end + 1
    return out


def test_a_block_that_does_not_run_says_why() -> None:
    every = [b for page in PAGES for b in blocks(page)]
    skipped = [b for b in every if b.not_run is not None]
    assert all(b.not_run for b in skipped), [b.where() for b in skipped if not b.not_run]
    assert len(every) - len(skipped) >= 15, "most blocks run"
    print(f"{len(every)} blocks: {len(every) - len(skipped)} run, {len(skipped)} not run:")
    for b in skipped:
        print(f"  {b.where()}: {b.not_run}")


@pytest.fixture
def logstore_command(tmp_path: Path) -> Path:
    """A folder holding ``logstore``: this checkout's command, run by this interpreter."""
    folder = tmp_path / "bin"
    folder.mkdir()
    command = folder / "logstore"
    command.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m logstore_cli "$@"\n')
    command.chmod(0o755)
    return folder


_CURL = 'curl() { command curl --silent --show-error --fail-with-body "$@"; }\n'


def run_shell(block: Block, code: str, cwd: Path, bin_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", _CURL + code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    if done.returncode != 0:
        pytest.fail(f"{block.where()}: the {block.lang} block exited {done.returncode}:\n{done.stdout}{done.stderr}")


def local_paths(code: str, cwd: Path) -> str:
    """``code`` with its quoted ``./`` paths under ``cwd`` (Spark's processes keep their own working directory)."""
    return re.sub(r"""(["'`])\./""", lambda m: f"{m[1]}{cwd}/", code)


def run_sql(block: Block, code: str, cwd: Path, spark: SparkSession) -> None:
    for statement in filter(str.strip, local_paths(code, cwd).split(";")):
        try:
            spark.sql(statement).collect()
        except Exception as e:
            pytest.fail(f"{block.where()}: the sql block raised {type(e).__name__}: {e}")


def run_python(block: Block, code: str, cwd: Path, namespace: dict[str, object], spark: SparkSession) -> None:
    code = local_paths(code, cwd)
    try:
        exec(compile(code, f"{block.where()}", "exec"), namespace)
        for query in spark.streams.active:
            try:
                query.processAllAvailable()
            finally:
                query.stop()
    except Exception as e:
        pytest.fail(f"{block.where()}: the python block raised {type(e).__name__}: {e}")


@pytest.fixture
def stopped_queries(spark: SparkSession) -> Iterator[None]:
    yield
    for query in spark.streams.active:
        query.stop()


@pytest.mark.spark
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_block_runs(
    page: Path,
    spark: SparkSession,
    tmp_path: Path,
    logstore_command: Path,
    monkeypatch: pytest.MonkeyPatch,
    stopped_queries: None,
) -> None:
    todo = [b for b in blocks(page) if b.not_run is None]
    relative = [b.where() for b in todo if _RELATIVE_DELTA_PATH.search(b.code)]
    # The rewrite of ./ paths below would make them work here; a reader's Spark refuses them.
    assert not relative, f"delta.`path` needs an absolute path (UNSUPPORTED_DATASOURCE_FOR_DIRECT_QUERY): {relative}"
    if not todo:
        pytest.skip("no block to run")
    cwd = tmp_path / "page"
    (cwd / "data").mkdir(parents=True)
    for var in [v for v in os.environ if v.startswith("LOGSTORE_")]:
        monkeypatch.delenv(var)
    monkeypatch.chdir(cwd)
    elsewhere = set((REPO / "data" / "topics").glob("*"))  # a store Spark's workers would find by default
    server = Server(cwd / "data").start() if any(_SERVER.search(b.code) for b in todo) else None
    namespace: dict[str, object] = {"__name__": "__docs__"}
    try:
        for block in todo:
            code = _SERVER.sub(f"127.0.0.1:{server.port}", block.code) if server else block.code
            if block.lang == "python":
                run_python(block, code, cwd, namespace, spark)
            elif block.lang == "sql":
                run_sql(block, code, cwd, spark)
            else:
                run_shell(block, code, cwd, logstore_command)
    finally:
        if server is not None:
            server.stop()
    made = set((REPO / "data" / "topics").glob("*")) - elsewhere
    assert not made, (
        f"{page.name}: a block wrote {sorted(map(str, made))}: Spark's workers do not run in the page's directory"
    )
