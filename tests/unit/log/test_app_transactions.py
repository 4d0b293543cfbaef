"""Delta application transactions (``txn``) as logstore reads them: what delta-rs would answer, as the table moves.

The high watermark, log start offset, leader epochs and producer sequences all
live in ``txn`` actions. ``tables.txn_version`` answers from a per-handle cache
brought forward by reading only the commits since the last answer; these tests
hold it to delta-rs's own (whole-log) answer after every kind of move.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from logstore.log import tables

APPS = ["logstore.hw.0", "logstore.hw.1", "logstore.lso.0", "logstore.producer.p", "never-written"]


def _commit(path: Path, txns: dict[str, int]) -> None:
    write_deltalake(
        str(path),
        pa.table({"x": pa.array([1], pa.int64())}),
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction(a, v) for a, v in txns.items()]),
    )


def _assert_as_delta_rs(reader: DeltaTable) -> None:
    for app in APPS:
        assert tables.txn_version(reader, app) == reader.transaction_version(app), (app, reader.version())


def test_answers_follow_every_commit_as_delta_rs_replays_them(tmp_path: Path) -> None:
    rng = random.Random(7)
    path = tmp_path / "t"
    _commit(path, {"logstore.hw.0": 1})
    reader = DeltaTable(str(path))
    _assert_as_delta_rs(reader)  # every app asked once: cached from here on
    for i in range(60):
        # Any subset of apps, versions up or down (the last action for an app wins), now and then a checkpoint.
        _commit(path, {a: rng.randrange(1000) for a in APPS[:4] if rng.random() < 0.4})
        if i % 17 == 16:
            DeltaTable(str(path)).create_checkpoint()
        if rng.random() < 0.3:
            reader.update_incremental()
            _assert_as_delta_rs(reader)
    reader.update_incremental()
    _assert_as_delta_rs(reader)


def test_answers_survive_log_cleanup_between_two_looks(tmp_path: Path) -> None:
    # The commits between the cached version and the newest are gone (log cleanup after a checkpoint):
    # the cache cannot be brought forward from them and asks delta-rs again.
    path = tmp_path / "t"
    _commit(path, {"logstore.hw.0": 1, "logstore.lso.0": 0})
    reader = DeltaTable(str(path))
    _assert_as_delta_rs(reader)
    for v in range(2, 7):
        _commit(path, {"logstore.hw.0": v, "logstore.lso.0": v - 1})
    writer = DeltaTable(str(path))
    writer.create_checkpoint()
    log = path / "_delta_log"
    for v in range(1, writer.version()):
        os.remove(log / f"{v:020d}.json")
    reader.update_incremental()  # from the checkpoint: delta-rs does not need the removed commits

    assert reader.version() == writer.version()
    _assert_as_delta_rs(reader)
    assert tables.txn_version(reader, "logstore.hw.0") == 6


def test_a_handle_loaded_at_an_older_version_answers_for_that_version(tmp_path: Path) -> None:
    path = tmp_path / "t"
    for v in range(5):
        _commit(path, {"logstore.hw.0": v})
    handle = DeltaTable(str(path))
    assert tables.txn_version(handle, "logstore.hw.0") == 4
    handle.load_as_version(2)
    assert tables.txn_version(handle, "logstore.hw.0") == 2
    handle.update_incremental()
    assert tables.txn_version(handle, "logstore.hw.0") == 4
