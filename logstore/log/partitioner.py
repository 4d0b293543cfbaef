"""Which partition a record goes to — the same choice Kafka's Java client makes.

* An explicit partition is honoured (after a range check).
* A keyed record goes to ``toPositive(murmur2(key)) % partitions``
  (``org.apache.kafka.clients.producer.internals.BuiltInPartitioner``). An
  empty key is a key like any other, distinct from no key.
* Records without key are sticky: a whole batch goes to one partition and the
  next batch to another, which keeps batches large (Kafka's
  ``partitioner.ignore.keys=false`` default since 3.3). For an idempotent batch
  the sticky partition is derived from ``(producer_id, sequence)``, so a retry
  lands where the original did and gets its original offsets back.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logstore.errors import UnknownTopicOrPartitionError

__all__ = ["Partitioner", "murmur2", "murmur2_array", "to_positive"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` as a signed int (``Utils.murmur2``)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length & 3
    if extra == 3:
        h ^= data[n4 + 2] << 16
    if extra >= 2:
        h ^= data[n4 + 1] << 8
    if extra >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_array(keys: pa.Array) -> np.ndarray:
    """:func:`murmur2` of every (non-null) binary key, vectorised: int32 per key (null → 0).

    Keys are grouped by length; each group is hashed as a NumPy matrix, so the
    cost per key is a few array operations instead of a Python loop.
    """
    arr = keys.cast(pa.binary())
    n = len(arr)
    out = np.zeros(n, np.uint32)
    if n == 0:
        return out.view(np.int32)
    _validity, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32, n + 1, arr.offset * 4)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    valid = np.ones(n, bool) if arr.null_count == 0 else np.asarray(arr.is_valid())
    m = np.uint32(_M)
    for length in np.unique(lengths[valid]):
        idx = np.flatnonzero((lengths == length) & valid)
        length = int(length)
        rows = data[offsets[idx][:, None] + np.arange(length)] if length else np.zeros((len(idx), 0), np.uint8)
        h = np.full(len(idx), (_SEED ^ length) & _MASK, np.uint32)
        n4 = length & ~3
        with np.errstate(over="ignore"):
            for i in range(0, n4, 4):
                k = rows[:, i : i + 4].copy().view("<u4").ravel()
                k = k * m
                k ^= k >> np.uint32(24)
                k = k * m
                h = (h * m) ^ k
            extra = length & 3
            if extra == 3:
                h ^= rows[:, n4 + 2].astype(np.uint32) << np.uint32(16)
            if extra >= 2:
                h ^= rows[:, n4 + 1].astype(np.uint32) << np.uint32(8)
            if extra >= 1:
                h ^= rows[:, n4].astype(np.uint32)
                h = h * m
            h ^= h >> np.uint32(13)
            h = h * m
            h ^= h >> np.uint32(15)
        out[idx] = h
    return out.view(np.int32)


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit."""
    return n & 0x7FFFFFFF


class Partitioner:
    """Chooses partitions for the records of one produce request.

    Holds the round of the sticky partition for key-less records; one
    instance serves one topic on one node. Not thread-safe.
    """

    def __init__(self) -> None:
        self._sticky = itertools.count()

    def partition_for_key(self, key: bytes, num_partitions: int) -> int:
        """The partition Kafka's Java client picks for ``key``."""
        return to_positive(murmur2(key)) % num_partitions

    def sticky(self, num_partitions: int, *, producer_id: str | None = None, sequence: int | None = None) -> int:
        """The partition of a request's key-less records without an explicit partition.

        An idempotent producer's request (``producer_id`` and ``sequence``) always
        lands on the same partition, so a retry goes where the original went;
        other requests take the partitions in turn.
        """
        if producer_id is not None and sequence is not None:
            return to_positive(murmur2(f"{producer_id}/{sequence}".encode())) % num_partitions
        return next(self._sticky) % num_partitions

    def assign(
        self,
        topic: str,
        keys: Sequence[bytes | None] | pa.Array,
        explicit: Sequence[int | None] | pa.Array,
        num_partitions: int,
        *,
        producer_id: str | None = None,
        sequence: int | None = None,
    ) -> pa.Array:
        """Partitions (int32) for records with these keys and explicit partitions (null: none named).

        Vectorised: the explicit partitions are one Arrow array (a list is
        converted once, in C), keys are hashed with :func:`murmur2_array`, so
        no Python runs per record. Records that all name their partition (a
        Kafka client's batch) are only checked against the count.

        Raises:
            UnknownTopicOrPartitionError: an explicit partition outside 0..num_partitions-1 (the first, in order).
        """
        named = explicit if isinstance(explicit, pa.Array) else pa.array(explicit, pa.int64())
        n = len(named)
        if n and named.null_count == 0:
            bounds = pc.min_max(named)
            if bounds["min"].as_py() >= 0 and bounds["max"].as_py() < num_partitions:
                return named.cast(pa.int32())
        sticky = self.sticky(num_partitions, producer_id=producer_id, sequence=sequence)
        key_arr = keys if isinstance(keys, pa.Array) else pa.array(keys, pa.binary())
        parts = np.full(n, sticky, np.int32)
        chosen = np.zeros(n, bool)
        if named.null_count < n:
            chosen = np.asarray(named.is_valid()) if named.null_count else np.ones(n, bool)
            given = named.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            bad = np.flatnonzero(chosen & ((given < 0) | (given >= num_partitions)))
            if len(bad):
                raise UnknownTopicOrPartitionError(
                    f"partition {given[bad[0]]} of topic '{topic}' does not exist (partitions: 0..{num_partitions - 1})"
                )
            parts[chosen] = given[chosen]
        if key_arr.null_count < n:
            hashing = ~chosen & (np.asarray(key_arr.is_valid()) if key_arr.null_count else True)
            if hashing.any():
                hashed = murmur2_array(key_arr.filter(pa.array(hashing))).view(np.uint32)
                parts[hashing] = (hashed & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)
        return pa.array(parts, pa.int32())
