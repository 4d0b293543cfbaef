"""The source's options, Kafka source names at the edge, one frozen object inside."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from logstore.config import load_config
from logstore.errors import InvalidConfigError

__all__ = ["EARLIEST", "LATEST", "OffsetSpec", "SourceOptions"]

log = logging.getLogger("spark_source")

EARLIEST = -2
"""Kafka's JSON offset for "the log start offset"."""
LATEST = -1
"""Kafka's JSON offset for "the high watermark"."""

OffsetSpec = str | dict[str, dict[str, int]]
"""``"earliest"``, ``"latest"``, or Kafka's JSON parsed: topic → partition (as text) → offset."""

_KNOWN = {
    "subscribe",
    "assign",
    "subscribepattern",
    "topic",
    "group",
    "startingoffsets",
    "startingtimestamp",
    "endingoffsets",
    "maxoffsetspertrigger",
    "maxrecordsperpartition",
    "failondataloss",
    "includeheaders",
    "maxrecordsreadondriver",
    "logstore.root",
    "path",
}

_KAFKA_ONLY = {
    "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "groupidprefix",
    "minpartitions",
    "maxtriggerdelay",
    "minoffsetspertrigger",
}
"""Options of Spark's Kafka source about its Kafka consumer and triggers: nothing to tune here, so ignored (logged)."""


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one ``format("logstore")`` read."""

    root: str
    """``logstore.root``; falls back to the config's ``logstore.root`` (``./data``)."""
    topics: tuple[str, ...]
    """``subscribe`` (comma list), ``topic`` or the topics of ``assign``; empty with a pattern."""
    pattern: str | None
    """``subscribePattern``: a regular expression matched against whole topic names."""
    assigned: dict[str, frozenset[int]] | None
    """``assign`` (Kafka's JSON ``{"topic": [0, 1]}``): the only partitions read; none: every partition."""
    group: str | None
    """Consumer group whose offsets the query starts from and commits to; none: no commits."""
    starting: OffsetSpec
    """``startingOffsets``; streaming default ``latest``, batch default ``earliest``."""
    starting_timestamp_ms: int | None
    """``startingTimestamp`` (ms): start at the first record at or after it; wins over ``startingOffsets``."""
    ending: OffsetSpec
    """``endingOffsets`` (batch only): ``latest`` or Kafka's JSON."""
    max_offsets_per_trigger: int | None
    """Records per micro-batch across all partitions, shared in proportion to each one's backlog."""
    max_records_per_partition: int
    """Records per Spark task: a longer partition slice is split into several input partitions."""
    fail_on_data_loss: bool
    """``failOnDataLoss`` (default true): fail when retention removed records the query had not read."""
    include_headers: bool
    max_records_read_on_driver: int
    """``maxRecordsReadOnDriver`` (streaming; default 0: never): a micro-batch of at most this many records
    is read by the driver's planning worker while it plans the batch, not by a Python task on an executor."""

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        """Read Spark's (case-insensitive) options.

        Raises:
            InvalidConfigError: an unknown option, a missing subscription, or a bad value (named).
        """
        opts = {k.lower(): v for k, v in options.items()}
        ignored = sorted(k for k in opts if k.startswith("kafka.") or k in _KAFKA_ONLY)
        if ignored:
            log.info(
                "format('logstore') ignores the Kafka source option(s) %s: it reads the store at %s",
                ", ".join(ignored),
                opts.get("logstore.root") or load_config().root,
            )
        unknown = sorted(k for k in opts if k not in _KNOWN and k not in ignored)
        if unknown:
            raise InvalidConfigError(f"unknown option(s) of format('logstore'): {', '.join(unknown)}")
        subscribe = opts.get("subscribe") or opts.get("topic") or opts.get("path")
        pattern = opts.get("subscribepattern")
        assigned = _assignment(opts["assign"]) if opts.get("assign") else None
        if sum(map(bool, (subscribe, pattern, assigned))) != 1:
            raise InvalidConfigError(
                "format('logstore') needs exactly one of 'subscribe' (or 'topic'), 'subscribePattern' and 'assign'"
            )
        topics = tuple(t.strip() for t in subscribe.split(",") if t.strip()) if subscribe else ()
        topics = tuple(sorted(assigned)) if assigned else topics
        if pattern:
            try:
                re.compile(pattern)
            except re.error as e:
                raise InvalidConfigError(f"subscribePattern '{pattern}' is not a regular expression: {e}") from e
        root = opts.get("logstore.root") or load_config().root
        max_per_trigger = _positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
        if max_per_trigger is not None and not streaming:
            max_per_trigger = None
        return cls(
            root=root,
            topics=topics,
            pattern=pattern or None,
            assigned=assigned,
            group=opts.get("group") or None,
            starting=_offset_spec(
                opts.get("startingoffsets", "latest" if streaming else "earliest"), "startingOffsets"
            ),
            starting_timestamp_ms=_positive(opts, "startingtimestamp", "startingTimestamp", allow_zero=True),
            ending=_offset_spec(opts.get("endingoffsets", "latest"), "endingOffsets"),
            max_offsets_per_trigger=max_per_trigger,
            max_records_per_partition=_positive(opts, "maxrecordsperpartition", "maxRecordsPerPartition") or 1_000_000,
            fail_on_data_loss=_bool(opts.get("failondataloss", "true"), "failOnDataLoss"),
            include_headers=_bool(opts.get("includeheaders", "false"), "includeHeaders"),
            max_records_read_on_driver=_positive(
                opts, "maxrecordsreadondriver", "maxRecordsReadOnDriver", allow_zero=True
            )
            or 0,
        )

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is subscribed."""
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def reads(self, topic: str, partition: int) -> bool:
        """Whether ``partition`` of a subscribed ``topic`` is read (``assign`` names only some)."""
        return self.assigned is None or partition in self.assigned.get(topic, frozenset())


def _assignment(value: str) -> dict[str, frozenset[int]]:
    """Kafka's ``assign`` JSON, ``{"topicA": [0, 1], "topicB": [2]}``."""
    try:
        parsed = json.loads(value)
    except ValueError as e:
        raise InvalidConfigError(f'assign must be JSON like {{"topic": [0, 1]}}, got {value!r}') from e
    if (
        not isinstance(parsed, dict)
        or not parsed
        or not all(
            isinstance(ps, list) and ps and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in ps)
            for ps in parsed.values()
        )
    ):
        raise InvalidConfigError(f'assign must be JSON like {{"topic": [0, 1]}} (partitions >= 0), got {value!r}')
    return {str(t): frozenset(ps) for t, ps in parsed.items()}


