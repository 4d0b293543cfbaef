"""The logstore source's fixed cost per query and per Python worker: what its Python processes import and build.

Spark starts a new Python process for every streaming query of the source (its
offsets, plans and group commits run there) and reuses Python workers for
``read()``. Both run the source's code in a plain interpreter, so these tests
drive the same methods in a child process, without a JVM.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.types import StringType

from logstore.config import LogstoreConfig
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch

# One streaming query's life in the source, as Spark drives it (availableNow, no group), then read() of every slice.
_QUERY = """
import json, sys
from pyspark.sql.streaming.datasource import ReadAllAvailable
from spark_source import LogstoreDataSource

options = json.loads(sys.argv[1])
reader = LogstoreDataSource(options).streamReader(None)
start = reader.initialOffset()
reader.prepareForTriggerAvailableNow()
end = reader.latestOffset(start, ReadAllAvailable())
batches = []
for part in reader.partitions(start, end):
    for rb in reader.read(part):
        batches.append({
            "rows": rb.num_rows,
            "topics": sorted(set(rb.column("topic").to_pylist())),
            "partitions": sorted(set(rb.column("partition").to_pylist())),
            "read": sorted({s.partition for s in part.slices}),
            "offsets": [rb.column("offset")[0].as_py(), rb.column("offset")[-1].as_py()],
        })
reader.latestOffset(end, ReadAllAvailable())
reader.commit(end)
reader.stop()
core = sorted(m for m in sys.modules if m.startswith("logstore"))
print(json.dumps({"pandas_imported": "pandas" in sys.modules, "core_modules": core, "batches": batches}))
"""


def _run_query(options: dict[str, str]) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _QUERY, json.dumps(options)], check=True, capture_output=True, text=True, timeout=120
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_planning_and_reading_never_import_pandas(
    config: LogstoreConfig, store: LogStore, make_topic: Callable[..., str]
) -> None:
    # pandas costs ~0.4 s of CPU to import: once per streaming query in the planning process, once per new
    # Python worker in read(). Nothing the source does needs it (pa.table() and pa.scalar() would import it).
    t = make_topic(partitions=2)
    store.append(t, [ProducerBatch(input_table([0, 1, 0], [b"a", b"b", b"c"]))])

    result = _run_query({"logstore.root": config.root, "subscribe": t, "startingOffsets": "earliest"})

    assert sum(b["rows"] for b in result["batches"]) == 3  # type: ignore[attr-defined, index]
    assert result["pandas_imported"] is False


def test_the_query_process_imports_no_more_of_the_core_than_it_reads(
    config: LogstoreConfig, store: LogStore, make_topic: Callable[..., str]
) -> None:
    # Every query start pays its planning process's imports before its first batch. The source reads logs and
    # files and commits group offsets: the store, the topic writer, the WAL and acks=1 promises are not its.
    t = make_topic(partitions=1)
    store.append(t, [ProducerBatch(input_table([0], [b"a"]))])

    result = _run_query({"logstore.root": config.root, "subscribe": t, "startingOffsets": "earliest"})

    imported = set(result["core_modules"])  # type: ignore[call-overload]
    assert {"logstore.log.reader", "logstore.log.catalog"} <= imported
    assert not imported & {"logstore.store", "logstore.log.writer", "logstore.log.wal", "logstore.log.promises"}


def test_every_batch_carries_its_slices_topic_and_partition(
    config: LogstoreConfig, store: LogStore, make_topic: Callable[..., str]
) -> None:
    # More records than one Arrow batch (65,536 rows): the constant columns are sliced to each batch's length.
    t = make_topic(partitions=2)
    n = 70_000
    values = pa.array(np.arange(n).astype(str).astype(object), pa.string()).cast(pa.binary())
    store.append(t, [ProducerBatch(input_table(pa.array(np.ones(n, np.int32)), values))])
    store.append(t, [ProducerBatch(input_table([0], [b"x"]))])

    result = _run_query({"logstore.root": config.root, "subscribe": t, "startingOffsets": "earliest"})

    batches = result["batches"]
    assert isinstance(batches, list)
    assert sorted(b["rows"] for b in batches) == [1, n - 65_536, 65_536]
    for b in batches:
        assert b["topics"] == [t]
        assert b["partitions"] == b["read"]  # one partition's slice a task here: partition 1's is too big to share
    assert sorted((b["read"][0], b["offsets"]) for b in batches) == [
        (0, [0, 0]),
        (1, [0, 65_535]),
        (1, [65_536, n - 1]),
    ]


def test_a_slice_of_many_small_files_reaches_spark_as_one_batch(
    config: LogstoreConfig, store: LogStore, make_topic: Callable[..., str]
) -> None:
    # A low-rate topic commits a request or two per file: a micro-batch's slice holds dozens of small files, and
    # a batch per file cost a streaming query more than the bytes did. Small files are sent together, in order.
    t = make_topic(partitions=1)
    for i in range(40):
        store.append(t, [ProducerBatch(input_table([0] * 3, [b"%d" % (3 * i + k) for k in range(3)]))])

    result = _run_query({"logstore.root": config.root, "subscribe": t, "startingOffsets": "earliest"})

    assert result["batches"] == [{"rows": 120, "topics": [t], "partitions": [0], "read": [0], "offsets": [0, 119]}]


@pytest.mark.spark
def test_python_workers_import_compiled_pyspark_not_the_zip(spark: SparkSession) -> None:
    # Every Python process Spark starts (the planning process of each streaming query, every worker) compiled
    # pyspark from $SPARK_HOME/python/lib/pyspark.zip (~0.5 s of CPU): Python caches no bytecode for a zip.
    where = udf(lambda: __import__("pyspark").__file__, StringType())

    path = spark.range(1).select(where()).first()[0]  # type: ignore[index]

    assert ".zip" not in path
    assert path.endswith("__init__.py")


def test_small_slices_of_several_partitions_reach_spark_as_one_batch(
    config: LogstoreConfig, store: LogStore, make_topic: Callable[..., str]
) -> None:
    # A low-rate stream's micro-batch holds a few records of each partition: one task reads them all, and they
    # reach Spark together, each row with its own partition and offsets in order within it.
    t = make_topic(partitions=4)
    for _ in range(3):
        store.append(t, [ProducerBatch(input_table([0, 1, 2, 3], [b"a", b"b", b"c", b"d"]))])

    result = _run_query({"logstore.root": config.root, "subscribe": t, "startingOffsets": "earliest"})

    assert result["batches"] == [
        {"rows": 12, "topics": [t], "partitions": [0, 1, 2, 3], "read": [0, 1, 2, 3], "offsets": [0, 2]}
    ]
