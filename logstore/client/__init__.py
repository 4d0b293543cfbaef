"""Python clients for a running logstore server: :class:`Producer`, :class:`Consumer` and :class:`RemoteStore`.

They speak the HTTP API of docs/design.md §3 with ``httpx``; the rest of the core
never imports them. One module each: :mod:`~logstore.client.producer`,
:mod:`~logstore.client.consumer`, :mod:`~logstore.client.remote`. As with
confluent-kafka, ``TopicPartition`` and the ``OFFSET_*`` constants come from here too.
"""

from logstore.client.consumer import TIMESTAMP_CREATE_TIME, Consumer, Message, RebalanceCallback
from logstore.client.message import TIMESTAMP_NOT_AVAILABLE
from logstore.client.producer import DeliveryCallback, Producer
from logstore.client.remote import RemoteStore
from logstore.structs import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, OFFSET_STORED, TopicPartition

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "Consumer",
    "DeliveryCallback",
    "Message",
    "Producer",
    "RebalanceCallback",
    "RemoteStore",
    "TopicPartition",
]
