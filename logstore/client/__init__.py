"""Python clients for a running logstore server: :class:`Producer`, :class:`Consumer` and :class:`RemoteStore`.

They speak the HTTP API of docs/design.md §3 with ``httpx``; the rest of the core
never imports them. One module each: :mod:`~logstore.client.producer`,
:mod:`~logstore.client.consumer`, :mod:`~logstore.client.remote`.
"""

from logstore.client.consumer import TIMESTAMP_CREATE_TIME, Consumer, Message, RebalanceCallback
from logstore.client.producer import DeliveryCallback, Producer, RecordMetadata
from logstore.client.remote import RemoteStore

__all__ = [
    "TIMESTAMP_CREATE_TIME",
    "Consumer",
    "DeliveryCallback",
    "Message",
    "Producer",
    "RebalanceCallback",
    "RecordMetadata",
    "RemoteStore",
]
