"""What a node does to a topic's log besides appending, on both roots: checkpoints every
``checkpoint.interval`` commits (delta-rs writes them into the bucket), and retention's commits of removes."""

from __future__ import annotations

import time

from logstore.config import load_config
from logstore.log.catalog import Catalog
from logstore.log.reader import TopicReader
from logstore.log.retention import run_retention
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.storage import join, storage_for
from logstore.structs import AppendResult, ProducerBatch


def test_checkpoints_land_where_readers_and_writers_open_from(root: str) -> None:
    catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": root, "checkpoint.interval": 5}))
    catalog.create_topic("t", 2)
    writer = TopicWriter(catalog, "t")
    for i in range(12):
        (r,) = writer.append([ProducerBatch(input_table([i % 2], [b"v%d" % i]))])
        assert isinstance(r, AppendResult)
    writer.close()  # waits for the checkpoints it requested
    log = join(catalog.topic_path("t"), "_delta_log")
    assert any(n.endswith(".checkpoint.parquet") for n in storage_for(log).list_names(log))
    fresh = TopicWriter(catalog, "t")  # opens from the checkpoint
    assert [fresh.high_watermark(0), fresh.high_watermark(1)] == [6, 6]
    fresh.close()
    fetched = TopicReader(catalog, "t").fetch(1, 0)
    assert fetched.records["value"].to_pylist() == [b"v%d" % i for i in range(1, 12, 2)]


def test_retention_removes_old_files_and_moves_the_log_start(root: str) -> None:
    catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": root}))
    catalog.create_topic("t", 1, {"retention.ms": 60_000})
    writer = TopicWriter(catalog, "t")
    for i in range(3):
        (r,) = writer.append([ProducerBatch(input_table([0, 0], [b"a%d" % i, b"b%d" % i]))])
        assert isinstance(r, AppendResult)
    later = int(time.time() * 1000) + 120_000
    (report,) = run_retention(catalog, "t", now_ms=later, progress=lambda _: None)
    # Every file is past retention.ms; as Kafka keeps the active segment, the newest file stays.
    assert (report.files_removed, report.records_removed, report.log_start_offset) == (2, 4, 4)
    (r,) = writer.append([ProducerBatch(input_table([0], [b"after"]))])  # the writer steps over the removes
    assert isinstance(r, AppendResult) and r.offsets.to_pylist() == [6]
    writer.close()
    info = catalog.describe_topic("t").partitions[0]
    assert (info.log_start_offset, info.high_watermark, info.num_records) == (4, 7, 3)
