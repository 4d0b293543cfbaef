"""The maintenance notebooks run unchanged in a local kernel (no dbutils: defaults and env), take the store's root
as the CLI does, and fail naming the setting when there is no store there."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from logstore.config import LogstoreConfig
from logstore.store import LogStore
from tests.support.commits import old_commits
from tests.support.helpers import assert_gap_free
from tests.support.paths import REPO

NOTEBOOKS = REPO / "notebooks"
HOUR_MS = 3600 * 1000


def execute(name: str, tmp_path: Path) -> str:
    """Run notebook ``name`` in a fresh kernel; returns its text output."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    return "\n".join(
        o.get("text", "") or str(o.get("data", {}).get("text/plain", ""))
        for cell in nb.cells
        if cell.cell_type == "code"
        for o in cell.outputs
    )


def test_retention_notebook(
    store: LogStore,
    config: LogstoreConfig,
    make_topic: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t = make_topic(partitions=1, retention_ms=HOUR_MS)
    old_commits(store, t, 4)
    monkeypatch.setenv("MAINTENANCE_ROOT", config.root)
    monkeypatch.setenv("MAINTENANCE_VACUUM_HOURS", "168")

    out = execute("retention.ipynb", tmp_path)

    assert f"retention {t}/0: removed 3 files" in out
    assert "retention: removed 3 files" in out and "vacuum: removed 0 files" in out
    assert store.describe_topic(t).partitions[0].log_start_offset == 6


def test_the_retention_notebook_reads_the_root_of_logstore_root(
    store: LogStore,
    config: LogstoreConfig,
    make_topic: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t = make_topic(partitions=1, retention_ms=HOUR_MS)
    old_commits(store, t, 2)
    monkeypatch.delenv("MAINTENANCE_ROOT", raising=False)
    monkeypatch.setenv("LOGSTORE_ROOT", config.root)

    out = execute("retention.ipynb", tmp_path)

    assert f"store {config.root}: 1 topics" in out
    assert f"retention {t}/0: removed 1 files" in out


@pytest.mark.parametrize("name", ["retention.ipynb", "compaction.ipynb"])
def test_a_notebook_without_a_store_fails_naming_the_setting(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("MAINTENANCE_ROOT", "LOGSTORE_ROOT", "LOGSTORE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MAINTENANCE_SPARK_MASTER", "local[1]")
    # Run from a folder without ./data (as from notebooks/): the default root is not a store.
    with pytest.raises(CellExecutionError) as failure:
        execute(name, tmp_path)
    message = str(failure.value)
    assert "INVALID_CONFIG" in message or "InvalidConfigError" in message
    assert f"logstore.root '{Path('data')}'" in message or "logstore.root './data'" in message
    assert "is not a directory" in message and "LOGSTORE_ROOT" in message and "MAINTENANCE_ROOT" in message


@pytest.mark.spark
def test_compaction_notebook(
    store: LogStore,
    config: LogstoreConfig,
    make_topic: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = make_topic(partitions=1)
    keyed = make_topic(partitions=1, cleanup_policy="compact")
    old_commits(store, plain, 5)
    old_commits(store, keyed, 3, keys=(b"k", b"j"))
    monkeypatch.setenv("MAINTENANCE_ROOT", config.root)
    monkeypatch.setenv("MAINTENANCE_SPARK_MASTER", "local[1]")

    out = execute("compaction.ipynb", tmp_path)

    assert f"compact {plain}/0: merged 5 files" in out
    assert f"clean {keyed}/0: dropped 4 records" in out
    assert store.describe_topic(plain).partitions[0].num_files == 1
    assert len(assert_gap_free(store.catalog, plain)[0]) == 10
    assert store.fetch(keyed, 0, 4).records["value"].to_pylist() == [b"2a", b"2b"]
