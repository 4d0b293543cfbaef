"""Produce request bodies → Arrow records, with as few copies as the body allows.

A JSON body is parsed once with orjson; keys and values go straight into Arrow
string arrays (a zero-copy cast makes them binary), and only records that use
``{"b64": …}``, headers or explicit timestamps take the slower per-field path.
An Arrow IPC body (:mod:`logstore.wire.arrow_produce`) is read without a copy.
"""

from __future__ import annotations

import importlib.abc
import re
import sys
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from logstore.config import CompressionType
from logstore.errors import InvalidRequestError, InvalidTimestampError
from logstore.log.schema import HEADERS_TYPE, MAX_TIMESTAMP_MS
from logstore.wire.arrow_produce import PRODUCER_ID_HEADER, SEQUENCE_HEADER, decode_produce
from logstore.wire.json_bytes import decode_bytes

__all__ = ["MAX_PRODUCER_ID_LENGTH", "ParsedRecords", "parse_arrow", "parse_produce", "without_pandas"]

_INT64_MAX = 2**63 - 1
MAX_PRODUCER_ID_LENGTH = 256
"""Longest ``producer_id`` in characters: it is kept per topic in memory and in every Delta commit it writes."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def without_pandas() -> None:
    """Keep pyarrow from importing pandas into this process; call it at the start of a process that parses.

    pyarrow's first conversion of Python values (``pa.array`` of a list, as
    :func:`parse_produce` makes) imports pandas when it is installed — it is,
    with pyspark — only to recognise pandas' objects among the values: ~30 MiB
    of memory and ~0.4 s of CPU in every process that parses, for objects that
    never occur there. Here importing pandas fails as if it were not installed,
    and pyarrow converts as it does without it. For processes that never use
    pandas (the node, its parser processes); not for one that runs Spark or a
    notebook. Does nothing once pandas is imported.
    """
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import hook under which ``import pandas`` raises :class:`ModuleNotFoundError`."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(f"pandas is kept out of this process (import of {fullname})", name=fullname)
        return None


@dataclass(frozen=True)
class ParsedRecords:
    """One produce request, before partitions are chosen."""

    keys: pa.Array
    """binary, null = no key."""
    values: pa.Array
    """binary, null = tombstone."""
    headers: pa.Array
    timestamps: pa.Array
    """timestamp[us, UTC]; null = stamp at commit."""
    partitions: pa.Array
    """int32: the partition each record names; null = none (the partitioner chooses)."""
    producer_id: str | None
    sequence: int | None
    compression: CompressionType | None = None
    """The codec a Kafka client sent the records in (its record batches'); None for HTTP bodies
    (:attr:`~logstore.structs.ProducerBatch.compression`)."""

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def from_table(cls, table: pa.Table, producer_id: str | None, sequence: int | None) -> ParsedRecords:
        """The records of a table of :data:`~logstore.wire.arrow_produce.PRODUCE_SCHEMA` (one chunk per column)."""
        return cls(
            keys=table["key"].chunk(0),
            values=table["value"].chunk(0),
            headers=table["headers"].chunk(0),
            timestamps=table["timestamp"].chunk(0),
            partitions=table["partition"].chunk(0),
            producer_id=producer_id,
            sequence=sequence,
        )


_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
"""A partition is an int32, as in Kafka's protocol."""


def parse_produce(body: bytes) -> ParsedRecords:
    """Parse a produce request body (docs/design.md §3).

    Raises:
        InvalidRequestError: bad JSON, missing or mistyped fields.
        InvalidTimestampError: a non-integer timestamp, or one outside 0..MAX_TIMESTAMP_MS (year 9999).
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise InvalidRequestError(f"request body is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise InvalidRequestError("request body must be a JSON object with a 'records' list")
    records = doc.get("records")
    if not isinstance(records, list) or not records:
        raise InvalidRequestError("'records' must be a non-empty list")
    producer_id = doc.get("producer_id")
    sequence = doc.get("sequence")
    _check_idempotence(producer_id, sequence, "'producer_id'", "'sequence'")

    fast = _parse_plain(records, producer_id, sequence)
    if fast is not None:
        return fast
    n = len(records)
    keys: list[Any] = [None] * n
    values: list[Any] = [None] * n
    partitions: list[int | None] = [None] * n
    timestamps: list[int | None] | None = None
    headers: list[Any] | None = None
    plain = True  # every key and value a str or None
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise InvalidRequestError(f"records[{i}] must be an object")
        k = r.get("key")
        v = r.get("value")
        if not (k is None or isinstance(k, str)) or not (v is None or isinstance(v, str)):
            plain = False
        keys[i] = k
        values[i] = v
        p = r.get("partition")
        if p is not None:
            if not isinstance(p, int) or isinstance(p, bool) or not _INT32_MIN <= p <= _INT32_MAX:
                raise InvalidRequestError(f"records[{i}].partition must be a 32-bit integer or null")
            partitions[i] = p
        ts = r.get("timestamp")
        if ts is not None:
            if not isinstance(ts, int) or isinstance(ts, bool):
                raise InvalidTimestampError(f"records[{i}].timestamp must be integer milliseconds since the epoch")
            if not 0 <= ts <= MAX_TIMESTAMP_MS:
                # A Delta TIMESTAMP (and its ISO-8601 statistics) ends with year 9999.
                raise InvalidTimestampError(
                    f"records[{i}].timestamp must be in 0..{MAX_TIMESTAMP_MS} ms (year 9999), got {ts}"
                )
            if timestamps is None:
                timestamps = [None] * n
            timestamps[i] = ts
        h = r.get("headers")
        if h is not None:
            if headers is None:
                headers = [None] * n
            headers[i] = _headers(i, h)
        extra = set(r) - {"key", "value", "partition", "headers", "timestamp"}
        if extra:
            raise InvalidRequestError(f"records[{i}] has unknown field(s): {', '.join(sorted(extra))}")

    if plain:
        key_arr = pa.array(keys, pa.string()).cast(pa.binary())
        value_arr = pa.array(values, pa.string()).cast(pa.binary())
    else:
        key_arr = pa.array([decode_bytes(f"records[{i}].key", k) for i, k in enumerate(keys)], pa.binary())
        value_arr = pa.array([decode_bytes(f"records[{i}].value", v) for i, v in enumerate(values)], pa.binary())
    ts_arr = (
        pa.array([None if t is None else t * 1000 for t in timestamps], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
        if timestamps is not None
        else pa.nulls(n, pa.timestamp("us", tz="UTC"))
    )
    hdr_arr = pa.array(headers, HEADERS_TYPE) if headers is not None else pa.nulls(n, HEADERS_TYPE)
    return ParsedRecords(key_arr, value_arr, hdr_arr, ts_arr, pa.array(partitions, pa.int32()), producer_id, sequence)


def parse_arrow(body: bytes, producer_id: str | None, sequence: str | None, *, max_bytes: int) -> ParsedRecords:
    """Parse an Arrow IPC produce body (:mod:`logstore.wire.arrow_produce`) and its idempotence headers.

    ``max_bytes`` (``max.request.size``) bounds what the body decodes to, compressed buffers included.

    Raises:
        RecordListTooLargeError: the body decodes to more than ``max_bytes``.
        InvalidRequestError: see :func:`~logstore.wire.arrow_produce.decode_produce`; a bad producer id or sequence.
        InvalidTimestampError: a timestamp outside 0..MAX_TIMESTAMP_MS.
    """
    seq: int | None = None
    if sequence is not None:
        if not (sequence.isascii() and sequence.isdigit()):
            raise InvalidRequestError(f"{SEQUENCE_HEADER} must be an integer in 0..2^63-1, got '{sequence}'")
        seq = int(sequence)
    _check_idempotence(producer_id, seq, PRODUCER_ID_HEADER, SEQUENCE_HEADER)
    return ParsedRecords.from_table(decode_produce(body, max_bytes=max_bytes), producer_id, seq)


def _check_idempotence(producer_id: object, sequence: object, id_name: str, sequence_name: str) -> None:
    """The JSON body's and the Arrow body's rules for a producer id and its sequence (named as the client sent them)."""
    if producer_id is not None:
        if not isinstance(producer_id, str) or not 1 <= len(producer_id) <= MAX_PRODUCER_ID_LENGTH:
            raise InvalidRequestError(f"{id_name} must be a string of 1 to {MAX_PRODUCER_ID_LENGTH} characters")
        if _CONTROL.search(producer_id):
            raise InvalidRequestError(f"{id_name} must not contain control characters")
    if (producer_id is None) != (sequence is None):
        raise InvalidRequestError(f"{id_name} and {sequence_name} go together")
    if sequence is not None and (
        not isinstance(sequence, int) or isinstance(sequence, bool) or not 0 <= sequence <= _INT64_MAX
    ):
        raise InvalidRequestError(f"{sequence_name} must be an integer in 0..2^63-1")


_PLAIN_FIELDS = frozenset(("key", "value"))


def _parse_plain(records: list[Any], producer_id: str | None, sequence: int | None) -> ParsedRecords | None:
    """The common case in C-speed steps: only string (or null) keys and values.

    Returns None when any record needs the general path (and its precise errors).
    """
    try:
        fields = set().union(*records)
    except TypeError:
        return None  # a record that is not an object
    if not fields <= _PLAIN_FIELDS:
        return None
    try:
        values = pa.array([r.get("value") for r in records], pa.string())
        keys = pa.array([r.get("key") for r in records], pa.string()) if "key" in fields else None
    except (pa.ArrowInvalid, pa.ArrowTypeError, AttributeError):
        return None
    n = len(records)
    return ParsedRecords(
        keys.cast(pa.binary()) if keys is not None else pa.nulls(n, pa.binary()),
        values.cast(pa.binary()),
        pa.nulls(n, HEADERS_TYPE),
        pa.nulls(n, pa.timestamp("us", tz="UTC")),
        pa.nulls(n, pa.int32()),
        producer_id,
        sequence,
    )


def _headers(i: int, h: Any) -> list[dict[str, Any]]:
    if isinstance(h, dict):
        items = list(h.items())
    elif isinstance(h, list) and all(isinstance(x, dict) and set(x) <= {"key", "value"} for x in h):
        items = [(x.get("key"), x.get("value")) for x in h]
    else:
        raise InvalidRequestError(f"records[{i}].headers must be an object or a list of {{key, value}}")
    out = []
    for k, v in items:
        if not isinstance(k, str):
            raise InvalidRequestError(f"records[{i}].headers keys must be strings")
        out.append({"key": k, "value": decode_bytes(f"records[{i}].headers.{k}", v)})
    return out
