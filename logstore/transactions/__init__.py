"""Transactions: Kafka's transactional producer, where nothing uncommitted ever reaches a topic table.

See :mod:`logstore.transactions.coordinator`; the state lives in ``<root>/_transactions/``.
"""

from logstore.transactions.coordinator import (
    STATES,
    TXN_PRODUCER,
    Appender,
    CommittedRange,
    TransactionCoordinator,
    TransactionDescription,
    begin_transaction,
)

__all__ = [
    "STATES",
    "TXN_PRODUCER",
    "Appender",
    "CommittedRange",
    "TransactionCoordinator",
    "TransactionDescription",
    "begin_transaction",
]
