"""A consumer's membership of its group: the nodes it talks to, join, heartbeats on a thread of its own, leave.

aiokafka's ``consumer/group_coordinator.py``: :class:`GroupMembership` holds
what the group coordinator last told this member — its id, the newest
(generation, assignment) and whether the membership is lost — under one lock,
shared by the heartbeat thread and the application's thread. It applies
nothing itself: the :class:`~logstore.client.Consumer` applies assignments
inside ``poll`` and acknowledges them here, and the next heartbeat tells the
coordinator.

A member talks to one node, which forwards member requests to the group's
coordinator node; when that node cannot be reached every client moves on to
the next bootstrap server.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from logstore.client._http import assigned_partitions, http_client, raise_for
from logstore.errors import (
    IllegalGenerationError,
    KafkaStorageError,
    LogstoreError,
    NetworkExceptionError,
    UnknownMemberIdError,
    UnknownServerError,
)
from logstore.structs import TopicPartition

__all__ = ["GroupMembership"]

log = logging.getLogger("logstore.client")


class GroupMembership:
    """The membership of one consumer (thread-safe; see the module docstring).

    Args:
        conf: the consumer's config (Kafka's dotted keys, defaults filled in).
        stopped_polling: whether the application has not polled for longer than
            ``max.poll.interval.ms`` (asked on the heartbeat thread).
        record_error: hands an error of the heartbeat thread to the application's next poll.
    """

    def __init__(
        self,
        conf: Mapping[str, Any],
        *,
        stopped_polling: Callable[[], bool],
        record_error: Callable[[LogstoreError], None],
    ) -> None:
        self._conf = conf
        self.group: str = conf["group.id"]
        urls = [u.strip() for u in str(conf["bootstrap.servers"]).split(",") if u.strip()]
        self._urls = [u if "://" in u else f"http://{u}" for u in urls]
        self._url = self._urls[0]
        key, ca = conf["api.key"], conf["ssl.ca.location"]
        cert = conf["ssl.certificate.location"]
        tls = {"ca_file": ca, "client_cert": (cert, conf["ssl.key.location"] or cert) if cert else None}
        self.client = http_client(self._url, timeout_s=60, api_key=key, **tls)
        """For joining, fetching and leaving (the application's thread)."""
        self.commit_client = http_client(self._url, timeout_s=60, api_key=key, **tls)
        """For commits (the consumer's committer thread)."""
        self._hb_client = http_client(self._url, timeout_s=30, api_key=key, **tls)
        self._stopped_polling = stopped_polling
        self._record_error = record_error
        self.lock = threading.Lock()
        """Guards every field below; held only briefly."""
        self.member_id: str | None = None
        self.latest: tuple[int, frozenset[TopicPartition]] = (-1, frozenset())
        """The newest (generation, assignment) the coordinator sent."""
        self.acked: int | None = None
        """The generation whose assignment the consumer has applied (the next heartbeat acknowledges it)."""
        self.lost = False
        """The member left or was removed: the consumer gives up its partitions and joins again."""
        self._poll_exceeded: str | None = None
        """Why the heartbeat thread left the group; raised by the next poll."""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- requests ---------------------------------------------------------------

    def call(self, client: httpx.Client, method: str, path: str, **kw: Any) -> Any:
        """One request; its JSON answer, or the error it names (an unreachable node: the next one is tried)."""
        try:
            r = client.request(method, path, **kw)
        except httpx.TransportError as e:
            raise self.unreachable(e) from e
        raise_for(r)
        return r.json() if r.content else None

    def unreachable(self, e: httpx.TransportError) -> NetworkExceptionError:
        """Move every client to the next bootstrap server (the retry goes there) and describe the failure."""
        failed = self._url
        with self.lock:
            if self._url == failed and len(self._urls) > 1:
                self._url = self._urls[(self._urls.index(failed) + 1) % len(self._urls)]
                for client in (self.client, self._hb_client, self.commit_client):
                    client.base_url = httpx.URL(self._url)
        return NetworkExceptionError(f"cannot reach {failed}: {e}")

    # -- membership -------------------------------------------------------------

    def join(self, topics: list[str]) -> None:
        """Join the group for ``topics`` (a new member id, generation and assignment)."""
        body = self.call(
            self.client,
            "POST",
            f"/v1/groups/{self.group}/members",
            json={
                "topics": topics,
                "assignor": self._conf["partition.assignment.strategy"],
                "session_timeout_ms": int(self._conf["session.timeout.ms"]),
                "auto.offset.reset": self._conf["auto.offset.reset"],
                "max.poll.interval.ms": int(self._conf["max.poll.interval.ms"]),
            },
        )
        with self.lock:
            self.member_id = body["member_id"]
            self.acked = body["generation"]  # a joining member has nothing to give up yet
            self.lost = False
            self.latest = (body["generation"], assigned_partitions(body["assignment"]))

    def start_heartbeats(self) -> None:
        """Start the heartbeat thread (once); it runs until :meth:`close`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._heartbeats, name="logstore-heartbeat", daemon=True)
            self._thread.start()

    def heartbeat_soon(self) -> None:
        """Heartbeat now rather than at the next ``heartbeat.interval.ms`` (to acknowledge a revocation)."""
        self._wake.set()

    def heartbeat(self) -> None:
        """Keep the session alive, acknowledge :attr:`acked` and learn the newest assignment."""
        with self.lock:
            member, acked = self.member_id, self.acked
        if member is None or self.lost:
            return
        try:
            body = self.call(
                self._hb_client,
                "POST",
                f"/v1/groups/{self.group}/members/{member}/heartbeat",
                json={"generation": acked},
            )
        except UnknownMemberIdError as e:
            with self.lock:
                if self.member_id == member:
                    self.lost = True  # poll() gives everything up and joins again
                    # The server's bound on fetches fired before this thread's: it counts from the last
                    # fetch, which comes before the end of the poll this side counts from, so it can fire
                    # while this side's clock is still just under the bound (its reason names the bound).
                    if self._stopped_polling() or "max.poll.interval.ms" in str(e):
                        self._poll_exceeded = self._poll_exceeded_message()
            return
        with self.lock:
            if self.member_id == member and body["generation"] >= self.latest[0]:
                self.latest = (body["generation"], assigned_partitions(body["assignment"]))

    def rebalance_waiting(self, generation: str | None) -> bool:
        """A fetch answered with a newer generation than the member knows: the coordinator has a change for it."""
        if generation is None or not generation.isdigit():
            return False  # a server without the header: heartbeats alone bring changes
        with self.lock:
            return int(generation) > self.latest[0]

    def leave_for_poll_interval(self) -> None:
        """Leave the group: the application stopped polling, so others take over its partitions."""
        with self.lock:
            member = self.member_id
            if member is None or self.lost:
                return
            self.lost = True
            self._poll_exceeded = self._poll_exceeded_message()
        log.warning("%s", self._poll_exceeded)
        # already gone (the server enforces the bound too), or unreachable (its session then expires)
        with contextlib.suppress(UnknownMemberIdError, KafkaStorageError, NetworkExceptionError):
            self.call(self._hb_client, "DELETE", f"/v1/groups/{self.group}/members/{member}")

    def take_poll_exceeded(self) -> str | None:
        """Why the member left for exceeding ``max.poll.interval.ms`` (once), or None."""
        with self.lock:
            exceeded, self._poll_exceeded = self._poll_exceeded, None
        return exceeded

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` as this member (on the committer's client); retried once after a rebalance."""
        for attempt in range(2):
            with self.lock:
                member, generation = self.member_id, self.latest[0]
            try:
                self.call(
                    self.commit_client,
                    "POST",
                    f"/v1/groups/{self.group}/members/{member}/offsets",
                    json={
                        "generation": generation,
                        "offsets": [
                            {"topic": tp.topic, "partition": tp.partition, "offset": o} for tp, o in offsets.items()
                        ],
                    },
                )
                return
            except IllegalGenerationError:
                if attempt:
                    raise
                # The group moved on since our last heartbeat: learn the new generation (the partitions may
                # still be ours, revoked but not yet acknowledged) and try once more.
                self.heartbeat()

    def seek(self, positions: Mapping[TopicPartition, int]) -> None:
        """Move the group's fetch positions of this member's partitions (the coordinator keeps them)."""
        entries = [{"topic": tp.topic, "partition": tp.partition, "offset": o} for tp, o in positions.items()]
        self.call(
            self.client,
            "POST",
            f"/v1/groups/{self.group}/members/{self.member_id}/positions",
            json={"positions": entries},
        )

    def close(self) -> None:
        """Stop the heartbeat thread, leave the group (the others rebalance at once), close the clients."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        if self.member_id is not None:
            with contextlib.suppress(LogstoreError):
                self.call(self.client, "DELETE", f"/v1/groups/{self.group}/members/{self.member_id}")
        for c in (self.client, self._hb_client, self.commit_client):
            c.close()

    def _heartbeats(self) -> None:
        interval = self._conf["heartbeat.interval.ms"] / 1000
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if self._stopped_polling():
                    self.leave_for_poll_interval()
                self.heartbeat()
            except (KafkaStorageError, NetworkExceptionError) as e:
                log.warning("heartbeat of group '%s' failed (%s); retrying in %.1f s", self.group, e, interval)
            except LogstoreError as e:
                self._record_error(e)
            except Exception as e:  # reported to the caller by the next poll(), never swallowed
                log.exception("heartbeat of group '%s' failed", self.group)
                self._record_error(UnknownServerError(f"heartbeat failed: {e!r}"))

    def _poll_exceeded_message(self) -> str:
        return (
            f"consumer of group '{self.group}' did not poll within max.poll.interval.ms="
            f"{self._conf['max.poll.interval.ms']}: it left the group and its partitions went to other members; "
            f"the next poll joins again"
        )
