"""The node's warm readers: one :class:`~logstore.log.reader.TopicReader` per topic fetched, kept open.

A fetch brings the topic's reader up to date and plans what it reads under
that reader's lock (cheap: it reads only the commits since the last), then
reads the data files outside it (:func:`~logstore.log.reader.read_plan`), so
fetches of one topic's partitions from many threads — a Kafka Fetch's
partitions, many consumers — decode at once.
"""

from __future__ import annotations

import threading

from logstore.errors import UnknownTopicOrPartitionError
from logstore.log.reader import TopicReader, read_plan
from logstore.store import LogStore
from logstore.structs import FetchResult

__all__ = ["WarmReaders"]


class WarmReaders:
    """Topic → its reader and the lock its planning holds (thread-safe)."""

    def __init__(self, store: LogStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._readers: dict[str, tuple[threading.Lock, TopicReader]] = {}

    def fetch(self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int) -> FetchResult:
        """A slice of ``partition`` from ``offset`` (:meth:`TopicReader.fetch` says what it holds).

        Raises:
            UnknownTopicOrPartitionError: no such topic or partition (the topic's reader is dropped: a topic
                created again under the name gets a new one).
            OffsetOutOfRangeError: ``offset`` outside [log start offset, high watermark].
        """
        with self._lock:
            entry = self._readers.get(topic)
            if entry is None:
                entry = self._readers[topic] = (threading.Lock(), self._store.reader(topic))
        lock, reader = entry
        try:
            with lock:
                reader.refresh()
                plan = reader.plan(partition, offset, max_records)
            try:
                return read_plan(plan, max_bytes)
            except FileNotFoundError:  # vacuumed or re-created since the plan: the reader starts over
                with lock:
                    return reader.fetch(partition, offset, max_records=max_records, max_bytes=max_bytes)
        except UnknownTopicOrPartitionError:
            self.drop(topic)
            raise

    def drop(self, topic: str) -> None:
        """Forget ``topic``'s reader (deleted, or its pipeline retired): the next fetch opens a new one."""
        with self._lock:
            self._readers.pop(topic, None)
