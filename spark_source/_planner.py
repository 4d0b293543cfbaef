"""Offsets and plans over the subscribed topics: the driver-side half of the source.

Offsets are Kafka's JSON, ``{topic: {partition: next_offset}}``, always with
topics and partitions in sorted order so two equal positions serialise to the
same text (Spark compares offsets as text).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

from logstore.config import load_config
from logstore.errors import InvalidConfigError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from logstore.log.catalog import Catalog
from logstore.log.reader import PartitionView, TopicReader, offset_for_timestamp
from spark_source._options import EARLIEST, LATEST, OffsetSpec, SourceOptions
from spark_source._slices import ReadTask, TopicSlice, pack_slices, plan_slices

__all__ = ["Offsets", "Planner", "Views", "canonical", "rate_limited"]

log = logging.getLogger("spark_source")

Offsets = dict[str, dict[str, int]]
"""Kafka's offset JSON: topic → partition (as text) → next offset to read."""
Views = dict[str, dict[int, PartitionView]]
"""Topic → partition → its files and bounds at one table version."""


class Planner:
    """Reads the subscribed topics' logs (never their data) for one query. Not thread-safe."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": options.root}))
        self._readers: dict[str, TopicReader] = {}

    def topics(self) -> list[str]:
        """The subscribed topics that exist now.

        Raises:
            UnknownTopicOrPartitionError: a topic named by ``subscribe`` does not exist.
        """
        if self.options.pattern is not None:
            return [t for t in self.catalog.list_topics() if self.options.matches(t)]
        missing = [t for t in self.options.topics if not self.catalog.exists(t)]
        if missing:
            raise UnknownTopicOrPartitionError(f"subscribed topic(s) do not exist: {', '.join(missing)}")
        return sorted(self.options.topics)

    def views(self) -> Views:
        """Every partition of every subscribed topic at the topics' newest versions."""
        out: Views = {}
        for t in self.topics():
            reader = self._readers.get(t)
            try:
                if reader is None:
                    reader = self._readers[t] = TopicReader(self.catalog, t)
                reader.refresh()
            except UnknownTopicOrPartitionError:  # deleted since it was listed
                self._readers.pop(t, None)
                if self.options.pattern is not None:
                    continue  # as if listed a moment later
                raise
            out[t] = {p: reader.partition_view(p) for p in range(reader.num_partitions()) if self.options.reads(t, p)}
        return out

    def starting_offsets(self, views: Views, spec: OffsetSpec | None = None) -> Offsets:
        """Where a query without a committed position starts (``startingTimestamp`` wins)."""
        spec = self.options.starting if spec is None else spec
        out: Offsets = {}
        for t, parts in views.items():
            out[t] = {}
            for p, v in parts.items():
                if self.options.starting_timestamp_ms is not None:
                    o = offset_for_timestamp(v, self.options.starting_timestamp_ms)
                else:
                    o = _resolve(spec, t, p, v, "startingOffsets")
                out[t][str(p)] = o
        return canonical(out)

    def ending_offsets(self, views: Views) -> Offsets:
        """Where a batch read ends (``endingOffsets``; -2 is not allowed there)."""
        out: Offsets = {}
        for t, parts in views.items():
            out[t] = {}
            for p, v in parts.items():
                o = _resolve(self.options.ending, t, p, v, "endingOffsets")
                if isinstance(self.options.ending, dict) and self.options.ending.get(t, {}).get(str(p)) == EARLIEST:
                    raise InvalidConfigError(f"endingOffsets cannot be -2 (earliest): topic '{t}' partition {p}")
                out[t][str(p)] = o
        return canonical(out)

    def begin(self, topic: str, partition: int, position: int | None, view: PartitionView) -> int:
        """Where reading ``partition`` resumes from ``position`` (None: a new partition, from its start).

        Raises:
            OffsetOutOfRangeError: with ``failOnDataLoss=true``, the position is
                outside [log start offset, high watermark].
        """
        if position is None:
            return view.log_start_offset
        lo, hw = view.log_start_offset, view.high_watermark
        if lo <= position <= hw:
            return position
        if position < lo:
            what = (
                f"records {position}..{lo - 1} of topic '{topic}' partition {partition} were deleted "
                f"(log start offset {lo}) before the query read them (its offset {position})"
            )
        else:
            what = (
                f"the query's offset {position} of topic '{topic}' partition {partition} is beyond the "
                f"high watermark {hw} (was the topic deleted and created again?)"
            )
        if self.options.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"{what}; set failOnDataLoss=false to continue from the log start offset {lo} instead"
            )
        log.warning("failOnDataLoss=false: %s; continuing from offset %d", what, lo)
        return lo

    def tasks(self, start: Offsets, end: Offsets, views: Views) -> list[ReadTask]:
        """Spark's input partitions for ``start`` → ``end``: the :meth:`slices`, small ones packed together."""
        return pack_slices(self.slices(start, end, views), self.options.max_records_per_partition)

    def slices(self, start: Offsets, end: Offsets, views: Views) -> list[TopicSlice]:
        """Input partitions covering ``start`` → ``end`` from the files of ``views``."""
        out: list[TopicSlice] = []
        for t, parts in end.items():
            for p_text, e in parts.items():
                p = int(p_text)
                view = views.get(t, {}).get(p)
                if view is None:
                    raise UnknownTopicOrPartitionError(f"partition {p} of topic '{t}' does not exist")
                s = self.begin(t, p, start.get(t, {}).get(p_text), view)
                if s < e:
                    out += plan_slices(
                        t,
                        p,
                        s,
                        e,
                        view.files,
                        max_records=self.options.max_records_per_partition,
                        include_headers=self.options.include_headers,
                    )
        return out


def canonical(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    """``offsets`` with topics and partitions sorted (partitions numerically)."""
    return {t: {p: int(offsets[t][p]) for p in sorted(offsets[t], key=int)} for t in sorted(offsets)}


def rate_limited(
    begin: Mapping[tuple[str, int], int], until: Mapping[tuple[str, int], int], limit: int
) -> dict[tuple[str, int], int]:
    """Ends that admit at most about ``limit`` records, shared by backlog (Kafka source's rule).

    A partition gets ``limit * backlog / total`` records, rounded down, or up
    when that is below one, so a small backlog still moves.
    """
    sizes = {k: until[k] - begin[k] for k in until if until[k] > begin[k]}
    total = sum(sizes.values())
    if total <= limit:
        return {k: max(begin[k], until[k]) for k in until}
    out = {}
    for k in until:
        size = sizes.get(k, 0)
        prorate = limit * size / total
        take = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[k] = begin[k] + min(size, take)
    return out


def _resolve(spec: OffsetSpec, topic: str, partition: int, view: PartitionView, name: str) -> int:
    if spec == "earliest":
        return view.log_start_offset
    if spec == "latest":
        return view.high_watermark
    assert isinstance(spec, dict)
    if topic not in spec or str(partition) not in spec[topic]:
        raise InvalidConfigError(
            f"{name} must name every partition of the subscribed topics (like the Kafka source); "
            f"missing: topic '{topic}' partition {partition}"
        )
    o = spec[topic][str(partition)]
    if o == EARLIEST:
        return view.log_start_offset
    if o == LATEST:
        return view.high_watermark
    return o
