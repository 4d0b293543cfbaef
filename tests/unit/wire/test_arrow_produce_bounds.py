"""Arrow produce bodies that lie about their shape are refused before they can cost the node memory or its life.

A body's decoded size is bounded by ``max.request.size`` from its IPC metadata (``decoded_size``); these are
the bodies whose metadata alone does not tell: headers whose elements take no bytes, and offsets, views or
dictionary indices that point outside their buffers.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

from logstore.errors import InvalidRequestError
from logstore.wire.arrow_produce import decode_produce, encode_produce

LIMIT = 1 << 20


def _headers_of_empty_elements(m: int) -> bytes:
    """One record whose headers are ``m`` structs of a zero-width key and a null-typed value: no bytes each."""
    key = pa.FixedSizeBinaryArray.from_buffers(pa.binary(0), m, [None, pa.py_buffer(b"")])
    element = pa.StructArray.from_arrays([key, pa.nulls(m)], names=["key", "value"])
    headers = pa.ListArray.from_arrays(pa.array([0, m], pa.int32()), element)
    return encode_produce(pa.table({"value": pa.array([b"x"]), "headers": headers}))


def test_headers_whose_elements_take_no_bytes_are_refused() -> None:
    body = _headers_of_empty_elements(2_000_000)
    assert len(body) < 1000
    with pytest.raises(InvalidRequestError, match="headers"):
        decode_produce(body, max_bytes=LIMIT)


def test_a_view_pointing_outside_its_data_buffer_is_refused() -> None:
    data = pa.py_buffer(b"A" * 200)
    views = pa.py_buffer(struct.pack("<i4sii", 100, b"AAAA", 0, 10_000_000))  # 100 bytes at offset 10 M
    value = pa.Array.from_buffers(pa.binary_view(), 1, [None, views, data])
    with pytest.raises(InvalidRequestError, match="not a valid Arrow IPC stream"):
        decode_produce(encode_produce(pa.table({"value": value})), max_bytes=LIMIT)


def test_a_dictionary_index_outside_its_dictionary_is_refused() -> None:
    indices = pa.Array.from_buffers(pa.int32(), 1, [None, pa.py_buffer(struct.pack("<i", 5))])
    value = pa.DictionaryArray.from_arrays(indices, pa.array([b"a", b"b"]), safe=False)
    with pytest.raises(InvalidRequestError, match="not a valid Arrow IPC stream"):
        decode_produce(encode_produce(pa.table({"value": value})), max_bytes=LIMIT)


def test_plain_headers_still_decode() -> None:
    headers = pa.array(
        [[{"key": "h", "value": b"v"}], None], pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    )
    table = decode_produce(encode_produce(pa.table({"value": [b"a", b"b"], "headers": headers})), max_bytes=LIMIT)
    assert table["headers"].to_pylist() == [[{"key": "h", "value": b"v"}], None]
