"""logstore's compiled kernels (``native/src``): Kafka's record batch v2 ⇄ Arrow buffers, CRC-32C.

Every function reads plain buffers (``bytes``, pyarrow buffers, numpy arrays) and works with the interpreter
lock released.
"""

from typing import Any, TypeAlias

_Buffer: TypeAlias = Any
"""Anything with the buffer protocol: bytes, memoryview, numpy arrays, pyarrow buffers (Python 3.11's typing
has no name for it that numpy's and pyarrow's stubs meet)."""

BATCH_HEADER_SIZE: int

class CorruptRecords(ValueError):
    """Malformed record batch bytes (Kafka's ``CORRUPT_MESSAGE``)."""

class RecordsTooLarge(ValueError):
    """More keys, values or headers in one batch than Arrow's 32-bit offsets address (2 GiB)."""

class Buffer:
    """Bytes owned by the extension, read-only through the buffer protocol."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

Column: TypeAlias = tuple[Buffer | None, Buffer, Buffer, int]
"""An Arrow binary array's buffers: validity (None: no nulls), int32 offsets, bytes, and its null count."""

BinaryIn: TypeAlias = tuple[_Buffer | None, _Buffer, _Buffer | None, int]
"""An Arrow binary or UTF-8 array as handed in: validity (None: no nulls), int32 offsets, bytes, array offset."""

HeadersIn: TypeAlias = tuple[_Buffer | None, _Buffer, int, BinaryIn, BinaryIn]
"""The headers column as handed in: list validity, int32 list offsets, array offset, the struct's keys, values."""

def crc32c(data: _Buffer, crc: int = 0) -> int:
    """The CRC-32C of ``data`` continued from ``crc`` (the CRC of the bytes before it; 0 to start)."""

def crc32c_portable(data: _Buffer, crc: int = 0) -> int:
    """:func:`crc32c` by table, as a CPU without SSE 4.2 computes it."""

def decode_records(
    body: _Buffer, count: int, base_timestamp_ms: int
) -> tuple[Buffer, Buffer, Column, Column, tuple[Buffer, Column, Column] | None]:
    """The ``count`` records filling ``body`` (a batch's records, decompressed).

    Returns ``(sizes, timestamps_us, keys, values, headers)``: int64 buffers of each record's encoded bytes and
    its timestamp in µs; the keys' and values' columns; None when no record has headers, else the int32 list
    offsets of each record's headers and the headers' keys (valid UTF-8) and values.

    Raises:
        CorruptRecords: malformed bytes, another record count, or bytes left over.
        RecordsTooLarge: over 2 GiB of keys, values or headers.
    """

BatchIn: TypeAlias = tuple[int, _Buffer, _Buffer, BinaryIn, BinaryIn, HeadersIn | None, int]
"""One batch to encode: rows, int64 offsets (ascending), int64 timestamps in µs, keys, values, headers, attributes."""

def encode_batches(batches: list[BatchIn], leader_epoch: int) -> bytes:
    """Uncompressed v2 batches, one per element of ``batches``, one after another in one ``bytes``; producer id,
    epoch and sequence -1, offset deltas from the records' own offsets.

    Raises:
        ValueError: buffers that do not hold their rows, or offsets that do not ascend.
    """
