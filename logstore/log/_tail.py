"""A topic table's snapshot for readers, brought forward by reading only the commits since.

delta-rs's ``DeltaTable.update_incremental`` replays every commit since the
last checkpoint on each call, however few are new: 8-40 ms for one new commit
50-280 commits past a checkpoint (``checkpoint.interval`` is 100). A reader that
plans after every commit — a streaming query's ``latestOffset``, an HTTP fetch —
paid that each time. A :class:`LogTail` loads the snapshot from delta-rs once,
then reads the new ``_delta_log/<version>.json`` files itself and applies their
``add``, ``remove``, ``metaData`` and ``txn`` actions as the protocol's log replay
does (later actions win), about 30 µs a commit. It goes back to delta-rs when it
cannot follow the log by itself: a commit it needs is gone (log cleanup behind a
newer checkpoint), more than :data:`MAX_STEP` commits are new, or an action
carries what it does not model (a deletion vector).

Commit files appear whole (put-if-absent by link or rename, by every engine), so
a file that exists can be read to its end. A table deleted and created again
under the same path (a topic re-created, by this process or another) starts its
versions again at 0, so its commits must never be read as the next ones of the
table loaded. Before each step the tail reads the topic's ID file
(:mod:`logstore.log.topic_id`) and stats ``_delta_log``: a new ID, or a new
directory, means a new table, loaded afresh. The inode alone is not enough: a
file system reuses it (ext4 hands a directory created right after one was
removed the same inode), and then a re-created topic read nothing until its
version passed the old one's, then only offsets above the old high watermark.
Not thread-safe: one reader's thread.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote

import orjson
from deltalake import DeltaTable

from logstore.log import _delta
from logstore.log.files import DataFile, data_files, offset_range
from logstore.log.topic_id import id_in, read_id_file
from logstore.storage import is_object_store, join, storage_for

__all__ = ["MAX_STEP", "LogTail"]

MAX_STEP = 1_000
"""Beyond this many new commits, loading the newest checkpoint through delta-rs is cheaper than reading them."""


class _Unfollowable(Exception):
    """The new commits hold something this module does not model: load them through delta-rs."""


class LogTail:
    """Live data files, table configuration and ``txn`` app versions of one table at :attr:`version`."""

    def __init__(self, table: DeltaTable) -> None:
        self.loads = 0
        """How many times the snapshot was loaded whole: a new count may be another table at the same version."""
        self._root = _delta.table_path(table)
        self._log = join(self._root, "_delta_log")
        self._storage = storage_for(self._root)
        self._load(table, self._identity_now())

    @property
    def table(self) -> DeltaTable:
        """The delta-rs handle the snapshot was last loaded from (at or before :attr:`version`)."""
        return self._dt

    @property
    def files(self) -> Mapping[str, DataFile]:
        """Live non-empty data files by :attr:`DataFile.log_path`."""
        return self._files

    @property
    def configuration(self) -> Mapping[str, str]:
        """The table's properties (``metaData.configuration``)."""
        return self._configuration

    @property
    def topic_id(self) -> str | None:
        """The ID of the topic whose table this is (None: a topic created before IDs existed)."""
        return id_in(self._configuration)

    def transaction_version(self, app_id: str) -> int | None:
        """The version the newest ``txn`` action of ``app_id`` recorded, or None if there is none."""
        if app_id in self._txn:
            return self._txn[app_id]
        try:
            return _delta.txn_version(self._dt, app_id)  # as of the handle's version; none since, or _txn had it
        except _delta.TableDeletedError:
            # The handle's commit files are gone: the table was deleted (re-created), or log cleanup removed
            # commits a newer checkpoint covers. A live table is read again at the version this tail is at.
            identity = self._identity_now()  # FileNotFoundError: deleted
            if identity != self._identity:
                raise
            self._load(_delta.open_table(self._root, version=self.version), identity)
            return _delta.txn_version(self._dt, app_id)

    def advance(self) -> int:
        """Apply the commits after :attr:`version`; returns the new version.

        Raises:
            FileNotFoundError: the table's ``_delta_log`` is gone (the table was deleted).
            DeltaError, KafkaStorageError, OSError: the table could not be read.
        """
        identity = self._identity_now()
        if identity != self._identity:  # re-created: its versions start again at 0
            self._load(_delta.open_table(self._root), identity)
            return self.version
        try:
            commits = list(self._new_commits())
            for actions in commits:
                self._apply(actions)
        except _Unfollowable:
            _delta.refresh(self._dt)
            self._load(self._dt, self._identity)
            return self.version
        self.version += len(commits)
        return self.version

    def _identity_now(self) -> tuple[str | None, int, int]:
        """(topic ID file, device and inode of ``_delta_log``): what tells a re-created table from the one loaded.

        Read before the table it describes is opened, so a table re-created in
        between is seen as new at the next step.

        Raises:
            FileNotFoundError: the table's ``_delta_log`` is gone (the table was deleted).
        """
        topic_id = read_id_file(self._root)
        if is_object_store(self._root):
            # No directories, no inodes; every topic on an object store has an ID, and a deleted one has none.
            if topic_id is None:
                raise FileNotFoundError(self._log)
            return topic_id, 0, 0
        st = os.stat(self._log)
        return topic_id, st.st_dev, st.st_ino

    def _load(self, table: DeltaTable, identity: tuple[str | None, int, int]) -> None:
        self._identity = identity
        self.loads += 1
        self._dt = table
        self.version: int = table.version()
        self._files: dict[str, DataFile] = {f.log_path: f for f in data_files(table)}
        self._configuration: dict[str, str] = {k: v for k, v in table.metadata().configuration.items() if v is not None}
        self._txn: dict[str, int] = {}
        """App versions recorded after the handle's version (the handle answers for the others)."""

    def _new_commits(self) -> Iterator[list[dict[str, Any]]]:
        v = self.version + 1
        while True:
            try:
                data = self._storage.read(join(self._log, f"{v:020d}.json"))
            except FileNotFoundError:
                if v == self.version + 1 and self._checkpoint_version() > self.version:
                    raise _Unfollowable from None  # log cleanup removed the commits after this version
                return
            if v > self.version + MAX_STEP:
                raise _Unfollowable
            try:
                yield [orjson.loads(line) for line in data.splitlines() if line.strip()]
            except orjson.JSONDecodeError:
                raise _Unfollowable from None  # delta-rs reads it, or says what is wrong with it
            v += 1

    def _checkpoint_version(self) -> int:
        last = _delta.last_checkpoint(self._root)
        return -1 if last is None else last.version

    def _apply(self, actions: list[dict[str, Any]]) -> None:
        for action in actions:
            if (add := action.get("add")) is not None:
                if add.get("deletionVector"):
                    raise _Unfollowable
                f = self._data_file(add)
                if f is None:
                    self._files.pop(add["path"], None)
                else:
                    self._files[f.log_path] = f
            elif (remove := action.get("remove")) is not None:
                self._files.pop(remove["path"], None)
            elif (txn := action.get("txn")) is not None:
                self._txn[txn["appId"]] = int(txn["version"])
            elif (meta := action.get("metaData")) is not None:
                self._configuration = {k: v for k, v in (meta.get("configuration") or {}).items() if v is not None}

    def _data_file(self, add: dict[str, Any]) -> DataFile | None:
        """The add action's file as :func:`~logstore.log.files.data_files` builds it; None when it holds no records."""
        log_path = add["path"]
        full = join(self._root, unquote(log_path))
        stats = orjson.loads(add["stats"]) if add.get("stats") else {}
        lows, highs = stats.get("minValues") or {}, stats.get("maxValues") or {}
        lo, hi, num = lows.get("offset"), highs.get("offset"), stats.get("numRecords")
        if lo is None or hi is None or num is None:
            lo, hi, num = offset_range(full)
        if num == 0:
            return None
        return DataFile(
            path=full,
            partition=int(add["partitionValues"]["partition"]),
            min_offset=int(lo),
            max_offset=int(hi),
            num_records=int(num),
            size_bytes=int(add["size"]),
            modification_time_ms=int(add["modificationTime"]),
            log_path=log_path,
            max_timestamp_ms=_epoch_ms(highs.get("timestamp")),
        )


def _epoch_ms(iso: object) -> int | None:
    """An ISO-8601 statistic (``2026-11-23T04:00:00.123Z``) as ms since the epoch, floored; None if absent."""
    if not isinstance(iso, str):
        return None
    t = dt.datetime.fromisoformat(iso)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    delta = t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
