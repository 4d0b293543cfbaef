"""What logstore keeps in a topic table's Delta log, and how it reads it back.

Every logstore commit to a topic carries Delta *application transactions*
(``txn`` actions, kept across checkpoints):

* ``logstore.epoch`` = the committer's leader epoch. Two commits that both
  carry it conflict when they race, so a stale committer's commit fails and it
  reloads the table; seeing a newer epoch there, it knows it is fenced.
* ``logstore.hw.<p>`` = partition ``p``'s high watermark after the commit. The
  log, not a data scan, is where the high watermark is recovered from; file
  statistics (``max.offset``) back it up for files written by other engines.
* ``logstore.seq.<p>.<id>`` = the last sequence idempotent producer ``id``
  committed on partition ``p``, and ``logstore.pid.<id>`` = the highest it
  committed on the topic. The commit's ``commitInfo`` also records, under
  ``logstore.producers``, where each producer batch landed
  (``[{"id": id, "seq": s, "first": {p: [first_offset, count]}}]``) so a retry
  after a restart or at a new leader gets its original offsets
  (:mod:`logstore.log.producer_state`). Tables written before the state was per
  partition hold ``logstore.producer.<id>`` = the producer's last sequence on
  the topic; it is read, never written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import unquote

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from logstore.common.fsync import fsync_path
from logstore.errors import ConcurrentTransactionsError, KafkaStorageError, LogstoreError

# The data-file model lives in the public logstore.log.files (maintenance and spark_source use it too); the core's
# modules keep reaching it as _delta.DataFile etc.
from logstore.log.files import DataFile as DataFile
from logstore.log.files import data_files as data_files
from logstore.log.files import file_stats as file_stats
from logstore.log.files import table_path as table_path
from logstore.storage import is_object_store, join, storage_for

log = logging.getLogger(__name__)

_T = TypeVar("_T")

APP_EPOCH = "logstore.epoch"
PRODUCERS_METADATA = "logstore.producers"
COMMIT_ID = "logstore.commitId"
"""``commitInfo`` key: a random id per logstore commit, read back when a commit's outcome is in doubt."""
CONFIG_PREFIX = "logstore."
PARTITIONS_PROPERTY = "logstore.partitions"


def app_hw(partition: int) -> str:
    """The ``txn`` app id that holds ``partition``'s high watermark."""
    return f"logstore.hw.{partition}"


def app_leader(partition: int) -> str:
    """The ``txn`` app id that holds ``partition``'s leader epoch in cluster mode (the per-partition fence)."""
    return f"{LEADER_PREFIX}{partition}"


LEADER_PREFIX = "logstore.leader."


def app_holder(partition: int) -> str:
    """The ``txn`` app id that says which node claimed ``partition``'s leader epoch (cluster mode).

    Its version is ``epoch << 32 | node id`` (:func:`~logstore.log.epochs.holder_of`), so a
    holder recorded for an older epoch is never taken for the current one's. Logs written
    before it was recorded have none: their claims name no node.
    """
    return f"{HOLDER_PREFIX}{partition}"


HOLDER_PREFIX = "logstore.holder."


def app_producer(producer_id: str) -> str:
    """The legacy ``txn`` app id of a producer's last sequence on the whole topic (read, no longer written)."""
    return f"{PRODUCER_PREFIX}{producer_id}"


PRODUCER_PREFIX = "logstore.producer."
SEQUENCE_PREFIX = "logstore.seq."
PRODUCER_MAX_PREFIX = "logstore.pid."


def app_sequence(partition: int, producer_id: str) -> str:
    """The ``txn`` app id that holds a producer's last committed sequence on ``partition``."""
    return f"{SEQUENCE_PREFIX}{partition}.{producer_id}"


def app_producer_max(producer_id: str) -> str:
    """The ``txn`` app id that holds the highest sequence a producer committed on the topic (any partition)."""
    return f"{PRODUCER_MAX_PREFIX}{producer_id}"


def parse_sequence_app(app_id: str) -> tuple[int, str] | None:
    """(partition, producer id) of a ``logstore.seq.<p>.<id>`` app id; None for any other app id."""
    if not app_id.startswith(SEQUENCE_PREFIX):
        return None
    partition, _, producer_id = app_id.removeprefix(SEQUENCE_PREFIX).partition(".")
    return (int(partition), producer_id) if partition.isdigit() else None


class TableDeletedError(DeltaError, FileNotFoundError):
    """A table's log files are gone under a handle that had loaded them: the table was deleted.

    Both a ``DeltaError`` (what delta-rs raised, and what callers already handle) and a
    ``FileNotFoundError`` (what readers take for a deleted topic).
    """


def txn_version(dt: DeltaTable, app_id: str) -> int | None:
    """The version recorded for ``app_id`` in the loaded snapshot, or None.

    delta-rs replays the whole log for each lookup (~1 ms for an app id found near the head,
    5-12 ms for one that is absent, at a few hundred versions), and a reader asks for several
    per partition every time the table moves. So the answers are kept per table handle and
    brought forward by reading only the commits since (:class:`_AppVersions`).

    Raises:
        TableDeletedError: the table was deleted since ``dt`` loaded it.
    """
    with _APP_VERSIONS_LOCK:
        cache = _APP_VERSIONS.get(id(dt))
        if cache is None:
            cache = _APP_VERSIONS[id(dt)] = _AppVersions(dt)
            weakref.finalize(dt, _APP_VERSIONS.pop, id(dt), None)
    return cache.get(app_id)


