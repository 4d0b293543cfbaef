"""Consumer groups: the coordinator, partition assignors, group leases and committed offsets.

Kafka's ``group-coordinator``: :mod:`~logstore.groups.coordinator` (members, generations,
assignments), :mod:`~logstore.groups.assignors` (pure functions), :mod:`~logstore.groups.leases`
(one live reader per group and topic) and :mod:`~logstore.groups.offsets` (the ``_offsets`` table).
"""
