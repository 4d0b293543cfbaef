"""Records checked and stamped before they are appended: Kafka's ``LogValidator``, as pure functions.

A produce request's records arrive as a table of
:data:`~logstore.log.schema.INPUT_SCHEMA` (partition, key, value, headers,
optional timestamp). Before a commit, :func:`as_input` brings them into that
schema, :func:`check_partitions` and :func:`check_records` refuse what the
topic cannot take, and at commit :func:`stamp` gives them their offsets (from
:func:`offsets_from`), their timestamps and the timestamp type the topic's
``message.timestamp.type`` says. Nothing here reads or writes storage, so a
front end may call the checks on its own thread before queueing a batch.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logstore.config import TopicConfig
from logstore.errors import (
    InvalidRequestError,
    InvalidTimestampError,
    MessageTooLargeError,
    UnknownTopicOrPartitionError,
)
from logstore.log.schema import (
    INPUT_SCHEMA,
    MAX_TIMESTAMP_MS,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TOPIC_SCHEMA,
    record_sizes,
)

__all__ = ["as_input", "check_partitions", "check_records", "first_offsets", "offsets_from", "stamp"]


def as_input(records: pa.Table) -> pa.Table:
    """``records`` in :data:`INPUT_SCHEMA` column order; missing optional columns are null.

    Raises:
        InvalidRequestError: a column cannot be read as its type, or ``partition`` or
            ``value`` is missing, or a record has no partition.
    """
    if records.schema.equals(INPUT_SCHEMA):
        return records
    n = len(records)
    cols = []
    for f in INPUT_SCHEMA:
        if f.name in records.column_names:
            try:
                cols.append(records[f.name].cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise InvalidRequestError(f"column '{f.name}' cannot be read as {f.type}: {e}") from e
        elif f.name in ("partition", "value"):
            raise InvalidRequestError(f"records need a '{f.name}' column")
        else:
            cols.append(pa.nulls(n, f.type))
    if records["partition"].null_count:
        raise InvalidRequestError("every record needs a partition")
    return pa.Table.from_arrays(cols, schema=INPUT_SCHEMA)


def check_partitions(records: pa.Table, num_partitions: int, topic: str) -> None:
    """Every record's partition exists (``0 <= p < num_partitions``).

    Raises:
        UnknownTopicOrPartitionError: one does not; the message names the lowest or highest.
    """
    if not len(records):
        return
    parts = pc.min_max(records["partition"])
    lo, hi = parts["min"].as_py(), parts["max"].as_py()
    if lo < 0 or hi >= num_partitions:
        bad = lo if lo < 0 else hi
        raise UnknownTopicOrPartitionError(
            f"partition {bad} of topic '{topic}' does not exist (partitions: 0..{num_partitions - 1})"
        )


def check_records(records: pa.Table, config: TopicConfig, topic: str) -> int:
    """Check ``records`` against the topic's limits; returns their size in bytes.

    The size is what ``message.max.bytes`` counts (key + value + headers).

    Raises:
        MessageTooLargeError: a record over the topic's ``message.max.bytes``.
        InvalidTimestampError: a negative timestamp, or one past year 9999
            (:data:`~logstore.log.schema.MAX_TIMESTAMP_MS`), which a Delta TIMESTAMP cannot hold.
    """
    if not len(records):
        return 0
    sizes = record_sizes(records)
    biggest = pc.max(sizes).as_py()
    limit = config.message_max_bytes
    if biggest > limit:
        raise MessageTooLargeError(f"a record of {biggest} bytes exceeds message.max.bytes={limit} of topic '{topic}'")
    ts = records["timestamp"]
    if ts.null_count < len(ts):
        bounds = pc.min_max(ts.cast(pa.int64()))
        if bounds["min"].as_py() < 0:
            raise InvalidTimestampError("record timestamps must be milliseconds since the epoch, not negative")
        if bounds["max"].as_py() > MAX_TIMESTAMP_MS * 1000:  # statistics round the maximum up to a ms
            raise InvalidTimestampError(
                f"record timestamps must be at most {MAX_TIMESTAMP_MS} ms since the epoch (year 9999)"
            )
    return int(pc.sum(sizes).as_py())


def stamp(records: pa.Table, offsets: np.ndarray, now_ms: int, config: TopicConfig) -> pa.Table:
    """The rows to write: ``records`` (:data:`INPUT_SCHEMA`) with their offsets, in :data:`TOPIC_SCHEMA`.

    ``LogAppendTime`` topics get ``now_ms`` (wall clock, ms) on every record;
    ``CreateTime`` topics keep the producer's timestamps and fill missing ones with ``now_ms``.
    """
    n = len(records)
    now = pa.scalar(now_ms * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    if config.message_timestamp_type == "LogAppendTime":
        ts: pa.Array | pa.ChunkedArray = pa.repeat(now, n)
        ts_type = TIMESTAMP_LOG_APPEND_TIME
    else:
        ts = pc.fill_null(records["timestamp"], now) if records["timestamp"].null_count else records["timestamp"]
        ts_type = TIMESTAMP_CREATE_TIME
    return pa.Table.from_arrays(
        [
            records["partition"],
            pa.array(offsets, pa.int64()),
            ts,
            pa.repeat(pa.scalar(ts_type, pa.int32()), n),
            records["key"],
            records["value"],
            records["headers"],
        ],
        schema=TOPIC_SCHEMA,
    )


def offsets_from(parts: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Offsets for records on ``parts`` (in order), each partition counting up from ``base[p]``."""
    if not len(parts):
        return np.zeros(0, np.int64)
    if np.all(parts == parts[0]):
        return base[parts[0]] + np.arange(len(parts), dtype=np.int64)
    order = np.argsort(parts, kind="stable")
    sorted_parts = parts[order]
    counts = np.bincount(parts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    ranks = np.arange(len(parts), dtype=np.int64) - starts[sorted_parts]
    out = np.empty(len(parts), np.int64)
    out[order] = base[sorted_parts] + ranks
    return out


def first_offsets(parts: np.ndarray, offsets: np.ndarray) -> dict[int, tuple[int, int]]:
    """Per partition: (first offset, record count) of one batch."""
    out: dict[int, tuple[int, int]] = {}
    for p in np.unique(parts):
        mask = parts == p
        out[int(p)] = (int(offsets[mask].min()), int(mask.sum()))
    return out
