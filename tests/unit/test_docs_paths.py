"""Every repository path the README and docs/ name exists, so a moved or renamed file leaves no stale reference.

A path is an inline code span that starts with one of the repository's top-level folders (`tests/test_x.py`,
`logstore/log/writer.py`), optionally followed by ``::name`` (a test or class in that file, which must be
defined there) or ``:line``. Spans with spaces (commands) or with glob or placeholder characters are not
paths. Relative Markdown links are checked too: mkdocs checks those between pages, not the README's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = (
    "logstore",
    "ingest_api",
    "spark_source",
    "spark_sink",
    "maintenance",
    "logstore_cli",
    "tests",
    "bench",
    "tools",
    "jars",
    "conf",
    "notebooks",
    "docs",
)
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_PATH = re.compile(r"^(?:" + "|".join(FOLDERS) + r")/[^\s`*?\[\]{}<>|]*$")
_SUFFIX = re.compile(r"^(?P<path>[^:]+?)(?::(?P<line>\d+)|(?P<names>(?:::[A-Za-z_][A-Za-z0-9_]*)+))?$")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _prose(page: Path) -> str:
    """The page without its fenced code blocks (commands and output, not references)."""
    return _FENCE.sub("", page.read_text(encoding="utf-8"))


def _paths(page: Path) -> list[str]:
    spans = (m.group(2).strip() for m in _SPAN.finditer(_prose(page)))
    return [s for s in spans if _PATH.match(s)]


def _missing(reference: str) -> str | None:
    """Why ``reference`` does not resolve in the working tree, or None when it does."""
    m = _SUFFIX.match(reference)
    if m is None:
        return "not a path"
    target = ROOT / m.group("path")
    if not target.exists():
        return "no such file or directory"
    if m.group("line") is not None:
        lines = target.read_text(encoding="utf-8").count("\n") + 1
        if int(m.group("line")) > lines:
            return f"the file has {lines} lines"
    if m.group("names"):
        source = target.read_text(encoding="utf-8")
        for name in m.group("names").split("::")[1:]:
            if not re.search(rf"^\s*(?:async\s+def|def|class)\s+{name}\b", source, re.MULTILINE):
                return f"{name} is not defined in it"
    return None


def test_the_pages_are_found() -> None:
    """The README and the docs tree are where this test looks (a moved test file would check nothing)."""
    assert ROOT / "README.md" in PAGES
    assert ROOT / "docs" / "index.md" in PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_named_in_code_exists(page: Path) -> None:
    """Each `folder/…` code span names a file or folder of this repository (and, with ``::name``, a definition)."""
    stale = {ref: why for ref in _paths(page) if (why := _missing(ref)) is not None}
    assert not stale, f"{page.relative_to(ROOT)} names paths that do not resolve (find the file's new place): " + (
        "; ".join(f"`{ref}`: {why}" for ref, why in sorted(stale.items()))
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    """A relative Markdown link points at a file beside the page (anchors are mkdocs' to check)."""
    broken = []
    for target in _LINK.findall(_prose(page)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        if not (page.parent / target.split("#", 1)[0]).exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {', '.join(broken)}"


@pytest.mark.parametrize(
    ("reference", "why"),
    [
        ("tests/unit/test_docs_paths.py", None),
        ("tests/unit/test_docs_paths.py::test_every_path_named_in_code_exists", None),
        ("tests/unit/test_docs_paths.py:3", None),
        ("logstore/log/", None),
        ("tests/test_no_such_file.py", "no such file or directory"),
        ("tests/unit/test_docs_paths.py::test_no_such_test", "test_no_such_test is not defined in it"),
        ("tests/unit/test_docs_paths.py:100000", "the file has"),
    ],
)
def test_a_reference_resolves_only_when_its_file_and_name_exist(reference: str, why: str | None) -> None:
    """The checker itself: a missing file, a missing definition and a line past the end are each reported."""
    found = _missing(reference)
    assert found == why if why is None else (found is not None and found.startswith(why))


def test_commands_placeholders_and_code_blocks_are_not_paths(tmp_path: Path) -> None:
    """Only a span that is a path alone is checked: not a command, a glob, a placeholder or a fenced block."""
    page = tmp_path / "page.md"
    page.write_text(
        "Run `bench/ingest.py --quick`, see `tests/test_*.py` and `logstore/<module>.py`,\n"
        "read `logstore/log/writer.py::TopicWriter`.\n\n```sh\ncat tests/gone.py\n```\n",
        encoding="utf-8",
    )
    assert _paths(page) == ["logstore/log/writer.py::TopicWriter"]
