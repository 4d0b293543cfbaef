"""Keyed records land where Kafka's Java client puts them; key-less records stick per batch."""

import pytest

from logstore.errors import UnknownTopicOrPartitionError
from logstore.log.partitioner import Partitioner, murmur2, to_positive

# Utils.murmur2 vectors from Kafka's own UtilsTest.
KAFKA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_keyed_partition_is_kafkas_choice() -> None:
    p = Partitioner()
    for key, h in KAFKA_MURMUR2:
        for n in (1, 3, 8, 12):
            assert p.partition_for_key(key, n) == to_positive(h) % n
    # "foobar" on 8 partitions: toPositive(-790332482) = 1357151166, % 8 = 6
    assert p.partition_for_key(b"foobar", 8) == 6


def test_empty_key_is_a_key_not_no_key() -> None:
    p = Partitioner()
    parts = p.assign("t", [b"", b"", None], [None, None, None], 16, producer_id="p", sequence=1)
    empty = to_positive(murmur2(b"")) % 16
    assert parts.to_pylist()[:2] == [empty, empty]
    assert murmur2(b"") == 275646681


def test_keyless_records_stick_to_one_partition_per_batch_and_move_on() -> None:
    p = Partitioner()
    first = set(p.assign("t", [None] * 10, [None] * 10, 4).to_pylist())
    second = set(p.assign("t", [None] * 10, [None] * 10, 4).to_pylist())
    assert len(first) == 1 and len(second) == 1 and first != second


def test_idempotent_keyless_batch_lands_on_the_same_partition_on_retry() -> None:
    a = Partitioner().assign("t", [None] * 5, [None] * 5, 8, producer_id="prod", sequence=42)
    b = Partitioner().assign("t", [None] * 5, [None] * 5, 8, producer_id="prod", sequence=42)
    assert a.equals(b)


def test_explicit_partition_wins_and_is_range_checked() -> None:
    p = Partitioner()
    assert p.assign("t", [b"k"], [2], 3).to_pylist() == [2]
    with pytest.raises(UnknownTopicOrPartitionError, match="partition 3 of topic 't'"):
        p.assign("t", [b"k"], [3], 3)


def test_explicit_keyed_and_keyless_records_of_one_request_each_go_their_way() -> None:
    """Per record: its explicit partition, else its key's, else the request's sticky one; the first bad
    explicit partition in order is named, negative ones too."""
    keys = [b"foobar", None, b"foobar", None, b"21"]
    explicit = [None, 1, 0, None, None]
    parts = Partitioner().assign("t", keys, explicit, 8, producer_id="p", sequence=7).to_pylist()
    sticky = to_positive(murmur2(b"p/7")) % 8
    assert parts == [6, 1, 0, sticky, to_positive(murmur2(b"21")) % 8]
    with pytest.raises(UnknownTopicOrPartitionError, match="partition -1 of topic 't'"):
        Partitioner().assign("t", [None] * 3, [0, -1, 9], 8)
    with pytest.raises(UnknownTopicOrPartitionError, match="partition 9 of topic 't'"):
        Partitioner().assign("t", [None] * 3, [0, 9, -1], 8)


def test_vectorised_murmur2_matches_the_scalar_one() -> None:
    import random

    import pyarrow as pa

    from logstore.log.partitioner import murmur2_array

    rnd = random.Random(3)
    keys = [bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 40))) for _ in range(2000)]
    keys += [data for data, _ in KAFKA_MURMUR2] + [None]
    got = murmur2_array(pa.array(keys, pa.binary())).tolist()
    assert got == [murmur2(k) if k is not None else 0 for k in keys]
    assert murmur2_array(pa.array(keys, pa.binary()).slice(5, 50)).tolist() == got[5:55]
