"""The layers of docs/layout.md: the core imports none of its callers; callers use only public core modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO


def test_import_contracts_hold() -> None:
    """``lint-imports`` (run by ``make lint``) keeps every contract in pyproject.toml."""
    exe = Path(sys.executable).parent / "lint-imports"
    r = subprocess.run([str(exe), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_importing_the_core_imports_no_caller() -> None:
    """Every core module loads without ``ingest_api``, ``spark_source``, ``spark_sink``, ``maintenance`` or the CLI."""
    code = (
        "import pkgutil, sys, importlib, logstore\n"
        "for m in pkgutil.walk_packages(logstore.__path__, 'logstore.'):\n"
        "    importlib.import_module(m.name)\n"
        "callers = ('ingest_api', 'spark_source', 'spark_sink', 'maintenance', 'logstore_cli')\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in callers))\n"
    )
    assert _fresh_interpreter(code) == "[]"


def test_the_packages_names_resolve_on_first_use_to_their_modules_objects() -> None:
    """``logstore``'s public names load their module on first use; each is that module's object."""
    code = (
        "import importlib, sys, logstore\n"
        "assert 'logstore.log.writer' not in sys.modules and 'logstore.store' not in sys.modules\n"
        "for name in logstore.__all__:\n"
        "    home = importlib.import_module('logstore.' + logstore._HOMES[name])\n"
        "    assert getattr(logstore, name) is getattr(home, name), name\n"
        "from logstore import LogStore, TopicWriter\n"
        "try:\n"
        "    logstore.Nope\n"
        "except AttributeError as e:\n"
        "    print(e)\n"
    )
    assert _fresh_interpreter(code) == "module 'logstore' has no attribute 'Nope'"


def _fresh_interpreter(code: str) -> str:
    """What ``code`` prints when run by a new interpreter from the project's root (it must exit 0)."""
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()
