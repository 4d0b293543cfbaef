"""Group leases: one live reader per (consumer group, topic).

Kafka's group coordinator hands each partition to one member of a group. A
logstore group has no broker, so a reader that wants a topic for its group
takes a lease: the file ``<root>/_groups/<group>/<topic>.lease`` holding the
owner's id, host, pid and an expiry time. The owner renews it (a heartbeat
thread) well before it expires and deletes it when it stops; a crashed owner
stops renewing, and after ``timeout_ms`` anyone may take the lease over — at
once when the owner ran on the same host and its process is gone.

Creation is atomic (``O_CREAT | O_EXCL``). Taking over an expired lease is a
delete then an exclusive create; two readers racing for the same expired
lease within that instant can both believe they won, which the next renewal
detects: a renewal that finds another owner's lease raises
:class:`~logstore.errors.GroupSubscribedToTopicError`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from logstore.errors import GroupSubscribedToTopicError, KafkaStorageError

__all__ = ["DEFAULT_LEASE_TIMEOUT_MS", "GroupLease"]

DEFAULT_LEASE_TIMEOUT_MS = 15_000
"""How long a lease outlives its owner's last renewal."""


class GroupLease:
    """The leases one reader holds for one group, on any number of topics.

    Args:
        root: the store's root directory.
        group: the consumer group.
        timeout_ms: how long a lease outlives its last renewal; the heartbeat
            renews it every third of that.
        clock_ms: wall clock in ms.

    Thread-safe: the heartbeat thread and the caller share it.
    """

    def __init__(
        self,
        root: str,
        group: str,
        *,
        timeout_ms: int = DEFAULT_LEASE_TIMEOUT_MS,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.group = group
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.dir = os.path.join(os.path.abspath(root), "_groups", _safe(group))
        self._timeout_ms = timeout_ms
        self._clock_ms = clock_ms
        self._topics: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost: GroupSubscribedToTopicError | None = None

    @property
    def topics(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._topics)

    def acquire(self, topics: list[str] | set[str] | frozenset[str]) -> None:
        """Hold the leases of ``topics`` (renewing those already held) and start the heartbeat.

        Raises:
            GroupSubscribedToTopicError: another live reader of the group holds
                one of the topics, or took over a lease this reader held.
        """
        with self._lock:
            if self._lost is not None:
                raise self._lost
            for topic in sorted(topics):
                if topic in self._topics:
                    self._renew(topic)
                else:
                    self._take(topic)
                    self._topics.add(topic)
        if self._thread is None:
            self._thread = threading.Thread(target=self._heartbeat, name=f"lease-{self.group}", daemon=True)
            self._thread.start()

    def release(self) -> None:
        """Stop renewing and delete the leases this reader holds."""
        self._stop.set()
        with self._lock:
            for topic in self._topics:
                current = self._read(topic)
                if current is not None and current.get("owner") == self.owner:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self._path(topic))
            self._topics.clear()

    # -- internals --------------------------------------------------------------

    def _path(self, topic: str) -> str:
        return os.path.join(self.dir, f"{topic}.lease")

    def _content(self) -> bytes:
        return json.dumps(
            {"owner": self.owner, "group": self.group, "expires_ms": self._clock_ms() + self._timeout_ms}
        ).encode()

    def _read(self, topic: str) -> dict[str, object] | None:
        try:
            with open(self._path(topic), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        try:
            out = json.loads(data)
        except ValueError:
            return {}  # half-written by a crashed owner: treat as expired
        return out if isinstance(out, dict) else {}

    def _take(self, topic: str) -> None:
        os.makedirs(self.dir, exist_ok=True)
        path = self._path(topic)
        current = self._read(topic)
        if current is not None:
            expires = current.get("expires_ms")
            owner = current.get("owner")
            live = isinstance(expires, int) and expires > self._clock_ms() and _owner_alive(owner)
            if live and owner != self.owner:
                raise GroupSubscribedToTopicError(
                    f"consumer group '{self.group}' already has a live reader of topic '{topic}' "
                    f"({current.get('owner')}); stop that query first, or use another group. "
                    f"A crashed reader's lease ({path}) expires {self._timeout_ms} ms after its last renewal"
                )
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError as e:
            raise GroupSubscribedToTopicError(
                f"consumer group '{self.group}' already has a live reader of topic '{topic}' (it just started)"
            ) from e
        except OSError as e:
            raise KafkaStorageError(f"cannot write group lease {path}: {e}") from e
        with os.fdopen(fd, "wb") as f:
            f.write(self._content())

    def _renew(self, topic: str) -> None:
        current = self._read(topic)
        if current is not None and current.get("owner") not in (None, self.owner):
            self._lost = GroupSubscribedToTopicError(
                f"consumer group '{self.group}' lost topic '{topic}' to another reader ({current.get('owner')}); "
                f"this reader did not renew its lease in time"
            )
            raise self._lost
        path = self._path(topic)
        tmp = f"{path}.{self.owner.replace(':', '_')}.tmp"
        with open(tmp, "wb") as f:
            f.write(self._content())
        os.replace(tmp, path)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self._timeout_ms / 3000):
            with self._lock:
                for topic in list(self._topics):
                    try:
                        self._renew(topic)
                    except (GroupSubscribedToTopicError, OSError):
                        return


def _owner_alive(owner: object) -> bool:
    """False when ``owner`` ran on this host in a process that has exited (a stopped or killed query)."""
    if not isinstance(owner, str) or owner.count(":") < 2:
        return True
    host, pid, _ = owner.rsplit(":", 2)
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another host: only the expiry time tells
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _safe(group: str) -> str:
    """A group name as one path component (group names are free text)."""
    return "".join(c if c.isalnum() or c in "._-" else f"%{ord(c):02x}" for c in group)
