"""Offsets and plans over the subscribed topics: the driver-side half of the source.

Offsets are Kafka's JSON, ``{topic: {partition: next_offset}}``, always with
topics and partitions in sorted order so two equal positions serialise to the
same text (Spark compares offsets as text). The offsets the stream reader
hands Spark also carry, under the key :data:`TOPIC_IDS` (never a topic name:
``@`` is not allowed in one), the ID of the topic each position is of
(:mod:`logstore.log.topic_id`; null for a topic from before IDs)::

    {"orders": {"0": 42, "1": 17}, "@topic_ids": {"orders": "qGfLm0JZR7ug8S7cSnqJdw"}}

A position whose topic has another ID now is of a topic deleted and created
again (:meth:`Planner.begin`). Offsets without the key (checkpoints of older
versions, ``startingOffsets``) still load: their topics' IDs are unknown, and
only the range checks apply.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from logstore.config import load_config
from logstore.errors import (
    InconsistentTopicIdError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from logstore.log.catalog import Catalog
from logstore.log.reader import PartitionView, TopicReader, offset_for_timestamp
from spark_source._options import EARLIEST, LATEST, OffsetSpec, SourceOptions
from spark_source._slices import ReadTask, TopicSlice, pack_slices, plan_slices

__all__ = [
    "TOPIC_IDS",
    "Offsets",
    "Planner",
    "TopicIds",
    "Views",
    "canonical",
    "ids_of",
    "rate_limited",
    "split_ids",
    "with_ids",
]

log = logging.getLogger("spark_source")

Offsets = dict[str, dict[str, int]]
"""Kafka's offset JSON: topic → partition (as text) → next offset to read."""
Views = dict[str, dict[int, PartitionView]]
"""Topic → partition → its files and bounds at one table version."""
TopicIds = dict[str, str | None]
"""Topic → the ID of the topic positions are of (None: a topic from before IDs)."""
TOPIC_IDS = "@topic_ids"
"""The key of the offset JSON that holds :data:`TopicIds` (``@`` cannot be in a topic name)."""


class Planner:
    """Reads the subscribed topics' logs (never their data) for one query. Not thread-safe."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": options.root}))
        self._readers: dict[str, TopicReader] = {}

    def topics(self, *, missing_ok: bool = False) -> list[str]:
        """The subscribed topics that exist now (with ``missing_ok``, those named by ``subscribe`` that do).

        Raises:
            UnknownTopicOrPartitionError: a topic named by ``subscribe`` does not exist.
        """
        if self.options.pattern is not None:
            return [t for t in self.catalog.list_topics() if self.options.matches(t)]
        missing = [t for t in self.options.topics if not self.catalog.exists(t)]
        if missing and not missing_ok:
            raise UnknownTopicOrPartitionError(f"subscribed topic(s) do not exist: {', '.join(missing)}")
        return sorted(t for t in self.options.topics if t not in missing)

    def views(self, *, missing_ok: bool = False) -> Views:
        """Every partition of every subscribed topic at the topics' newest versions.

        ``missing_ok``: a subscribed topic that does not exist now (deleted, and
        perhaps about to be created again) is left out, as one ``subscribePattern``
        no longer matches is; a position of it is then gone, and the topic is read
        from its start when it is back.
        """
        out: Views = {}
        for t in self.topics(missing_ok=missing_ok):
            reader = self._readers.get(t)
            try:
                if reader is None:
                    reader = self._readers[t] = TopicReader(self.catalog, t)
                reader.refresh()
                parts = range(reader.num_partitions())
                out[t] = {p: reader.partition_view(p) for p in parts if self.options.reads(t, p)}
            except UnknownTopicOrPartitionError:  # deleted since it was listed, or while it was read
                self._readers.pop(t, None)
                if self.options.pattern is not None or missing_ok:
                    continue  # as if listed a moment later
                raise
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

    def begin(
        self, topic: str, partition: int, position: int | None, view: PartitionView, ids: TopicIds | None = None
    ) -> int:
        """Where reading ``partition`` resumes from ``position`` (None: a new partition, from its start).

        ``ids``: the topic IDs ``position`` is of, when known. A position of a
        topic deleted and created again since (another ID) is data loss: the
        records after it are gone, and the new topic is read from its start.

        Raises:
            InconsistentTopicIdError: with ``failOnDataLoss=true``, the topic was
                created again since the position was taken (the message names both IDs).
            OffsetOutOfRangeError: with ``failOnDataLoss=true``, the position is
                outside [log start offset, high watermark].
        """
        if position is None:
            return view.log_start_offset
        lo, hw = view.log_start_offset, view.high_watermark
        if ids is not None and topic in ids and ids[topic] != view.topic_id:
            what = (
                f"topic '{topic}' was deleted and created again: the query's offset {position} of partition "
                f"{partition} is of topic ID {ids[topic]}, and the topic now has ID {view.topic_id}"
            )
            if self.options.fail_on_data_loss:
                raise InconsistentTopicIdError(
                    f"{what}; set failOnDataLoss=false to read the new topic from its log start offset {lo} instead"
                )
            log.warning("failOnDataLoss=false: %s; reading the new topic from offset %d", what, lo)
            return lo
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

    def tasks(self, start: Offsets, end: Offsets, views: Views, ids: TopicIds | None = None) -> list[ReadTask]:
        """Spark's input partitions for ``start`` → ``end``: the :meth:`slices`, small ones packed together."""
        return pack_slices(self.slices(start, end, views, ids), self.options.max_records_per_partition)

    def slices(self, start: Offsets, end: Offsets, views: Views, ids: TopicIds | None = None) -> list[TopicSlice]:
        """Input partitions covering ``start`` (of topic IDs ``ids``, when known) → ``end`` from ``views``' files."""
        out: list[TopicSlice] = []
        for t, parts in end.items():
            for p_text, e in parts.items():
                p = int(p_text)
                view = views.get(t, {}).get(p)
                if view is None:
                    raise UnknownTopicOrPartitionError(f"partition {p} of topic '{t}' does not exist")
                s = self.begin(t, p, start.get(t, {}).get(p_text), view, ids)
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


def canonical(offsets: Mapping[str, Any]) -> dict[str, Any]:
    """``offsets`` with topics and partitions sorted (partitions numerically), topic IDs kept (sorted too)."""
    positions, ids = split_ids(offsets)
    return with_ids(positions, ids)


def split_ids(offsets: Mapping[str, Any]) -> tuple[Offsets, TopicIds | None]:
    """Offset JSON as Spark hands it back: (positions, topic IDs or None when it carries none)."""
    positions = {
        t: {p: int(parts[p]) for p in sorted(parts, key=int)} for t, parts in sorted(offsets.items()) if t != TOPIC_IDS
    }
    raw = offsets.get(TOPIC_IDS)
    ids = None if raw is None else {str(t): (None if i is None else str(i)) for t, i in raw.items()}
    return positions, ids


def with_ids(positions: Mapping[str, Mapping[str, int]], ids: Mapping[str, str | None] | None) -> dict[str, Any]:
    """The offset JSON of ``positions`` with the IDs of their topics (sorted; see the module docstring)."""
    out: dict[str, Any] = {
        t: {p: int(positions[t][p]) for p in sorted(positions[t], key=int)} for t in sorted(positions)
    }
    if ids is not None:
        out[TOPIC_IDS] = {t: ids[t] for t in sorted(ids) if t in positions}
    return out


def ids_of(views: Views) -> TopicIds:
    """The ID of each topic of ``views`` (as loaded with them)."""
    return {t: next(iter(parts.values())).topic_id if parts else None for t, parts in views.items()}


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
