"""`LogStore`: the embedded store under one root — topics, writers, readers, groups.

This is what the CLI (``--root``) and the ingest tier build on. It holds one
:class:`~logstore.log.writer.TopicWriter` per topic it has written to and one
reader per topic. Its writers are cooperative (``join=True``): they take turns
with the topic's leader — a running ``logstore serve`` — through the table's
writer lock and never fence it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from logstore.config import LogstoreConfig
from logstore.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    InconsistentTopicIdError,
    InvalidRequestError,
    LogstoreError,
    NonEmptyGroupError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from logstore.groups.leases import DEFAULT_LEASE_TIMEOUT_MS, GroupLease
from logstore.groups.offsets import OffsetsStore
from logstore.log.catalog import Catalog
from logstore.log.reader import TopicReader, offset_for_timestamp
from logstore.log.writer import TopicWriter
from logstore.structs import (
    AppendResult,
    FetchResult,
    GroupOffset,
    GroupTopicPartition,
    OffsetCommit,
    ProducerBatch,
    TopicInfo,
)

__all__ = ["LogStore"]

_T = TypeVar("_T")


class LogStore:
    """The embedded store: one object per root and process.

    Thread-safe: appends to one topic are serialised by that topic's lock.
    """

    def __init__(self, config: LogstoreConfig) -> None:
        self.config = config
        self.catalog = Catalog(config)
        self.catalog.storage.check(self.catalog.root)  # a missing bucket or refused credentials: say so at once
        self.offsets = OffsetsStore(config.root)
        self._writers: dict[str, TopicWriter] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._readers: dict[str, TopicReader] = {}
        self._guard = threading.Lock()

    # topics
    def create_topic(self, name: str, partitions: int, config: Mapping[str, Any] | None = None) -> TopicInfo:
        return self.catalog.create_topic(name, partitions, config)

    def describe_topic(self, name: str) -> TopicInfo:
        """Partitions and config of topic ``name`` at its newest version (see :meth:`Catalog.describe_topic`).

        Through this store's warm reader of the topic, which reads only the
        commits since its last look (an offset commit validates its offsets
        this way on every request).

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        return self._read(name, lambda reader: reader.describe())

    def list_topics(self) -> list[str]:
        return self.catalog.list_topics()

    def alter_topic(
        self, name: str, *, config: Mapping[str, Any] | None = None, partitions: int | None = None
    ) -> TopicInfo:
        info = self.catalog.alter_topic(name, config=config, partitions=partitions)
        writer = self._writers.get(name)
        if writer is not None:
            with self._lock(name):
                writer.refresh()
        return info

    def delete_topic(self, name: str) -> None:
        """Delete topic ``name``, its data, and every group's committed offsets on it (as Kafka does).

        The table goes first, so no reader or commit check sees the topic any more,
        then the offsets' rows (:meth:`OffsetsStore.delete_topic`).

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        with self._lock(name):
            self._writers.pop(name, None)
            self._readers.pop(name, None)
            self.catalog.delete_topic(name)
            self.offsets.delete_topic(name)

    # records
    def writer(self, topic: str) -> TopicWriter:
        """This process's cooperative committer for ``topic`` (commits beside a leader, fences no one)."""
        with self._guard:
            w = self._writers.get(topic)
            if w is None:
                w = TopicWriter(self.catalog, topic, join=True)
                self._writers[topic] = w
            return w

    def append(self, topic: str, batches: Sequence[ProducerBatch]) -> list[AppendResult | LogstoreError]:
        """One group commit of ``batches`` to ``topic`` (see :meth:`TopicWriter.append`).

        A writer of a topic deleted and created again since (by another process)
        is dropped, and the batches go to a writer of the new topic.
        """
        writer = self.writer(topic)
        with self._lock(topic):
            try:
                return writer.append(batches)
            except InconsistentTopicIdError:  # raised before anything was written
                with self._guard:
                    if self._writers.get(topic) is writer:
                        del self._writers[topic]
                writer.close()
        writer = self.writer(topic)
        with self._lock(topic):
            return writer.append(batches)

    def reader(self, topic: str) -> TopicReader:
        return TopicReader(self.catalog, topic)

    def fetch(
        self, topic: str, partition: int, offset: int, *, max_records: int = 500, max_bytes: int = 1 << 20
    ) -> FetchResult:
        """A slice of ``partition`` from ``offset`` (see :meth:`TopicReader.fetch`), with a warm reader."""
        return self._read(
            topic, lambda r: r.fetch(partition, offset, max_records=max_records, max_bytes=max_bytes, refresh=False)
        )

    def _read(self, topic: str, read: Callable[[TopicReader], _T]) -> _T:
        """``read`` with this store's warm reader of ``topic``, brought up to date first; one thread at a time."""
        with self._guard:
            reader = self._readers.get(topic)
            if reader is None:
                reader = self._readers[topic] = self.reader(topic)
        with self._lock(f"read:{topic}"):
            try:
                reader.refresh()
                return read(reader)
            except UnknownTopicOrPartitionError:  # deleted, or re-created under the same name: a new reader next time
                with self._guard:
                    self._readers.pop(topic, None)
                raise

    def committed(self, group: str, topic: str) -> dict[GroupTopicPartition, OffsetCommit]:
        """``group``'s latest commits on ``topic``."""
        return self.offsets.committed(group, topic)

    # groups
    def commit_offsets(
        self,
        group: str,
        topic: str,
        offsets: Mapping[int, int],
        *,
        metadata: str | None = None,
        fence: int | None = None,
    ) -> None:
        """Commit ``offsets`` for ``group``, each checked to lie in [log start, HW].

        ``fence``: the committer's generation of the group's lease of ``topic`` (see
        :meth:`OffsetsStore.commit <logstore.groups.offsets.OffsetsStore.commit>`).

        Raises:
            OffsetOutOfRangeError: an offset outside its partition's range.
            UnknownTopicOrPartitionError: no such topic or partition.
            NotCoordinatorError: another committer holds a newer lease generation; nothing was committed.
        """
        info = self.describe_topic(topic)
        for p, o in offsets.items():
            if not 0 <= p < len(info.partitions):
                raise UnknownTopicOrPartitionError(f"partition {p} of topic '{topic}' does not exist")
            part = info.partitions[p]
            if not part.log_start_offset <= o <= part.high_watermark:
                raise OffsetOutOfRangeError(
                    f"offset {o} of topic '{topic}' partition {p} is outside "
                    f"[{part.log_start_offset}, {part.high_watermark}]"
                )
        self.offsets.commit(group, topic, offsets, metadata=metadata, fence=fence)

    def fence_offsets(self, group: str, topic: str, generation: int) -> None:
        """Refuse from now on the commits of ``group`` on ``topic`` fenced with a lease generation below ``generation``.

        Raises:
            NotCoordinatorError: a newer generation holds the fence already.
        """
        self.offsets.fence(group, topic, generation)

    def reset_offsets(
        self, group: str, topic: str, to: str | dict[str, int], *, force: bool = False, dry_run: bool = False
    ) -> dict[int, int]:
        """Move ``group``'s committed offsets on every partition of ``topic``; returns them.

        ``to`` is ``"earliest"`` (log start), ``"latest"`` (high watermark),
        ``{"timestamp": ms}`` (first record at or after it), ``{"offset": n}``
        or ``{"shift_by": n}`` (the committed offset plus ``n``, which may be
        negative; every partition needs a committed offset), each clamped into
        [log start, HW], as Kafka's reset tool does. ``dry_run`` computes the
        offsets under the same checks and commits nothing.

        As Kafka resets only an inactive group, the reset holds the group's lease
        of ``topic`` (:class:`~logstore.groups.leases.GroupLease`) while the
        offsets move: a group that a Spark query or the node's members are reading
        the topic for is refused, and none can start reading it meanwhile and
        commit over the reset. ``force`` waits for that reader's lease to be gone
        (the query stopped, or crashed and its lease expired: at most twice the
        lease timeout) instead of refusing at once.

        Raises:
            InvalidRequestError: ``to`` is none of these, or ``shift_by`` on a partition with no committed offset.
            GroupSubscribedToTopicError: a live reader of the group holds ``topic``.
        """
        lease = self._reset_lease(group, topic, wait_s=2 * DEFAULT_LEASE_TIMEOUT_MS / 1000 if force else 0.0)
        try:
            fence = lease.generation(topic)
            if not dry_run:
                self.offsets.fence(group, topic, fence)  # an earlier holder's late commit cannot land after it
            new = self._reset_offsets(group, topic, to)
            if not dry_run:
                self.offsets.commit(group, topic, new, metadata="reset", fence=fence)
            return new
        finally:
            lease.release()

    def _reset_lease(self, group: str, topic: str, *, wait_s: float) -> GroupLease:
        """The group's lease of ``topic``, taken within ``wait_s`` seconds."""
        lease = GroupLease(self.config.root, group)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                lease.acquire([topic])
                return lease
            except GroupSubscribedToTopicError as e:
                if time.monotonic() >= deadline:
                    raise GroupSubscribedToTopicError(
                        f"consumer group '{group}' is reading topic '{topic}' (a Spark query or members hold "
                        f"its lease): stop them first, as Kafka resets only an inactive group; with --force the "
                        f"reset waits for the lease to be gone"
                    ) from e
                time.sleep(0.2)  # a lease is a file: nothing tells us when it is let go

    def _reset_offsets(self, group: str, topic: str, to: str | dict[str, int]) -> dict[int, int]:
        reader = self.reader(topic)
        reader.refresh()
        count, _ = self.catalog.topic_config(topic)
        views = [reader.partition_view(p) for p in range(count)]
        if to == "earliest":
            new = {v.partition: v.log_start_offset for v in views}
        elif to == "latest":
            new = {v.partition: v.high_watermark for v in views}
        elif isinstance(to, dict) and set(to) == {"timestamp"} and _is_int(to["timestamp"]):
            new = {v.partition: offset_for_timestamp(v, to["timestamp"]) for v in views}
        elif isinstance(to, dict) and set(to) == {"offset"} and _is_int(to["offset"]):
            new = {v.partition: min(max(to["offset"], v.log_start_offset), v.high_watermark) for v in views}
        elif isinstance(to, dict) and set(to) == {"shift_by"} and _is_int(to["shift_by"]):
            committed = {k.partition: c.offset for k, c in self.offsets.committed(group, topic).items()}
            missing = [v.partition for v in views if v.partition not in committed]
            if missing:
                raise InvalidRequestError(
                    f"cannot shift the offsets of consumer group '{group}' on topic '{topic}': partition(s) "
                    f"{', '.join(map(str, missing))} have no committed offset (reset those to an offset first)"
                )
            new = {
                v.partition: min(max(committed[v.partition] + to["shift_by"], v.log_start_offset), v.high_watermark)
                for v in views
            }
        else:
            raise InvalidRequestError(
                "reset target must be earliest, latest, {'timestamp': ms}, {'offset': n} or {'shift_by': n}, "
                f"got {to!r}"
            )
        return new

    def delete_group(self, group: str) -> None:
        """Delete ``group``: every offset it committed (Kafka's DeleteGroups); it then lists nowhere.

        As Kafka deletes only an empty group, the deletion holds the group's lease
        of every topic it committed on (:class:`~logstore.groups.leases.GroupLease`):
        a group that a Spark query or the node's members read a topic for is refused,
        and none can start reading meanwhile and commit into the deletion.

        Raises:
            GroupIdNotFoundError: the group has no committed offsets.
            NonEmptyGroupError: a live reader of the group holds one of its topics.
        """
        topics = sorted({k.topic for k in self.offsets.committed(group)})
        if not topics:
            raise GroupIdNotFoundError(f"consumer group '{group}' has no committed offsets")
        lease = GroupLease(self.config.root, group)
        try:
            try:
                lease.acquire(topics)
            except GroupSubscribedToTopicError as e:
                raise NonEmptyGroupError(
                    f"consumer group '{group}' is not empty: a Spark query or members read its topics "
                    f"({e.message}); stop them first, as Kafka deletes only an empty group"
                ) from e
            self.offsets.delete_group(group)
        finally:
            lease.release()  # also the topics taken before one was refused

    def list_groups(self) -> list[str]:
        return self.offsets.groups()

    def describe_group(self, group: str) -> list[GroupOffset]:
        """Committed offset, high watermark and lag per partition the group has committed.

        Raises:
            GroupIdNotFoundError: the group never committed.
        """
        committed = self.offsets.committed(group)
        if not committed:
            raise GroupIdNotFoundError(f"consumer group '{group}' has no committed offsets")
        hws: dict[str, list[int]] = {}
        out = []
        for (g, t, p), (offset, ts, meta) in sorted(committed.items()):
            if t not in hws:
                try:
                    hws[t] = [x.high_watermark for x in self.describe_topic(t).partitions]
                except LogstoreError:
                    hws[t] = []
            hw = hws[t][p] if p < len(hws[t]) else 0
            out.append(GroupOffset(g, t, p, offset, hw, ts, meta))
        return out

    def _lock(self, topic: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(topic, threading.Lock())


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
