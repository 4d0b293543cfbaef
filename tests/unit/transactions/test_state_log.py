"""The ``_transactions`` table and the staged records: what a restarted coordinator reads back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from logstore.errors import NotCoordinatorError
from logstore.log.schema import input_table
from logstore.transactions._staging import Staging
from logstore.transactions._state_log import StateLog, StateRow


def row(tid: str, state: str, epoch: int = 0, **kw: object) -> StateRow:
    base = StateRow(tid, 7, epoch, state, 3, 60_000, {"t": [0, 2]}, [("g", "t", 0, 5)], [("t", 0, 10, 12)], 1, 2)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_the_newest_row_of_each_id_is_read_back_after_a_restart(tmp_path: Path) -> None:
    log = StateLog(str(tmp_path))
    assert log.load() == {}
    log.append(row("a", "Empty"))
    log.append(row("b", "Ongoing"))
    log.append(row("a", "PrepareCommit", epoch=1))
    again = StateLog(str(tmp_path))
    latest = again.load()
    assert latest == {"a": row("a", "PrepareCommit", epoch=1), "b": row("b", "Ongoing")}
    again.append(row("b", "CompleteAbort", epoch=2))  # row numbers go on from the ones read back
    assert StateLog(str(tmp_path)).load()["b"].state == "CompleteAbort"
    assert DeltaTable(str(tmp_path / "_transactions")).to_pyarrow_table().num_rows == 4


def test_a_version_another_writer_took_is_stepped_over(tmp_path: Path) -> None:
    log = StateLog(str(tmp_path))
    log.load()
    log.append(row("a", "Empty"))
    log.append(row("a", "Ongoing"))
    other = DeltaTable(str(tmp_path / "_transactions")).to_pyarrow_table().slice(0, 1)
    write_deltalake(str(tmp_path / "_transactions"), other, mode="append")  # version 2, unknown to `log`
    log.append(row("a", "PrepareCommit"))
    dt = DeltaTable(str(tmp_path / "_transactions"))
    assert dt.version() == 3
    assert [r["state"] for r in dt.to_pyarrow_table().sort_by("row_seq").to_pylist()][-1] == "PrepareCommit"


def test_staged_records_come_back_per_topic_in_produce_order_and_go_with_their_transaction(tmp_path: Path) -> None:
    staging = Staging(str(tmp_path))
    for n, values in enumerate([[b"1", b"2"], [b"3"]]):
        staging.write("tx/1", 4, "orders", n, input_table([0] * len(values), values=values))
    staging.write("tx/1", 4, "audit", 0, input_table([1], values=[b"a"]))
    staging.write("tx/1", 5, "orders", 0, input_table([0], values=[b"next"]))
    got = staging.read("tx/1", 4)
    assert {t: r["value"].to_pylist() for t, r in got.items()} == {"orders": [b"1", b"2", b"3"], "audit": [b"a"]}
    assert staging.staged_ids() == ["tx/1"] and sorted(staging.staged_seqs("tx/1")) == [4, 5]
    staging.delete("tx/1", 4)
    assert staging.read("tx/1", 4) == {} and staging.staged_seqs("tx/1") == [5]
    assert isinstance(staging.read("tx/1", 5)["orders"], pa.Table)


def test_the_log_compacts_itself_to_the_newest_row_of_each_id(tmp_path: Path) -> None:
    log = StateLog(str(tmp_path), compact_every=10)
    log.load()
    for i in range(25):
        log.append(row(f"tx-{i % 3}", "Ongoing" if i % 2 else "Empty", epoch=i))
    dt = DeltaTable(str(tmp_path / "_transactions"))
    assert len(dt.get_add_actions(flatten=True)) <= 1 + 5  # the compacted file and the rows since
    latest = StateLog(str(tmp_path)).load()
    assert {tid: (r.producer_epoch, r.state) for tid, r in latest.items()} == {
        "tx-0": (24, "Empty"),
        "tx-1": (22, "Empty"),
        "tx-2": (23, "Ongoing"),
    }
    assert dt.to_pyarrow_table().num_rows <= 3 + 5


def test_a_deposed_coordinator_cannot_write_after_its_successor_took_the_id_over(tmp_path: Path) -> None:
    first, second = StateLog(str(tmp_path)), StateLog(str(tmp_path))
    epoch, found = first.take_over("a")
    assert (epoch, found) == (1, None)
    first.append(row("a", "Empty"), fence=epoch)
    first.append(row("a", "PrepareCommit", epoch=0), fence=epoch)  # the decision
    later, found = second.take_over("a")  # the successor reads the decision back
    assert later == 2 and found is not None and found.state == "PrepareCommit"
    with pytest.raises(NotCoordinatorError):  # the deposed one's "abort" after the decision: refused, not written
        first.append(row("a", "CompleteAbort", epoch=1), fence=epoch)
    second.append(row("a", "CompleteCommit"), fence=later)
    first.append(row("b", "Empty"), fence=first.take_over("b")[0])  # other ids: still its own
    latest = StateLog(str(tmp_path)).load()
    assert latest["a"].state == "CompleteCommit" and latest["b"].state == "Empty"
    assert "CompleteAbort" not in DeltaTable(str(tmp_path / "_transactions")).to_pyarrow_table()["state"].to_pylist()


def test_looking_up_an_unknown_id_writes_no_take_over(tmp_path: Path) -> None:
    log = StateLog(str(tmp_path))
    log.append(row("a", "Empty"))
    before = DeltaTable(str(tmp_path / "_transactions")).version()
    assert log.take_over("nobody", known_only=True) == (0, None)
    assert DeltaTable(str(tmp_path / "_transactions")).version() == before
    assert log.take_over("a", known_only=True)[1] == row("a", "Empty")
