"""Group leases: one live reader per (consumer group, topic).

Kafka's group coordinator hands each partition to one member of a group. A
logstore group has no broker, so a reader that wants a topic for its group
takes a lease: a file under ``<root>/_groups/<group>/`` (the name escaped, so
any group name is one folder there) holding the owner's id, host, pid and an
expiry time. The owner renews it (a heartbeat thread)
well before it expires and marks it released when it stops; a crashed owner
stops renewing, and after ``timeout_ms`` anyone may take the lease over — at
once when the owner ran on the same host and its process is gone.

Leases have generations: ``<topic>.lease.<n>``, the highest ``n`` being the
current lease. Taking a lease (new, expired or released) creates generation
``n + 1`` with a put-if-absent (:mod:`logstore.storage`: ``os.link`` of a fully
written temporary file locally, ``If-None-Match: *`` on S3), which fails
when the name exists, so of any number of racing takers exactly one wins, and
nobody ever sees a lease half written. Generations only grow (the winner then
deletes the older ones), so a taker that judged generation ``n`` expired can
never take over a lease created after that judgement.

An owner that finds a higher generation than its own has lost the lease:
renewal raises :class:`~logstore.errors.GroupSubscribedToTopicError`, and so
does :meth:`GroupLease.acquire`, which a reader calls right before it commits
the group's offsets, so a reader that lost its topic never moves the group's
offsets back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from logstore.common.logs import describe
from logstore.errors import GroupSubscribedToTopicError, InvalidGroupIdError, KafkaStorageError
from logstore.log.catalog import validate_topic_name
from logstore.storage import ObjectExists, absolute, join, storage_for

__all__ = ["DEFAULT_LEASE_TIMEOUT_MS", "GroupLease"]

log = logging.getLogger("logstore.groups.leases")

DEFAULT_LEASE_TIMEOUT_MS = 15_000
"""How long a lease outlives its owner's last renewal."""

_LEASE = ".lease"


