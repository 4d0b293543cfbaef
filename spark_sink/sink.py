"""Writing DataFrames into topics: ``write`` / ``writeStream`` with ``format("logstore")``.

Input columns, as Spark's Kafka sink has them: ``value`` (binary or string,
required), ``key`` (binary or string), ``headers``
(``array<struct<key string, value binary>>``), ``partition`` (int) and
``topic`` (string; the ``topic`` option wins over it). A record without
``partition`` goes by its key — murmur2, the partition Kafka's Java client and
the ingest tier pick — and key-less records of one batch stick to one partition.

Where it runs and why it is exactly-once:

* ``write`` runs on executors and only hands its rows back (Arrow) in the commit message.
* ``commit`` runs on the driver, once per micro-batch, after every task
  succeeded. It appends the batch to each topic in one Delta commit through a
  cooperative :class:`~logstore.log.writer.TopicWriter` (``join=True``): offsets
  come from the writer, gap-free, and a race with another committer (an ingest
  server) is retried, never fenced. The writer is closed after the batch (its
  lock file, checkpoint thread and fsync pool go with it). The commit is an idempotent producer
  batch: producer id = the streaming query's id (from its checkpoint; with a
  ``producerId`` option, that name joined to the query's id), sequence = the
  batch id. A batch replayed after a crash — same query, same batch id — finds
  its sequence already committed and writes nothing. A new checkpoint is a new
  query, so a new producer whose batch ids start again at 0.

Topics and save modes, as Spark's Kafka sink and a Kafka broker have them:

* a missing ``topic`` is created (``num.partitions`` of the config's
  partitions) unless the ``auto.create.topics.enable`` option is false; then
  the write fails when Spark builds the writer, before any data is read. A
  topic named only by the ``topic`` column is created at the commit.
* a batch write appends (``Append``, and ``ErrorIfExists`` — Spark's default —
  as Kafka's sink takes it; see :func:`logstore.spark.register`);
  ``Overwrite`` is refused when Spark builds the writer.
* ``kafka.*`` options of a Kafka job (``kafka.bootstrap.servers`` …) mean
  nothing here: they are ignored with one log line.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from logstore.config import load_config
from logstore.errors import (
    InvalidConfigError,
    InvalidRequestError,
    LogstoreError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from logstore.log.catalog import Catalog
from logstore.log.partitioner import Partitioner
from logstore.log.schema import HEADERS_TYPE, INPUT_SCHEMA
from logstore.log.tables import app_producer, app_producer_max, txn_version
from logstore.log.writer import TopicWriter
from logstore.structs import ProducerBatch

__all__ = ["LogstoreBatchWriter", "LogstoreStreamWriter", "SinkRows"]

log = logging.getLogger("spark_sink")

_COLUMNS = ("topic", "partition", "key", "value", "headers")


@dataclass(frozen=True)
class SinkRows(WriterCommitMessage):
    """One task's rows, in the sink's input columns (pickled back to the driver)."""

    records: pa.Table


class _Sink:
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        opts = {k.lower(): v for k, v in options.items()}
        names = set(schema.fieldNames())
        if "value" not in names:
            raise InvalidConfigError("format('logstore') writes need a 'value' column")
        self.topic = opts.get("topic") or opts.get("path") or None
        if self.topic is None and "topic" not in names:
            raise InvalidConfigError("format('logstore') writes need a 'topic' option or a 'topic' column")
        self.root = opts.get("logstore.root") or load_config().root
        self.checkpoint = opts.get("checkpointlocation")
        self.producer_id = opts.get("producerid") or None
        self.auto_create = _bool(opts.get("auto.create.topics.enable", "true"), "auto.create.topics.enable")
        ignored = sorted(k for k in opts if k.startswith("kafka."))
        if ignored:
            log.info(
                "format('logstore') ignores the Kafka client option(s) %s: it writes to the store at %s",
                ", ".join(ignored),
                self.root,
            )
        if self.topic is not None:
            self._ensure_topic(self._catalog(), self.topic)

    def _catalog(self) -> Catalog:
        return Catalog(load_config(environ={}, path=None, overrides={"logstore.root": self.root}))

    def _ensure_topic(self, catalog: Catalog, topic: str) -> None:
        """Create ``topic`` when it is missing and ``auto.create.topics.enable`` (Kafka's broker default: true).

        Raises:
            UnknownTopicOrPartitionError: the topic is missing and auto-creation is off.
        """
        if catalog.exists(topic):
            return
        if not self.auto_create:
            raise UnknownTopicOrPartitionError(
                f"topic '{topic}' does not exist in {self.root} and the sink's auto.create.topics.enable is false: "
                "create it first (logstore topics create) or drop the option"
            )
        partitions = load_config().num_partitions
        try:
            catalog.create_topic(topic, partitions)
            log.info("created topic '%s' with %d partition(s) (num.partitions)", topic, partitions)
        except TopicAlreadyExistsError:
            pass  # another writer created it meanwhile

    def _rows(self, iterator: Iterator[pa.RecordBatch]) -> SinkRows:
        batches = list(iterator)
        if not batches:
            return SinkRows(_empty())
        table = pa.Table.from_batches(batches)
        return SinkRows(table.select([c for c in _COLUMNS if c in table.column_names]))

    def _append(self, messages: list[SinkRows | None], producer_id: str | None, sequence: int | None) -> None:
        tables = [m.records for m in messages if m is not None and len(m.records)]
        catalog = self._catalog()
        data = _normalise(pa.concat_tables(tables, promote_options="permissive") if tables else _empty())
        if self.topic is not None:
            groups = {self.topic: data}
        else:
            if data["topic"].null_count:
                raise InvalidRequestError("a row has a null 'topic' and no 'topic' option was given")
            groups = {str(t): data.filter(pc.equal(data["topic"], t)) for t in pc.unique(data["topic"]).to_pylist()}
        for topic, rows in sorted(groups.items()):
            self._ensure_topic(catalog, topic)
            if producer_id is not None and sequence is not None:
                table = catalog.table(topic)
                committed = txn_version(table, app_producer_max(producer_id))
                if committed is None:  # a table written before sequences were kept per partition
                    committed = txn_version(table, app_producer(producer_id))
                if committed is not None and committed >= sequence:
                    # Only a replay of this very query's batch gets here: the producer id is the query's own.
                    log.warning(
                        "batch %d of %s is already in topic '%s' (a replay after a failure); not written again",
                        sequence,
                        producer_id,
                        topic,
                    )
                    continue
            else:
                committed = None
            # One writer per topic and batch, closed when done: a writer holds a lock-file fd, a
            # checkpoint thread and an fsync pool, and a batch already pays for opening it (a
            # cached one would have to be refreshed anyway, and outlive topics being re-created).
            writer = TopicWriter(catalog, topic, join=True)
            try:
                records = _as_input(rows, topic, writer.num_partitions, producer_id, sequence)
                # Batches with no rows for this topic leave gaps in its sequences, which the writer accepts.
                for result in writer.append([ProducerBatch(records, producer_id, sequence)]):
                    if isinstance(result, LogstoreError):
                        raise result
            finally:
                writer.close()


class LogstoreBatchWriter(_Sink, DataSourceArrowWriter):
    """``df.write.format("logstore")``: all rows of the job in one commit per topic, appended.

    Raises:
        InvalidConfigError: ``overwrite`` (``mode("overwrite")``): a topic is a log, and Spark's
            Kafka sink refuses that mode too.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, *, overwrite: bool = False) -> None:
        if overwrite:
            raise InvalidConfigError(
                "format('logstore') does not support the Overwrite save mode (nor does Spark's Kafka sink): "
                "a topic is a log, records are only appended; use mode('append')"
            )
        super().__init__(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkRows:
        return self._rows(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._append([m for m in messages if isinstance(m, SinkRows)], None, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing reached a topic: rows only travel to the driver before the commit."""


class LogstoreStreamWriter(_Sink, DataSourceStreamArrowWriter):
    """``df.writeStream.format("logstore")``: one idempotent commit per topic and micro-batch.

    The producer id is ``spark-<query id>``, or ``<producerId>-<query id>``
    with a ``producerId`` option, the query id read from
    ``<checkpointLocation>/metadata`` (Spark keeps a query's id there for its
    whole life, across restarts). A new checkpoint is a new query: its batch
    ids start at 0 again, and so does its producer's sequence, whatever
    ``producerId`` it shares with an earlier query.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        query = _query_producer_id(self.checkpoint, self.producer_id)
        self.producer_id = query if self.producer_id is None else f"{self.producer_id}-{query}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkRows:
        return self._rows(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._append([m for m in messages if isinstance(m, SinkRows)], self.producer_id, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing reached a topic: rows only travel to the driver before the commit."""


def _query_producer_id(checkpoint: str | None, producer_id: str | None) -> str:
    """``spark-<query id>`` of the query whose checkpoint is ``checkpoint``."""
    if not checkpoint:
        also = (
            f" (the producerId option '{producer_id}' alone cannot tell this query from another)" if producer_id else ""
        )
        raise InvalidConfigError(
            "writeStream.format('logstore') needs the checkpointLocation option: its query id keeps "
            f"replays exactly-once{also}"
        )
    path = os.path.join(checkpoint.removeprefix("file:"), "metadata")
    try:
        with open(path) as f:
            query_id = json.loads(f.readline())["id"]
    except (OSError, ValueError, KeyError) as e:
        raise InvalidConfigError(f"cannot read the query id from {path}: {e}") from e
    return f"spark-{query_id}"


def _bool(value: str, name: str) -> bool:
    v = str(value).strip().lower()
    if v not in ("true", "false"):
        raise InvalidConfigError(f"{name} must be true or false, got {value!r}")
    return v == "true"


def _empty() -> pa.Table:
    return pa.table({"value": pa.array([], pa.binary())})


def _normalise(t: pa.Table) -> pa.Table:
    """Any accepted input columns as (topic, partition, key, value, headers) with the sink's types."""
    n = len(t)

    def col(name: str, typ: pa.DataType) -> pa.ChunkedArray | pa.Array:
        if name not in t.column_names:
            return pa.nulls(n, typ)
        c = t[name]
        if pa.types.is_string(c.type) or pa.types.is_large_string(c.type):
            c = pc.cast(c, pa.large_string()).cast(pa.large_binary()) if typ == pa.binary() else c
        try:
            return c.cast(typ)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise InvalidRequestError(f"column '{name}' cannot be written as {typ}: {e}") from e

    return pa.table(
        {
            "topic": col("topic", pa.string()),
            "partition": col("partition", pa.int32()),
            "key": col("key", pa.binary()),
            "value": col("value", pa.binary()),
            "headers": col("headers", HEADERS_TYPE),
        }
    )


def _as_input(
    rows: pa.Table, topic: str, num_partitions: int, producer_id: str | None, sequence: int | None
) -> pa.Table:
    """``rows`` in the writer's input schema, every record's partition chosen."""
    explicit = rows["partition"].to_pylist()
    keys = rows["key"].to_pylist() if rows["key"].null_count < len(rows) else [None] * len(rows)
    parts = Partitioner().assign(topic, keys, explicit, num_partitions, producer_id=producer_id, sequence=sequence)
    return pa.Table.from_arrays(
        [parts, pa.nulls(len(rows), pa.timestamp("us", tz="UTC")), rows["key"], rows["value"], rows["headers"]],
        schema=INPUT_SCHEMA,
    )
