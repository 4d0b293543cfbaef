"""Retiring a node's pipeline of a topic that was deleted, or deleted and created again, since it opened.

A pipeline's writer holds the versions, high watermarks and epochs of the
topic it opened; a topic created again under the same name starts over at
version 0 and offset 0, with a new topic ID (:mod:`logstore.log.topic_id`).
The node notices in three ways, whichever comes first:

* its own ``DELETE`` (:meth:`~logstore.node.broker.Broker.forget`);
* the pipeline's writer, which reads the topic's ID file before every commit
  and on every idle tick, fails the commit with ``INCONSISTENT_TOPIC_ID``
  (retriable) and asks to be retired;
* in cluster mode, every change ZooKeeper shows (a topic's znode deleted or
  created again, with its ``topic_id``): the node checks each open pipeline.

Retiring closes the pipeline (what it still holds fails, retriable) and drops
the node's warm reader of the topic; the next produce, or in cluster mode the
next look at the leaders, opens the new topic at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from logstore.log.topic_id import read_id_file

if TYPE_CHECKING:
    from logstore.log.writer import TopicWriter

__all__ = ["RETIRE_WAIT_S", "Retirements", "is_current", "retire_on_thread"]

log = logging.getLogger("logstore.ingest")

RETIRE_WAIT_S = 30.0
"""Longest a request that opens a topic's pipeline waits for the old one's close (seconds)."""


def is_current(writer: TopicWriter, table_root: str) -> bool:
    """Whether the topic at ``table_root`` is still the one ``writer`` opened (one read of its ID file).

    An ID file that cannot be read says nothing: the writer's next commit finds out.
    """
    try:
        return read_id_file(table_root) == writer.topic_id
    except OSError:
        return True


class Retirements:
    """Topics whose old pipeline is being closed; opening a new one waits until it is. Thread-safe."""

    def __init__(self) -> None:
        self._closing: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def begin(self, topic: str) -> Callable[[], None]:
        """Mark ``topic``'s pipeline as closing; call what it returns once it is closed."""
        event = threading.Event()
        with self._lock:
            self._closing[topic] = event

        def done() -> None:
            with self._lock:
                if self._closing.get(topic) is event:
                    del self._closing[topic]
            event.set()

        return done

    def busy(self, topic: str) -> bool:
        """Whether an old pipeline of ``topic`` is closing now."""
        with self._lock:
            return topic in self._closing

    def closing(self) -> list[str]:
        """The topics whose old pipeline is being closed now."""
        with self._lock:
            return list(self._closing)

    def wait(self, topic: str) -> None:
        """Return once no old pipeline of ``topic`` is closing (at most :data:`RETIRE_WAIT_S`)."""
        with self._lock:
            event = self._closing.get(topic)
        if event is not None and not event.wait(RETIRE_WAIT_S):
            log.warning("topic %s: the old pipeline is still closing after %.0f s", topic, RETIRE_WAIT_S)


def retire_on_thread(topic: str, retire: Callable[[], None], then: Callable[[], None] | None) -> None:
    """``retire()`` a pipeline of ``topic`` on a new thread, then call ``then`` (cluster mode: apply the leaders
    again, so the new topic's pipeline opens with its partitions).

    For the pipeline's own committer: the close waits for the committer to stop,
    so it cannot run on the committer's turn.
    """

    def run() -> None:
        try:
            retire()
        except Exception:  # a failed close leaves the old pipeline out of the node: log it, nothing waits on it
            log.exception("topic %s: closing the pipeline of the old topic failed", topic)
        finally:
            if then is not None:
                then()

    threading.Thread(target=run, name=f"retire-{topic}", daemon=True).start()
