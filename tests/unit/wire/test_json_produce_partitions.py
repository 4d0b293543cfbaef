"""The JSON produce body's partitions: int32 as Kafka's, whichever parser reads the body."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest

from logstore.errors import InvalidRequestError
from logstore.wire.json_produce import parse_produce


@pytest.mark.parametrize(
    "records",
    [
        [{"key": "k", "value": "v"}],  # the plain fast path
        [{"value": "v", "partition": 2}, {"value": "w", "headers": {"h": "x"}}],  # the general path
    ],
)
def test_partitions_are_int32_on_every_path(records: list[dict[str, object]]) -> None:
    parsed = parse_produce(orjson.dumps({"records": records}))
    assert parsed.partitions.type == pa.int32()
    assert parsed.partitions.to_pylist() == [r.get("partition") for r in records]


@pytest.mark.parametrize("partition", [2**31, -(2**31) - 1, 2**63, 2**64 - 1])
def test_a_partition_beyond_int32_is_an_invalid_request(partition: int) -> None:
    with pytest.raises(InvalidRequestError, match=r"records\[1\]\.partition must be a 32-bit integer"):
        parse_produce(orjson.dumps({"records": [{"value": "a"}, {"value": "b", "partition": partition}]}))