class GroupLease:
    """The leases one reader holds for one group, on any number of topics.

    Args:
        root: the store's root directory.
        group: the consumer group.
        timeout_ms: how long a lease outlives its last renewal; the heartbeat
            renews it every third of that.
        clock_ms: wall clock in ms (expiry times are compared across processes).

    The group's folder is ``<root>/_groups/<name>`` with the name escaped so that it
    stays one folder under ``_groups`` whatever the group is called (:func:`_safe`).

    Raises:
        InvalidGroupIdError: an empty group name.

    Thread-safe: the heartbeat thread and the caller share it.
    """

    def __init__(
        self,
        root: str,
        group: str,
        *,
        timeout_ms: int = DEFAULT_LEASE_TIMEOUT_MS,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        door: str = "",
    ) -> None:
        if not isinstance(group, str) or not group:
            raise InvalidGroupIdError("consumer group name must be a non-empty string")
        self.group = group
        self.door = door
        """What kind of reader holds the leases, written into them: ``kafka`` for a Kafka-protocol group."""
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.dir = join(absolute(root), "_groups", _safe(group))
        self._storage = storage_for(self.dir)
        self._timeout_ms = timeout_ms
        self._clock_ms = clock_ms
        self._held: dict[str, int] = {}  # topic -> the generation this reader holds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost: GroupSubscribedToTopicError | None = None
        self.renewals = 0
        """Successful heartbeat rounds (every held lease renewed)."""
        self.renewal_failures = 0
        """Heartbeat rounds that failed with an I/O error (retried at the next round)."""

    @property
    def topics(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._held)

    def acquire(self, topics: list[str] | set[str] | frozenset[str]) -> None:
        """Hold the leases of ``topics`` (renewing those already held) and start the heartbeat.

        A reader calls it right before it commits the group's offsets of ``topics``:
        it fails when another reader took one of them over.

        Raises:
            GroupSubscribedToTopicError: another live reader of the group holds
                one of the topics, or took over a lease this reader held.
            KafkaStorageError: the lease directory cannot be written.
        """
        with self._lock:
            if self._lost is not None:
                raise self._lost
            for topic in sorted(topics):
                if topic in self._held:
                    self._renew(topic)
                else:
                    self._held[topic] = self._take(topic)
        if self._thread is None:
            self._thread = threading.Thread(target=self._heartbeat, name=f"lease-{self.group}", daemon=True)
            self._thread.start()

    def generation(self, topic: str) -> int:
        """The generation of ``topic``'s lease this reader holds: its fencing token (0: it holds none)."""
        with self._lock:
            return self._held.get(topic, 0)

    def live_doors(self) -> dict[str, str]:
        """The other live readers of this group, on any topic: owner → its ``door`` ("" for HTTP members and Spark).

        A group is read through one door at a time; the Kafka listener and the
        coordinator of HTTP members ask before they admit a member.

        Raises:
            KafkaStorageError: the group's lease folder cannot be read.
        """
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise KafkaStorageError(f"cannot read the leases of group '{self.group}' in {self.dir}: {e}") from e
        out: dict[str, str] = {}
        now = self._clock_ms()
        for name in names:
            if name.startswith(".") or _LEASE not in name:
                continue
            try:
                with open(os.path.join(self.dir, name), "rb") as f:
                    content = json.loads(f.read())
            except (OSError, ValueError):
                continue  # taken over and deleted meanwhile, or not a lease
            if not isinstance(content, dict):
                continue
            owner, expires = content.get("owner"), content.get("expires_ms")
            if owner != self.owner and isinstance(expires, int) and expires > now and _owner_alive(owner):
                out[str(owner)] = str(content.get("door", ""))
        return out

    def release(self) -> None:
        """Stop renewing and mark the leases this reader holds released (free for anyone at once)."""
        self._stop.set()
        with self._lock:
            for topic, gen in self._held.items():
                if self._current(topic)[0] == gen:
                    with contextlib.suppress(OSError):
                        self._write(topic, gen, expires_ms=0)
            self._held.clear()

    # -- internals --------------------------------------------------------------

    def _path(self, topic: str, gen: int) -> str:
        stem = _topic_stem(topic)
        return join(self.dir, f"{stem}{_LEASE}.{gen}" if gen else f"{stem}{_LEASE}")

    def _generations(self, topic: str) -> list[int]:
        """The generations of ``topic``'s lease on disk, ascending (a pre-generation ``<topic>.lease`` is 0)."""
        names = self._storage.list_names(self.dir)
        prefix = f"{_topic_stem(topic)}{_LEASE}"
        gens = []
        for name in names:
            if name == prefix:
                gens.append(0)
            elif name.startswith(prefix + ".") and name[len(prefix) + 1 :].isdigit():
                gens.append(int(name[len(prefix) + 1 :]))
        return sorted(gens)

    def _current(self, topic: str) -> tuple[int, dict[str, object] | None]:
        """The newest generation and its content (``(0, None)``: no lease yet; ``{}``: unreadable)."""
        for _ in range(10):
            gens = self._generations(topic)
            if not gens:
                return 0, None
            gen = gens[-1]
            try:
                data = self._storage.read(self._path(topic, gen))
            except FileNotFoundError:
                continue  # a newer generation's taker deleted it: list again
            try:
                out = json.loads(data)
            except ValueError:
                return gen, {}  # written by another tool: treat as expired
            return gen, out if isinstance(out, dict) else {}
        raise KafkaStorageError(f"group lease of topic '{topic}' in {self.dir} keeps changing while read")

    def _content(self, gen: int, expires_ms: int) -> bytes:
        return json.dumps(
            {"owner": self.owner, "group": self.group, "generation": gen, "expires_ms": expires_ms, "door": self.door}
        ).encode()

    def _write(self, topic: str, gen: int, *, expires_ms: int) -> None:
        """Replace the content of generation ``gen`` (this reader's own) atomically."""
        self._storage.put(self._path(topic, gen), self._content(gen, expires_ms))

    def _take(self, topic: str) -> int:
        """Create the next generation of ``topic``'s lease; returns it.

        Raises:
            GroupSubscribedToTopicError: the current lease is live, or another
                taker created the next generation first.
            KafkaStorageError: the lease directory cannot be written.
        """
        try:
            gen, current = self._current(topic)
            if current is not None:
                expires = current.get("expires_ms")
                owner = current.get("owner")
                live = isinstance(expires, int) and expires > self._clock_ms() and _owner_alive(owner)
                if live and owner != self.owner:
                    raise GroupSubscribedToTopicError(
                        f"consumer group '{self.group}' already has a live reader of topic '{topic}' ({owner}); "
                        f"stop that query first, or use another group. A crashed reader's lease "
                        f"({self._path(topic, gen)}) expires {self._timeout_ms} ms after its last renewal"
                    )
            mine = gen + 1
            try:
                # The put-if-absent is the decision: it fails when another taker created this generation first.
                self._storage.put_if_absent(
                    self._path(topic, mine), self._content(mine, self._clock_ms() + self._timeout_ms)
                )
            except ObjectExists as e:
                raise GroupSubscribedToTopicError(
                    f"consumer group '{self.group}' already has a live reader of topic '{topic}' (it just started)"
                ) from e
            gens = self._generations(topic)
            if not gens or gens[-1] > mine:
                # A slow taker: it judged an older generation, and since then ours was taken and
                # cleaned away and a newer one created. The newest generation is the lease.
                self._storage.delete(self._path(topic, mine))
                raise GroupSubscribedToTopicError(
                    f"consumer group '{self.group}' already has a live reader of topic '{topic}' (it just started)"
                )
            for old in gens:
                if old < mine:
                    self._storage.delete(self._path(topic, old))
        except OSError as e:
            raise KafkaStorageError(f"cannot write the lease of group '{self.group}' in {self.dir}: {e}") from e
        return mine

    def _renew(self, topic: str) -> None:
        """Push the expiry of a held lease forward; raises if another reader took it over."""
        gen, current = self._current(topic)
        mine = self._held[topic]
        if gen != mine or current is None or current.get("owner") != self.owner:
            owner = current.get("owner") if current else None
            self._lost = GroupSubscribedToTopicError(
                f"consumer group '{self.group}' lost topic '{topic}' to another reader ({owner}); "
                f"this reader did not renew its lease in time"
            )
            raise self._lost
        self._write(topic, mine, expires_ms=self._clock_ms() + self._timeout_ms)

    def _heartbeat(self) -> None:
        # Only losing a lease to another reader ends the heartbeat (the reader sees it at its next
        # commit); an I/O error (a full disk, an NFS hiccup) is retried at the next round.
        while not self._stop.wait(self._timeout_ms / 3000):
            with self._lock:
                try:
                    for topic in list(self._held):
                        self._renew(topic)
                except GroupSubscribedToTopicError as e:
                    log.error("group lease: %s", e)
                    return
                except (OSError, KafkaStorageError) as e:
                    self.renewal_failures += 1
                    log.warning(
                        "group lease of '%s': renewal failed (%s); retrying in %d ms",
                        self.group,
                        describe(e),
                        self._timeout_ms // 3,
                    )
                    continue
                except Exception as e:  # a defect in one renewal must not end the heartbeat; acquire() still checks
                    self.renewal_failures += 1
                    log.exception(
                        "group lease of '%s': renewal failed (%s); retrying at the next round", self.group, describe(e)
                    )
                    continue
                self.renewals += 1


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


