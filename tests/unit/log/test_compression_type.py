"""``compression.type``: validated like Kafka's, resolved to a Parquet codec, applied to a topic's new files only."""

from __future__ import annotations

import os
from collections.abc import Callable

import pyarrow.parquet as pq
import pytest

from logstore.config import CompressionType, LogstoreConfig, TopicConfig, load_config
from logstore.errors import InvalidConfigError
from logstore.log.compression import parquet_codec
from logstore.log.files import data_files
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch

VALID = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")


def codecs_of(store: LogStore, topic: str) -> list[set[str]]:
    """Per live data file (oldest first), the codecs of its column chunks as pyarrow names them."""
    files = sorted(data_files(store.catalog.table(topic)), key=lambda f: f.min_offset)
    out = []
    for f in files:
        meta = pq.ParquetFile(f.path).metadata
        out.append({meta.row_group(g).column(c).compression for g in range(meta.num_row_groups) for c in range(5)})
    return out


def produce(store: LogStore, topic: str, n: int = 3, compression: CompressionType | None = None) -> None:
    batch = ProducerBatch(input_table([0] * n, [f"v{i}".encode() for i in range(n)]), compression=compression)
    (result,) = store.append(topic, [batch])
    assert not isinstance(result, Exception), result


@pytest.mark.parametrize(
    "where",
    [
        lambda v: TopicConfig.from_overrides({"compression.type": v}),
        lambda v: LogstoreConfig().with_overrides({"compression.type": v}),
    ],
    ids=["topic", "node"],
)
def test_a_bad_value_names_the_key_and_the_valid_values(where: Callable[[str], object]) -> None:
    for bad in ("brotli", "LZ4", "", "none"):
        with pytest.raises(InvalidConfigError) as e:
            where(bad)
        assert e.value.name == "INVALID_CONFIG"
        message = str(e.value)
        assert "compression.type" in message and all(v in message for v in VALID), message


def test_every_kafka_value_is_accepted_and_producer_is_the_default() -> None:
    assert TopicConfig().compression_type == "producer"
    for v in VALID:
        assert TopicConfig.from_overrides({"compression.type": v}).compression_type == v


def test_create_and_alter_refuse_a_bad_value(store: LogStore, make_topic: Callable[..., str]) -> None:
    with pytest.raises(InvalidConfigError, match=r"compression\.type"):
        store.create_topic("t", 1, {"compression.type": "brotli"})
    assert not store.catalog.exists("t")
    t = make_topic(compression_type="gzip")
    with pytest.raises(InvalidConfigError, match=r"compression\.type"):
        store.alter_topic(t, config={"compression.type": "lzo"})
    assert store.describe_topic(t).config.compression_type == "gzip"
    assert store.catalog.table(t).metadata().configuration["logstore.compression.type"] == "gzip"


def test_codec_resolution() -> None:
    # a codec named by the topic wins over everything
    assert parquet_codec("gzip", "zstd", ["lz4"]) == "gzip"
    assert parquet_codec("uncompressed", "producer") == "none"
    assert parquet_codec("lz4", "producer") == "lz4"  # pyarrow's lz4 is Parquet's LZ4_RAW
    # producer: the batches' one codec, else the node's, else snappy
    assert parquet_codec("producer", "producer", ["zstd", "zstd"]) == "zstd"
    assert parquet_codec("producer", "producer", ["zstd", "gzip"]) == "snappy"
    assert parquet_codec("producer", "producer", ["zstd", None]) == "snappy"
    assert parquet_codec("producer", "producer") == "snappy"
    assert parquet_codec("producer", "gzip", [None]) == "gzip"


def test_the_writer_writes_the_topic_codec_and_a_change_applies_to_new_files_only(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(compression_type="zstd")
    produce(store, t)
    store.alter_topic(t, config={"compression.type": "gzip"})  # the writer is open: it reads the change
    produce(store, t)
    store.alter_topic(t, config={"compression.type": None})  # back to the default: producer, snappy for HTTP
    produce(store, t)
    assert codecs_of(store, t) == [{"ZSTD"}, {"GZIP"}, {"SNAPPY"}]
    names = sorted(os.path.basename(f.path) for f in data_files(store.catalog.table(t)))
    assert sum(n.endswith(".zstd.parquet") for n in names) == 1 and sum(n.endswith(".gz.parquet") for n in names) == 1
    assert store.fetch(t, 0, 0).records["value"].to_pylist() == [f"v{i}".encode() for i in range(3)] * 3


def test_producer_keeps_a_kafka_batch_codec(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    produce(store, t, compression="lz4")
    produce(store, t)  # no codec (an HTTP body): the node's choice
    assert codecs_of(store, t) == [{"LZ4"}, {"SNAPPY"}]
    named = make_topic(compression_type="uncompressed")
    produce(store, named, compression="zstd")  # a topic's own codec wins over the producer's
    assert codecs_of(store, named) == [{"UNCOMPRESSED"}]


def test_the_node_default_applies_to_topics_without_their_own(tmp_path: object) -> None:
    config = load_config(
        environ={}, path=None, overrides={"logstore.root": f"{tmp_path}/data", "compression.type": "zstd"}
    )
    store = LogStore(config)
    store.create_topic("plain", 1)
    store.create_topic("own", 1, {"compression.type": "snappy"})
    produce(store, "plain")
    produce(store, "own")
    assert codecs_of(store, "plain") == [{"ZSTD"}]
    assert codecs_of(store, "own") == [{"SNAPPY"}]
