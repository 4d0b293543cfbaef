"""The ingest node's engine: no network protocol, so any front door (HTTP today) drives it.

Kafka's ``ReplicaManager`` side of a broker: :mod:`~logstore.node.broker` (a pipeline per topic,
fetch, lifecycle), :mod:`~logstore.node.accumulator` (acceptance, buffer memory, acks=1 promises),
:mod:`~logstore.node.committer` (group commit under the writer lock), :mod:`~logstore.node.recovery`
(write-ahead-log replay), :mod:`~logstore.node.membership` (this node in a ZooKeeper cluster) and
:mod:`~logstore.node.metrics` (Prometheus). ``ingest_api`` turns HTTP requests into calls on it.
"""