def _offset_spec(value: str, name: str) -> OffsetSpec:
    v = value.strip()
    if v.lower() in ("earliest", "latest"):
        return v.lower()
    try:
        parsed = json.loads(v)
    except ValueError as e:
        raise InvalidConfigError(f"{name} must be earliest, latest or Kafka's JSON, got {value!r}") from e
    if not isinstance(parsed, dict) or not all(isinstance(p, dict) for p in parsed.values()):
        raise InvalidConfigError(f'{name} JSON must look like {{"topic": {{"0": 23, "1": -2}}}}, got {value!r}')
    out: dict[str, dict[str, int]] = {}
    for topic, parts in parsed.items():
        for p, o in parts.items():
            if not str(p).isdigit() or not isinstance(o, int) or isinstance(o, bool) or o < LATEST - 1:
                raise InvalidConfigError(f"{name}: bad offset {o!r} for topic '{topic}' partition {p!r}")
        out[topic] = {str(p): int(o) for p, o in parts.items()}
    return out


def _positive(opts: Mapping[str, str], key: str, name: str, *, allow_zero: bool = False) -> int | None:
    if key not in opts:
        return None
    try:
        n = int(opts[key])
    except ValueError as e:
        raise InvalidConfigError(f"{name} must be an integer, got {opts[key]!r}") from e
    if n < 0 or (n == 0 and not allow_zero):
        raise InvalidConfigError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {n}")
    return n


def _bool(value: str, name: str) -> bool:
    v = str(value).strip().lower()
    if v not in ("true", "false"):
        raise InvalidConfigError(f"{name} must be true or false, got {value!r}")
    return v == "true"