class _AppVersions:
    """``txn`` app versions of one table handle, as of the version the handle has loaded.

    An app id is looked up through delta-rs once; after that, a newer version
    of the handle is applied by reading the ``txn`` actions of the commit files
    in between (later actions win, as in a log replay). If one of those files
    is gone (log cleanup) or the handle went back, everything is asked again.
    Thread-safe: a writer's handle is read by its committer and by fetches.
    """

    def __init__(self, dt: DeltaTable) -> None:
        self._dt = weakref.proxy(dt)  # the cache lives as long as the handle, and must not keep it alive
        self._log = join(table_path(dt), "_delta_log")
        self._storage = storage_for(self._log)
        self._version = dt.version()
        self._known: dict[str, int | None] = {}
        self._lock = threading.Lock()

    def get(self, app_id: str) -> int | None:
        with self._lock:
            version = self._dt.version()
            if version != self._version:
                self._advance(version)
            if app_id not in self._known:
                try:
                    self._known[app_id] = self._dt.transaction_version(app_id)
                except DeltaError as e:
                    # delta-rs replays the log lazily: a table deleted since the handle loaded fails here
                    if "not found" in str(e).lower():
                        raise TableDeletedError(f"{self._log}: {e}") from e
                    raise
            return self._known[app_id]

    def _advance(self, version: int) -> None:
        if self._known and self._version < version <= self._version + _APP_VERSIONS_MAX_STEP:
            updates: dict[str, int] = {}
            try:
                for v in range(self._version + 1, version + 1):
                    for line in self._storage.read(join(self._log, f"{v:020d}.json")).splitlines():
                        if b'"txn"' in line:
                            txn = orjson.loads(line).get("txn")
                            if txn is not None:
                                updates[txn["appId"]] = int(txn["version"])
            except FileNotFoundError:
                self._known.clear()
            else:
                self._known.update(updates)
        else:
            self._known.clear()
        self._version = version


_APP_VERSIONS: dict[int, _AppVersions] = {}
"""By ``id()`` of the handle (a DeltaTable is a dataclass, so not hashable); removed when the handle is collected."""
_APP_VERSIONS_LOCK = threading.Lock()
_APP_VERSIONS_MAX_STEP = 1_000
"""Beyond this many new commits, asking delta-rs again is cheaper than reading them."""


def open_table(path: str, version: int | None = None) -> DeltaTable:
    """Open a Delta table (at ``version``; None: its newest), translating delta-rs errors.

    A torn newest checkpoint (left by a power loss) is set aside first, so the
    table opens from the previous checkpoint or the JSON log.

    Raises:
        KafkaStorageError: the table cannot be read.
    """
    options = storage_for(path).delta_options
    try:
        try:
            return _listing_retry(lambda: DeltaTable(path, version=version, storage_options=options))
        except DeltaError:
            if not set_aside_torn_checkpoints(path):
                raise
            return _listing_retry(lambda: DeltaTable(path, version=version, storage_options=options))
    except TableNotFoundError:
        raise
    except (DeltaError, OSError) as e:
        raise KafkaStorageError(f"cannot open table at {path}: {e}") from e


def refresh(dt: DeltaTable) -> None:
    """Load the table's newest version into ``dt`` (delta-rs errors pass through)."""
    try:
        _listing_retry(dt.update_incremental)
    except DeltaError:
        if not set_aside_torn_checkpoints(table_path(dt)):
            raise
        _listing_retry(dt.update_incremental)


@dataclass(frozen=True)
class CheckpointPointer:
    """What a table's ``_delta_log/_last_checkpoint`` says of its newest checkpoint."""

    version: int
    actions: int
    """Actions the checkpoint holds (its ``size``: one per data file, plus metadata, protocol and app ids); 0 if
    the pointer does not say."""


