"""The ingest node's write-ahead log: a failed group write cuts nothing acknowledged, one process per directory."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from logstore.errors import KafkaStorageError
from logstore.log.wal import DirectoryLock, WriteAheadLog


class _FullDisk:
    """A segment file whose next write stores half its bytes, then fails like a full disk."""

    def __init__(self, real: Any, wal: FlakyLog) -> None:
        self._real, self._wal = real, wal

    def write(self, data: bytes) -> int:
        if self._wal.fail_next:
            self._wal.fail_next = False
            self._real.write(bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return int(self._real.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class FlakyLog(WriteAheadLog):
    """The real log; only the segment file it writes to can be told to fail once."""

    fail_next = False

    def _segment_for(self, first_number: int) -> Any:
        return _FullDisk(super()._segment_for(first_number), self)


def table(value: str) -> pa.Table:
    return pa.table({"value": [value.encode()]})


def test_a_failed_group_write_cuts_nothing_acknowledged(tmp_path: Path) -> None:
    wal = FlakyLog(str(tmp_path))
    a, done = wal.append({"n": "a"}, table("a"))
    done.result(timeout=10)
    wal.fail_next = True
    b, failed = wal.append({"n": "b"}, table("b"))
    with pytest.raises(KafkaStorageError, match="No space left"):
        failed.result(timeout=10)
    # Acknowledging a frame behind b would promise offsets behind a batch in neither the log nor Delta.
    _, behind = wal.append({"n": "early"}, table("early"))
    with pytest.raises(KafkaStorageError, match="retry"):
        behind.result(timeout=10)
    wal.committed_through(b + 1)  # the node committed b (and the refused frame) to Delta
    _, ok = wal.append({"n": "c"}, table("c"))
    ok.result(timeout=10)
    wal.close()

    recovered = WriteAheadLog(str(tmp_path)).recovered()
    assert [f.header["n"] for f in recovered] == ["a", "c"]
    assert recovered[0].number == a


def test_a_second_process_cannot_take_a_held_directory(tmp_path: Path) -> None:
    held = DirectoryLock(str(tmp_path))
    with pytest.raises(KafkaStorageError, match=f"pid {os.getpid()} on host"):
        DirectoryLock(str(tmp_path))
    held.release()
    DirectoryLock(str(tmp_path)).release()
