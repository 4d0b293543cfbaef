"""The shape of the code: no module over 600 lines, no class over 400, no import cycle between modules.

A module that outgrows 600 lines, or a class 400, is doing more than one job (``TopicWriter`` once did six
in 960 lines); a cycle, also one through an import under ``TYPE_CHECKING``, means two modules are one
concept or one of them knows too much. Read from the source with ``ast``: nothing is imported or run.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

PACKAGES = (
    "logstore",
    "logstore_cli",
    "ingest_api",
    "kafka_api",
    "spark_source",
    "spark_sink",
    "maintenance",
    "bench",
    "tools",
)
MODULE_LINES = 600
CLASS_LINES = 400


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts[0] == "bench":  # bench's scripts import each other by their bare names
                parts.pop(0)
            out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of this tree that ``module`` imports, under ``TYPE_CHECKING`` too (``from p import m`` → ``p.m``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known and m != module and not module.startswith(m + ".")}


def test_no_module_is_over_600_lines_and_no_class_over_400() -> None:
    too_big = []
    for module, path in _modules().items():
        source = path.read_text()
        if (n := len(source.splitlines())) > MODULE_LINES:
            too_big.append(f"module {module}: {n} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and (n := node.end_lineno - node.lineno + 1) > CLASS_LINES:
                too_big.append(f"class {module}.{node.name}: {n} lines")
    assert too_big == [], "split these along their jobs: " + "; ".join(too_big)


def test_no_import_cycle() -> None:
    known = _modules()
    graph = {m: _imports(m, p, known) for m, p in known.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append([*path[path.index(n) :], n])
            elif n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)
