"""The Spark sink `writeStream.format("logstore")`: exactly-once writes into topics.

Depends on the core (`logstore`); the core never imports it. Spark reaches it
through the `logstore` data source of :mod:`spark_source`.
"""

from spark_sink.sink import LogstoreBatchWriter, LogstoreStreamWriter, SinkRows

__all__ = ["LogstoreBatchWriter", "LogstoreStreamWriter", "SinkRows"]
