"""The Spark source `format("logstore")`: readStream per consumer group, batch reads.

Depends on the core (`logstore`); the core never imports it. The one data
source class also serves writes (:mod:`spark_sink`).
"""

from spark_source._slices import KAFKA_ARROW_SCHEMA, KAFKA_SCHEMA_DDL, ReadTask, TopicSlice
from spark_source.source import (
    LogstoreBatchReader,
    LogstoreDataSource,
    LogstoreStreamReader,
    PrefetchingStreamReader,
)

__all__ = [
    "KAFKA_ARROW_SCHEMA",
    "KAFKA_SCHEMA_DDL",
    "LogstoreBatchReader",
    "LogstoreDataSource",
    "LogstoreStreamReader",
    "PrefetchingStreamReader",
    "ReadTask",
    "TopicSlice",
]
