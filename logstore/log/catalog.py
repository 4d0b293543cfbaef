"""The topic catalog: one Delta table per topic under ``<root>/topics/<name>``.

A topic's partition count and config overrides are table properties
(``logstore.partitions``, ``logstore.<key>``); the Delta log is the only place
they live. Topic tables use only features both delta-rs and Delta Spark can
write: protocol (1, 2), no deletion vectors, row tracking, in-commit
timestamps, clustering, type widening or domain metadata.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from logstore.config import LogstoreConfig, TopicConfig
from logstore.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    LogstoreError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from logstore.log import _delta
from logstore.log._tail import LogTail
from logstore.log.schema import TOPIC_SCHEMA
from logstore.log.topic_id import TOPIC_ID_PROPERTY, id_in, new_topic_id, read_id_file, write_id_file
from logstore.storage import absolute, is_object_store, join, storage_for
from logstore.structs import PartitionInfo, TopicInfo

__all__ = [
    "MAX_PARTITIONS",
    "MAX_TOPIC_NAME_LENGTH",
    "Catalog",
    "app_log_start",
    "high_watermark",
    "log_start_offset",
    "partition_count_in",
    "validate_topic_name",
]

MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS = 10_000
"""Partitions per topic; each is a Delta partition directory, so the bound keeps the table listable."""
# fullmatch, not match with "$": "$" also matches before a trailing newline, so "abc\n" would pass.
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: object) -> str:
    """Kafka's topic-name rules: 1-249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``.

    Raises:
        InvalidTopicError: naming the rule that was broken.
    """
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be '{name}'")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is {len(name)} characters; the limit is {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(
            f"topic name '{name}' is illegal: only ASCII letters, digits, '.', '_' and '-' are allowed"
        )
    return name


TRASH_DIR = "_deleted_topics"
"""Under the root: deleted topics' tables, renamed out of ``topics/`` before they are removed."""


