"""A small in-process time series of topic sizes and consumer-group lag, for ``/v1/stats`` and the console.

Every ``stats.sample.ms`` a background task of the ingest node reads each
topic's partitions (log start offsets, high watermarks, bytes: the Delta log
and file statistics, never the data) and each group's committed offsets, and
appends one sample per topic and per group to a ring buffer holding the last
:data:`WINDOW_S` seconds. Rates are differences between consecutive samples,
so they count every writer of a topic (this node, other nodes, Spark sinks),
not only this node's produce requests.

Memory is bounded: at most ``WINDOW_S / interval`` samples per topic and per
group (180 at the 5 s default), each a few numbers (plus one per partition of a
group), and one topic reader per topic; a deleted topic or group is dropped at
the next sweep. The first sweep reads every topic's log (about 2 s for 200
topics); later ones read only each table's new commit files (a reader follows
the log, :class:`logstore.log.reader.TopicReader`) and describe again only the
topics whose version moved. The series lives in memory only: it starts empty
when the node starts.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace

from fastapi.concurrency import run_in_threadpool

from logstore.errors import GroupIdNotFoundError, LogstoreError
from logstore.log.reader import TopicReader
from logstore.structs import GroupOffset, GroupTopicPartition, OffsetCommit, TopicInfo

__all__ = ["WINDOW_S", "GroupSample", "StatsSampler", "TopicSample"]

log = logging.getLogger("ingest_api.stats")

WINDOW_S = 15 * 60
"""How far back the series reach, in seconds."""


@dataclass(frozen=True)
class TopicSample:
    """A topic at one sampling time; rates are per second since the previous sample (0 for the first)."""

    time_ms: int
    """Wall-clock time of the sample, Unix milliseconds."""
    partitions: int
    records: int
    """Records stored: the sum over partitions of the data files' record counts (Delta statistics), so a
    compacted topic counts the records it keeps, not the offsets it spans."""
    size_bytes: int
    """Bytes of the topic's data files."""
    high_watermark_sum: int
    records_per_s: float
    """Records committed per second (growth of the high watermarks, whoever wrote them)."""
    bytes_per_s: float
    """Growth of the data files per second (0 when retention or compaction shrank them)."""


@dataclass(frozen=True)
class GroupSample:
    """A group's lag at one sampling time, per (topic, partition)."""

    time_ms: int
    lag: dict[str, dict[int, int]] = field(default_factory=dict)
    """topic → partition → high watermark - committed offset."""