_NAME_MAX = 255
"""Bytes in one file name (ext4, xfs, APFS and NTFS alike)."""
_TMP_ROOM = len("..") + 32 + len(".tmp")
"""What a temporary file adds to a topic's name (``.<topic>.<uuid hex>.tmp``)."""


def _safe(group: str) -> str:
    """A group name as one path component: never ``.`` or ``..``, never a separator, different for every group.

    Group names are free text (Kafka allows any string, ``..`` included). Letters,
    digits, ``.``, ``_`` and ``-`` stay as they are, so an ordinary name is its own
    folder, as it has always been. Any other character is percent-encoded: ``%xx``
    up to U+00FF, ``%u`` and six hex digits above (``u`` is no hex digit, so the
    two forms never read as one another); a name of dots alone (``.``, ``..``) has
    its dots encoded too. A name whose encoded form exceeds a file name's 255 bytes
    becomes its first 128 bytes, ``~`` and 32 hex digits of its SHA-256 (``~`` is
    encoded in every other form, so no short name ends up there).
    """
    if group in (".", ".."):
        return "%2e" * len(group)
    safe = "".join(c if c.isalnum() or c in "._-" else _escape(c) for c in group)
    return _bounded(safe, _NAME_MAX, group)


def _escape(c: str) -> str:
    return f"%{ord(c):02x}" if ord(c) <= 0xFF else f"%u{ord(c):06x}"


def _bounded(name: str, limit: int, original: str) -> str:
    """``name`` when it fits in ``limit`` bytes, else a prefix of it with a hash of ``original``."""
    if len(name.encode("utf-8", "surrogatepass")) <= limit:
        return name
    prefix = name.encode("utf-8", "surrogatepass")[:128].decode("utf-8", "ignore")
    digest = hashlib.sha256(original.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{prefix}~{digest}"


def _topic_stem(topic: str) -> str:
    """A topic's name in its lease files: itself (Kafka's legal characters), hashed when too long for a file name."""
    return _bounded(validate_topic_name(topic), _NAME_MAX - _TMP_ROOM, topic)