def last_checkpoint(table_root: str) -> CheckpointPointer | None:
    """The table's newest checkpoint as ``_last_checkpoint`` names it; None when there is none or it is unreadable."""
    try:
        pointer = orjson.loads(storage_for(table_root).read(join(table_root, "_delta_log", "_last_checkpoint")))
        return CheckpointPointer(int(pointer["version"]), int(pointer.get("size", 0)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, orjson.JSONDecodeError):
        return None


def set_aside_torn_checkpoints(table_root: str) -> bool:
    """Make a table whose newest checkpoint is torn openable again; True if anything was set aside.

    A power loss can leave ``_last_checkpoint`` or a checkpoint file empty or
    cut short (their data never reached the disk, their directory entry did).
    Neither holds anything the JSON commits and older checkpoints do not, so an
    unreadable one is renamed to ``.<name>.torn-<id>`` (a name Delta ignores)
    and a pointer that does not lead to a readable checkpoint is removed.
    Readers then fall back to the previous checkpoint or the JSON log.
    An object store has no torn files (a PUT lands whole or not at all): nothing to do there.
    """
    if is_object_store(table_root):
        return False
    log_dir = os.path.join(table_root, "_delta_log")
    changed = False
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return False
    for name in sorted(n for n in names if ".checkpoint." in n and n.endswith(".parquet")):
        path = os.path.join(log_dir, name)
        if not _readable_parquet(path):
            with contextlib.suppress(FileNotFoundError):
                os.rename(path, os.path.join(log_dir, f".{name}.torn-{uuid.uuid4().hex[:8]}"))
                log.warning("set aside torn checkpoint %s", path)
                changed = True
    pointer = os.path.join(log_dir, "_last_checkpoint")
    try:
        with open(pointer, "rb") as fh:
            version = int(orjson.loads(fh.read())["version"])
        valid = os.path.exists(os.path.join(log_dir, f"{version:020d}.checkpoint.parquet")) or any(
            n.startswith(f"{version:020d}.checkpoint.") and n.endswith(".parquet") for n in os.listdir(log_dir)
        )
    except FileNotFoundError:
        return changed
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        valid = False
    if not valid:
        with contextlib.suppress(FileNotFoundError):
            os.remove(pointer)
            log.warning("removed %s: it does not point to a readable checkpoint", pointer)
            changed = True
    return changed


def _readable_parquet(path: str) -> bool:
    try:
        pq.read_metadata(path)
    except (OSError, pa.ArrowInvalid):
        return False
    return True


def sync_commits(table_root: str, first: int, last: int | None = None) -> list[str]:
    """fsync what delta-rs wrote for commits ``first``..``last`` (to the newest if None); the paths synced.

    delta-rs writes its files (data files, commit JSON, checkpoint and
    ``_last_checkpoint``) without fsync. After this returns they, and the
    directory entries that name them, survive a power loss. Call it after a
    delta-rs commit returns, on the committing process's thread. A checkpoint
    written by a post-commit hook at one of these versions is synced too.
    On an object store a write is durable when it is acknowledged: nothing to sync.

    Raises:
        OSError: a file could not be synced.
    """
    if is_object_store(table_root):
        return []
    table_root = os.path.normpath(table_root)
    log_dir = os.path.join(table_root, "_delta_log")
    files: list[str] = []
    dirs = {log_dir}
    if first == 0:  # a new table: its directories are new entries too
        dirs |= {table_root, os.path.dirname(table_root)}
    v = first
    while last is None or v <= last:
        commit = os.path.join(log_dir, f"{v:020d}.json")
        try:
            with open(commit, "rb") as fh:
                text = fh.read()
        except FileNotFoundError:
            break
        files.append(commit)
        for line in text.splitlines():
            add = orjson.loads(line).get("add") if line.strip() else None
            if add and "://" not in add["path"] and not add["path"].startswith("/"):
                path = os.path.join(table_root, unquote(add["path"]))
                files.append(path)
                # A new partition directory is an entry of its parent, up to the table root.
                d = os.path.dirname(path)
                while len(d) >= len(table_root) and d not in dirs:
                    dirs.add(d)
                    d = os.path.dirname(d)
        checkpoint = os.path.join(log_dir, f"{v:020d}.checkpoint.parquet")
        if os.path.exists(checkpoint):  # a post-commit hook wrote one
            files += [checkpoint, os.path.join(log_dir, "_last_checkpoint")]
        v += 1
    paths = files + sorted(dirs, key=len, reverse=True)
    for p in paths:
        fsync_path(p)
    return paths


def sync_checkpoint(table_root: str, version: int) -> list[str]:
    """fsync checkpoint ``version``, ``_last_checkpoint`` and their directory; the paths synced.

    Raises:
        OSError: a file could not be synced.
    """
    if is_object_store(table_root):
        return []
    log_dir = os.path.join(table_root, "_delta_log")
    prefix = f"{version:020d}.checkpoint."
    single = os.path.join(log_dir, prefix + "parquet")
    parts = (
        [single]
        if os.path.exists(single)
        else sorted(os.path.join(log_dir, n) for n in os.listdir(log_dir) if n.startswith(prefix))
    )
    paths = [*parts, os.path.join(log_dir, "_last_checkpoint"), log_dir]
    for p in paths:
        fsync_path(p)
    return paths


def _listing_retry(load: Callable[[], _T]) -> _T:
    # A directory listing is no snapshot: one taken while commits N and N+1 are created can
    # show N+1 without N, and delta-rs refuses such a "gap". Listing again sees both.
    for attempt in range(20):
        try:
            return load()
        except DeltaError as e:
            if "Expected contiguous commit files" not in str(e) or attempt == 19:
                raise
            time.sleep(0.001 * (attempt + 1))
    raise AssertionError("unreachable")


def translate(e: Exception, what: str) -> LogstoreError:
    """A delta-rs or I/O failure as a logstore error (use with ``raise … from e``)."""
    if isinstance(e, CommitFailedError):
        return ConcurrentTransactionsError(f"{what}: another committer won the commit race ({e})")
    return KafkaStorageError(f"{what}: {e}")
