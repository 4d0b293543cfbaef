"""The transactional side of the :class:`~logstore.client.Producer`: confluent-kafka's transaction calls over HTTP.

The producer's records of a transaction are sent (and staged by the node) as
usual, with ``transactional_id`` and ``producer_epoch`` on each request; this
keeps the producer's transaction state and makes the calls of
docs/transactions.md: ``init``, ``offsets``, ``commit`` and ``abort``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from logstore.errors import InvalidTxnStateError, LogstoreError, ProducerFencedError
from logstore.structs import TopicPartition

__all__ = ["Transactions"]

Call = Callable[..., Any]
"""``call(method, path, json=…)``: one request to a node, its JSON answer (errors raised as LogstoreError)."""


class Transactions:
    """One transactional id's state in a producer: its epoch, and whether a transaction is open (thread-safe)."""

    def __init__(self, transactional_id: str, timeout_ms: int, call: Call) -> None:
        self.transactional_id = transactional_id
        self._timeout_ms = timeout_ms
        self._call = call
        self._lock = threading.Lock()
        self._epoch: int | None = None
        self._open = False
        self._failed: LogstoreError | None = None
        self._sent = False
        """Something of the open transaction was sent to the node (which begins it there)."""

    @property
    def _path(self) -> str:
        return f"/v1/transactions/{quote(self.transactional_id, safe='')}"

    def produce_params(self) -> dict[str, str]:
        """The query parameters of a produce request inside the open transaction."""
        with self._lock:
            assert self._epoch is not None
            self._sent = True
            return {"transactional_id": self.transactional_id, "producer_epoch": str(self._epoch)}

    def check_open(self) -> None:
        """Raises InvalidTxnStateError unless a transaction is open (``produce`` outside one)."""
        with self._lock:
            if not self._open:
                raise InvalidTxnStateError(
                    f"transactional producer '{self.transactional_id}': produce() needs begin_transaction() first"
                )

    def failed(self, error: LogstoreError) -> None:
        """A record of the open transaction could not be sent: the transaction can only be aborted."""
        with self._lock:
            if self._failed is None:
                self._failed = error

    def init(self) -> None:
        """``init_transactions``: a new epoch for the id (fencing older producers of it)."""
        answer = self._call("POST", f"{self._path}/init", json={"transaction_timeout_ms": self._timeout_ms})
        with self._lock:
            self._epoch = int(answer["producer_epoch"])
            self._open = False
            self._failed = None

    def begin(self) -> None:
        """``begin_transaction``: local only; the first record or offsets begin it on the node."""
        with self._lock:
            if self._epoch is None:
                raise InvalidTxnStateError("call init_transactions() before begin_transaction()")
            if self._open:
                raise InvalidTxnStateError(f"a transaction of '{self.transactional_id}' is already open")
            self._open = True
            self._failed = None
            self._sent = False

    def send_offsets(self, positions: Sequence[TopicPartition], group_id: str) -> None:
        """``send_offsets_to_transaction``: the group's next offsets commit with the transaction."""
        epoch = self._epoch_in_transaction()
        offsets = [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset} for tp in positions]
        self._sent = True
        self._call(
            "POST", f"{self._path}/offsets", json={"producer_epoch": epoch, "group": group_id, "offsets": offsets}
        )

    def commit(self) -> list[dict[str, Any]]:
        """``commit_transaction`` (after the records are sent): where they landed, per partition."""
        epoch = self._epoch_in_transaction()
        if isinstance(self._failed, ProducerFencedError):
            raise self._failed
        if self._failed is not None:
            raise InvalidTxnStateError(
                f"a record of the transaction could not be sent ({self._failed}); abort_transaction() and retry"
            )
        if not self._sent:  # nothing was sent in it: the node never saw it begin
            answer: dict[str, Any] = {"offsets": []}
        else:
            answer = self._call("POST", f"{self._path}/commit", json={"producer_epoch": epoch})
        with self._lock:
            self._open = False
        return list(answer["offsets"])

    def abort(self) -> None:
        """``abort_transaction`` (after the records in flight are answered)."""
        epoch = self._epoch_in_transaction()
        if self._sent:
            self._call("POST", f"{self._path}/abort", json={"producer_epoch": epoch})
        with self._lock:
            self._open = False
            self._failed = None

    def _epoch_in_transaction(self) -> int:
        with self._lock:
            if self._epoch is None or not self._open:
                raise InvalidTxnStateError(
                    f"transactional producer '{self.transactional_id}' has no open transaction (begin_transaction())"
                )
            return self._epoch