class Catalog:
    """Creates, lists, describes, alters and deletes topics under one root.

    Works on the storage directly; safe to use from several processes (every
    change is one Delta commit). Not a singleton: build one per root.
    """

    def __init__(self, config: LogstoreConfig) -> None:
        self.config = config
        self.root = absolute(config.root)
        self.topics_dir = join(self.root, "topics")
        self.storage = storage_for(self.root)
        """Where the root's files live (:mod:`logstore.storage`): a local directory or an object store."""

    def topic_path(self, name: str) -> str:
        """Where topic ``name``'s table lives (the name is validated)."""
        return join(self.topics_dir, validate_topic_name(name))

    def table(self, name: str) -> DeltaTable:
        """A fresh handle on topic ``name``'s table.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        path = self.topic_path(name)
        if not self._is_table(path):
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        try:
            return _delta.open_table(path)
        except TableNotFoundError as e:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist") from e

    def topic_id(self, name: str) -> str | None:
        """Topic ``name``'s ID from its ID file (one small read); None for a topic from before IDs, or none.

        Raises:
            KafkaStorageError: the ID file could not be read.
        """
        try:
            return read_id_file(self.topic_path(name))
        except OSError as e:
            raise KafkaStorageError(f"cannot read the ID of topic '{name}': {e}") from e

    def log_mark(self, name: str) -> int | None:
        """What changes when topic ``name``'s log moves: its ``_delta_log`` directory's mtime (ns), in one ``stat``.

        None on an object store, which has no directories (one read of the topic's ID says it exists).

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        path = self.topic_path(name)
        try:
            if is_object_store(path):
                if read_id_file(path) is None:
                    raise FileNotFoundError(path)
                return None
            return os.stat(os.path.join(path, "_delta_log")).st_mtime_ns
        except FileNotFoundError:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None

    def exists(self, name: str) -> bool:
        return self._is_table(self.topic_path(name))

    def _is_table(self, path: str) -> bool:
        if is_object_store(path):
            return self.storage.exists(join(path, "_delta_log"))
        return os.path.isdir(os.path.join(path, "_delta_log"))

    def create_topic(self, name: str, partitions: int, config: Mapping[str, Any] | None = None) -> TopicInfo:
        """Create topic ``name`` with ``partitions`` partitions and config overrides (durable when it returns).

        Raises:
            InvalidTopicError: an illegal name.
            InvalidPartitionsError: fewer than one partition.
            InvalidConfigError: an unknown key or bad value in ``config``.
            TopicAlreadyExistsError: the name is taken.
        """
        path = self.topic_path(name)
        count = _partition_count(partitions)
        overrides = self._validated_overrides(config or {})
        if self.exists(name):
            raise TopicAlreadyExistsError(f"topic '{name}' already exists")
        topic_id = new_topic_id()
        properties = {_delta.PARTITIONS_PROPERTY: str(count), TOPIC_ID_PROPERTY: topic_id}
        properties |= {_delta.CONFIG_PREFIX + k: v for k, v in overrides.items()}
        properties["delta.checkpointInterval"] = str(self.config.checkpoint_interval)
        try:
            write_id_file(path, topic_id)  # before the first commit: a table at the path always has its ID file
        except OSError as e:
            raise KafkaStorageError(f"cannot create topic '{name}': {e}") from e
        try:
            DeltaTable.create(
                path,
                TOPIC_SCHEMA,
                mode="error",
                partition_by=["partition"],
                name=name,
                configuration=properties,
                raise_if_key_not_exists=False,
                storage_options=self.storage.delta_options,
            )
        except DeltaError as e:
            if "already exists" in str(e).lower():
                self._restore_id_file(name, path)
                raise TopicAlreadyExistsError(f"topic '{name}' already exists") from e
            raise KafkaStorageError(f"cannot create topic '{name}': {e}") from e
        self._sync(path, 0, f"cannot create topic '{name}'")
        return self.describe_topic(name)

    def _restore_id_file(self, name: str, path: str) -> None:
        """After losing a creation race: put the winner's ID back in the ID file this call overwrote.

        Every creator writes the ID file before its first commit, so the last
        write is either the winner's, before its commit, or a loser's repair,
        after it: the file ends up holding the ID of the table that exists.
        """
        try:
            winner = id_in(self.table(name).metadata().configuration)
            if winner is not None:
                write_id_file(path, winner)
        except (LogstoreError, DeltaError, OSError) as e:
            raise KafkaStorageError(
                f"topic '{name}' was created meanwhile, and its ID file cannot be restored: {e}"
            ) from e

    def list_topics(self) -> list[str]:
        """Topic names, sorted."""
        if is_object_store(self.topics_dir):
            return [n for n in self.storage.list_names(self.topics_dir) if self._is_table(join(self.topics_dir, n))]
        if not os.path.isdir(self.topics_dir):
            return []
        return sorted(
            n for n in os.listdir(self.topics_dir) if os.path.isdir(os.path.join(self.topics_dir, n, "_delta_log"))
        )

    def describe_topic(self, name: str, table: DeltaTable | LogTail | None = None) -> TopicInfo:
        """Partitions (log start offset, high watermark, size) and effective config.

        Reads the Delta log and file statistics only, never the data: of
        ``table`` when given (a delta-rs handle, or a reader's tail that
        follows the log), else of a handle opened for this call.
        """
        dt = table if table is not None else self.table(name)
        if isinstance(dt, LogTail):
            configuration, files, version = dt.configuration, list(dt.files.values()), dt.version
        else:
            configuration, files, version = dt.metadata().configuration, _delta.data_files(dt), dt.version()
        count, config, overrides = self._read_properties(configuration)
        parts = []
        for p in range(count):
            mine = [f for f in files if f.partition == p]
            hw = high_watermark(dt, p, mine)
            size, records = sum(f.size_bytes for f in mine), sum(f.num_records for f in mine)
            parts.append(PartitionInfo(p, log_start_offset(dt, p, hw), hw, size, len(mine), records))
        return TopicInfo(name, tuple(parts), config, overrides, version, id_in(configuration))

    def topic_config(self, name: str, table: DeltaTable | None = None) -> tuple[int, TopicConfig]:
        """(partition count, effective config) of a topic, from its table properties only."""
        dt = table if table is not None else self.table(name)
        count, config, _ = self._read_properties(dt.metadata().configuration)
        return count, config

    def _read_properties(self, configuration: Mapping[str, str | None]) -> tuple[int, TopicConfig, dict[str, str]]:
        props = dict(configuration)
        overrides = {
            k.removeprefix(_delta.CONFIG_PREFIX): v
            for k, v in props.items()
            if k.startswith(_delta.CONFIG_PREFIX)
            and k not in (_delta.PARTITIONS_PROPERTY, TOPIC_ID_PROPERTY)
            and v not in ("", None)
        }
        count = partition_count_in(props)
        return count, TopicConfig.from_overrides(overrides, self.config.topic_defaults), overrides

    def alter_topic(
        self, name: str, *, config: Mapping[str, Any] | None = None, partitions: int | None = None
    ) -> TopicInfo:
        """Set config overrides and/or raise the partition count (one Delta commit, durable when it returns).

        A config value of ``None`` removes the override (the default applies again).

        Raises:
            InvalidPartitionsError: ``partitions`` below the current count.
            InvalidConfigError: an unknown key or bad value.
        """
        dt = self.table(name)
        current, _ = self.topic_config(name, dt)
        props: dict[str, str] = {}
        if partitions is not None:
            count = _partition_count(partitions)
            if count < current:
                raise InvalidPartitionsError(
                    f"topic '{name}' has {current} partitions; partitions can be added "
                    f"but never removed (asked for {count})"
                )
            props[_delta.PARTITIONS_PROPERTY] = str(count)
        removals = [k for k, v in (config or {}).items() if v is None]
        for k in removals:
            if k not in TopicConfig.known_keys():
                raise InvalidConfigError(
                    f"unknown topic config key '{k}'; known keys: {', '.join(TopicConfig.known_keys())}"
                )
        sets = self._validated_overrides({k: v for k, v in (config or {}).items() if v is not None})
        props |= {_delta.CONFIG_PREFIX + k: v for k, v in sets.items()}
        # A removed override is stored as an empty value: Delta has no "unset" that both engines share.
        props |= {_delta.CONFIG_PREFIX + k: "" for k in removals}
        if props:
            before = dt.version()
            try:
                dt.alter.set_table_properties(props, raise_if_not_exists=False)
            except DeltaError as e:
                raise _delta.translate(e, f"cannot alter topic '{name}'") from e
            self._sync(dt, before + 1, f"cannot alter topic '{name}'")
        return self.describe_topic(name)

    def _sync(self, table: str | DeltaTable, first: int, what: str) -> None:
        """Make the commits from ``first`` on durable (with ``commit.fsync``): create and alter return durable."""
        if not self.config.commit_fsync:
            return
        try:
            _delta.sync_commits(table if isinstance(table, str) else _delta.table_path(table), first)
        except OSError as e:
            raise KafkaStorageError(f"{what}: {e}") from e

    def delete_topic(self, name: str) -> None:
        """Delete topic ``name`` and all its data (its ID file too; group offsets are the store's to delete).

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        path = self.topic_path(name)
        if not self.exists(name):
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        if is_object_store(path):
            # No rename on an object store: its ID goes first, then the log from the newest commit
            # (a writer of the old table finds its previous commit gone and stops), then the data.
            try:
                self.storage.delete_tree(path)
            except OSError as e:
                raise KafkaStorageError(f"cannot delete topic '{name}': {e}") from e
            return
        # One rename takes the whole table out of the name at once, then it is removed at leisure. Removing it in
        # place raced a leader still committing (another node, a stale pipeline): rmtree deleted some commit files,
        # the leader linked new ones, and the name was left with a broken log that neither engine could read or
        # delete. A writer of the old table now finds its previous commit gone and stops (``StaleVersion``).
        trash = os.path.join(self.root, TRASH_DIR, f"{name}.{uuid.uuid4().hex}")
        os.makedirs(os.path.dirname(trash), exist_ok=True)
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist") from None
        shutil.rmtree(trash, ignore_errors=True)  # a straggler's late file stays behind: harmless, out of any name

    def _validated_overrides(self, config: Mapping[str, Any]) -> dict[str, str]:
        TopicConfig.from_overrides(config, self.config.topic_defaults)
        return {k: _as_property(v) for k, v in config.items()}


def high_watermark(dt: DeltaTable | LogTail, partition: int, files: Sequence[_delta.DataFile] | None = None) -> int:
    """Partition ``partition``'s high watermark in the loaded snapshot (a delta-rs handle or a reader's tail).

    The larger of the ``logstore.hw.<p>`` app transaction and the files'
    ``max.offset`` + 1, so a log whose newest files were all removed keeps its
    high watermark, and files written without the app transaction still count.
    """
    if files is None:
        live = dt.files.values() if isinstance(dt, LogTail) else _delta.data_files(dt)
        files = [f for f in live if f.partition == partition]
    by_stats = max((f.max_offset + 1 for f in files), default=0)
    return max(by_stats, _txn_version(dt, _delta.app_hw(partition)) or 0)


def _txn_version(dt: DeltaTable | LogTail, app_id: str) -> int | None:
    return dt.transaction_version(app_id) if isinstance(dt, LogTail) else _delta.txn_version(dt, app_id)


def partition_count_in(configuration: Mapping[str, str | None]) -> int:
    """A topic's partition count, from its table properties."""
    return int(configuration.get(_delta.PARTITIONS_PROPERTY) or "1")


def app_log_start(partition: int) -> str:
    """The ``txn`` app id that holds ``partition``'s log start offset (written by retention only)."""
    return f"logstore.lso.{partition}"


def log_start_offset(dt: DeltaTable | LogTail, partition: int, hw: int) -> int:
    """Partition ``partition``'s log start offset in the loaded snapshot: the first offset a fetch may ask for.

    It is what retention last recorded in the ``logstore.lso.<p>`` app transaction
    (kept across checkpoints), 0 before retention ever removed anything, and never
    above the high watermark ``hw``. As in Kafka, only deleting records by retention moves
    it: key compaction leaves gaps but no new start, so a fetch from any offset at
    or above it returns the next record that was kept. It is not the smallest
    offset of the live files, which compaction changes.
    """
    return min(hw, _txn_version(dt, app_log_start(partition)) or 0)


def _partition_count(partitions: object) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise InvalidPartitionsError(f"partitions must be an integer, got {partitions!r}")
    if partitions < 1:
        raise InvalidPartitionsError(f"partitions must be at least 1, got {partitions}")
    if partitions > MAX_PARTITIONS:
        raise InvalidPartitionsError(f"partitions must be at most {MAX_PARTITIONS}, got {partitions}")
    return partitions


def _as_property(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
