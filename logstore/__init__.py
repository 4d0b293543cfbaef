"""logstore's core: Kafka's log model on Delta tables.

Topics, partitions, offsets, idempotent producers, fencing and consumer-group
offsets. The core imports none of its callers: the ingest API, the Spark source
and sink, and the maintenance jobs build on this package, and the ``logstore``
CLI (``logstore_cli``) on all of them (docs/layout.md, checked by ``make lint``).
It serves no HTTP (:mod:`logstore.client` is a client of a server) and starts
Spark only when :func:`logstore.spark.session` is called.

Main entry points: :class:`LogStore` (the embedded store under one root),
:class:`TopicWriter` (a topic's committer), :class:`TopicReader`,
:class:`OffsetsStore`, :func:`load_config`.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from logstore.config import LogstoreConfig, TopicConfig, load_config
    from logstore.errors import LogstoreError
    from logstore.groups.offsets import OffsetsStore
    from logstore.log.catalog import Catalog
    from logstore.log.partitioner import Partitioner, murmur2
    from logstore.log.reader import TopicReader
    from logstore.log.writer import TopicWriter
    from logstore.store import LogStore
    from logstore.structs import AppendResult, FetchResult, GroupOffset, PartitionInfo, ProducerBatch, TopicInfo

_HOMES = {
    "AppendResult": "structs",
    "Catalog": "log.catalog",
    "FetchResult": "structs",
    "GroupOffset": "structs",
    "LogStore": "store",
    "LogstoreConfig": "config",
    "LogstoreError": "errors",
    "OffsetsStore": "groups.offsets",
    "PartitionInfo": "structs",
    "Partitioner": "log.partitioner",
    "ProducerBatch": "structs",
    "TopicConfig": "config",
    "TopicInfo": "structs",
    "TopicReader": "log.reader",
    "TopicWriter": "log.writer",
    "load_config": "config",
    "murmur2": "log.partitioner",
}
"""Where each public name lives. Imported on first use (PEP 562), so a process that needs one
submodule (a Spark worker planning a batch, the CLI's ``--help``) does not import the whole core."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'logstore' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"logstore.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "AppendResult",
    "Catalog",
    "FetchResult",
    "GroupOffset",
    "LogStore",
    "LogstoreConfig",
    "LogstoreError",
    "OffsetsStore",
    "PartitionInfo",
    "Partitioner",
    "ProducerBatch",
    "TopicConfig",
    "TopicInfo",
    "TopicReader",
    "TopicWriter",
    "load_config",
    "murmur2",
]