class StatsSampler:
    """The node's ring buffers of topic and group samples; ``sweep`` takes one sample of everything.

    ``topics`` lists the topics and ``reader`` opens a :class:`TopicReader` of one, ``committed`` the offsets
    store's latest commits of every group ((group, topic, partition) → (offset, time ms, metadata)); a group's
    lag is taken against the high watermarks of the same sweep, so a sweep reads each table once.
    ``sweep`` runs in a worker thread (it reads Delta logs), the readers on the event loop.
    """

    def __init__(
        self,
        interval_ms: int,
        topics: Callable[[], list[str]],
        reader: Callable[[str], TopicReader],
        committed: Callable[[], Mapping[GroupTopicPartition, OffsetCommit]],
    ) -> None:
        self.interval_ms = interval_ms
        self.capacity = max(2, math.ceil(WINDOW_S * 1000 / interval_ms))
        self._topics, self._reader = topics, reader
        self._committed = committed
        self._hws: dict[str, tuple[int, ...]] = {}
        """topic → its partitions' high watermarks at its latest sample."""
        # one reader per topic, brought up to date each sweep: a topic whose version did not move since its
        # last sample is not described again (the sweep's cost follows the topics that changed)
        self._tables: dict[str, tuple[TopicReader, int]] = {}
        self.topic_series: dict[str, deque[TopicSample]] = {}
        self.group_series: dict[str, deque[GroupSample]] = {}
        # the sweep and on-demand samples of requests run in different worker threads
        self._lock = threading.Lock()

    def sweep(self) -> None:
        """Sample every topic and group once; a topic or group that fails to read is skipped this time."""
        now_ms = int(time.time() * 1000)
        names = self._topics()
        for name in names:
            try:
                self._sample_topic(name, now_ms)
            except LogstoreError:  # deleted between list and describe: dropped below
                continue
        with self._lock:
            for gone in set(self.topic_series) - set(names):
                del self.topic_series[gone]
            for gone in set(self._tables) - set(names):
                del self._tables[gone]
                self._hws.pop(gone, None)
        by_group = self._by_group(self._committed())
        for group, rows in by_group.items():
            self._add_group(group, rows, now_ms)
        with self._lock:
            for gone in set(self.group_series) - set(by_group):
                del self.group_series[gone]

    def ensure_topic(self, name: str) -> None:
        """Sample ``name`` now if it has no samples yet (created since the last sweep, or the node just started).

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        if not self.topic_series.get(name):
            self._sample_topic(name, int(time.time() * 1000))

    def ensure_group(self, name: str) -> None:
        """Sample ``name`` now if it has no samples yet.

        Raises:
            GroupIdNotFoundError: the group has no committed offsets.
        """
        if not self.group_series.get(name):
            rows = self._by_group(self._committed()).get(name)
            if not rows:
                raise GroupIdNotFoundError(f"consumer group '{name}' has no committed offsets")
            for topic in {r.topic for r in rows} - set(self._hws):
                with suppress(LogstoreError):  # a deleted topic: high watermark 0, as describe_group says
                    self.ensure_topic(topic)
            self._add_group(name, self._by_group(self._committed())[name], int(time.time() * 1000))

    def _by_group(self, committed: Mapping[GroupTopicPartition, OffsetCommit]) -> dict[str, list[GroupOffset]]:
        out: dict[str, list[GroupOffset]] = {}
        for (group, topic, partition), (offset, time_ms, metadata) in sorted(committed.items()):
            hws = self._hws.get(topic, ())
            hw = hws[partition] if partition < len(hws) else 0
            out.setdefault(group, []).append(GroupOffset(group, topic, partition, offset, hw, time_ms, metadata))
        return out

    def _add_group(self, name: str, rows: list[GroupOffset], now_ms: int) -> None:
        lag: dict[str, dict[int, int]] = {}
        for r in rows:
            lag.setdefault(r.topic, {})[r.partition] = r.lag
        with self._lock:
            self.group_series.setdefault(name, deque(maxlen=self.capacity)).append(GroupSample(now_ms, lag))

    def _sample_topic(self, name: str, now_ms: int) -> None:
        cached = self._tables.get(name)
        reader = None
        if cached is not None:
            reader, described = cached
            try:
                reader.refresh()
            except LogstoreError:  # deleted, or unreadable this time: open it afresh (or skip it)
                reader = None
        if reader is None:
            reader, described = self._reader(name), -1
        version = reader.version
        series = self.topic_series.get(name)
        if version == described and series:
            last = series[-1]
            self._add_topic_sample(name, replace(last, time_ms=now_ms, records_per_s=0.0, bytes_per_s=0.0))
        else:
            self._add_topic(name, reader.describe(), now_ms)
        self._tables[name] = (reader, version)

    def _add_topic_sample(self, name: str, sample: TopicSample) -> None:
        with self._lock:
            series = self.topic_series.setdefault(name, deque(maxlen=self.capacity))
            if not series or sample.time_ms > series[-1].time_ms:
                series.append(sample)

    def _add_topic(self, name: str, info: TopicInfo, now_ms: int) -> None:
        self._hws[name] = tuple(p.high_watermark for p in info.partitions)
        hw = sum(self._hws[name])
        size = sum(p.size_bytes for p in info.partitions)
        records = sum(p.num_records for p in info.partitions)
        with self._lock:
            series = self.topic_series.setdefault(name, deque(maxlen=self.capacity))
            records_per_s = bytes_per_s = 0.0
            if series:
                last = series[-1]
                dt = (now_ms - last.time_ms) / 1000
                if dt <= 0:  # sampled on demand in the same millisecond
                    return
                records_per_s = max(0, hw - last.high_watermark_sum) / dt
                bytes_per_s = max(0, size - last.size_bytes) / dt
            series.append(TopicSample(now_ms, len(info.partitions), records, size, hw, records_per_s, bytes_per_s))

    async def run(self) -> None:
        """Sweep every ``interval_ms`` until cancelled; a failed sweep is logged and the next one runs."""
        while True:
            started = time.monotonic()
            try:
                await run_in_threadpool(self.sweep)
            except Exception:  # the console's sampler outlives any one sweep; the API never waits on it
                log.exception("sampling topic and group stats failed; retrying in %d ms", self.interval_ms)
            # a sweep slower than the interval (many topics) delays the next one rather than piling up
            await asyncio.sleep(max(0.0, self.interval_ms / 1000 - (time.monotonic() - started)))
