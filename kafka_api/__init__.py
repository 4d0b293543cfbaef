"""The Kafka protocol door: Kafka's own clients against the node engine (docs/kafka-protocol.md, design §12).

A sibling of ``ingest_api`` over the same core: ``logstore serve`` binds the
listener (:func:`kafka_api.server.bind_listener`) and hands it to the HTTP
app as a door on the one :class:`~logstore.node.broker.Broker`.
"""
