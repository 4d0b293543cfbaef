"""Consumer groups: the coordinators, partition assignors, group leases and committed offsets.

Kafka's ``group-coordinator``: :mod:`~logstore.groups.coordinator` (members over HTTP, with
server-side assignment: generations, assignments), :mod:`~logstore.groups.classic` (Kafka's classic
protocol for the Kafka listener: client-side assignors), :mod:`~logstore.groups.assignors` (pure
functions), :mod:`~logstore.groups.leases` (one live reader per group and topic) and
:mod:`~logstore.groups.offsets` (the ``_offsets`` table).
"""
