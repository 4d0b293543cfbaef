"""Where keys, ACLs and quotas live, shared by every node of a root.

:class:`SecurityStore` is the interface the server and the CLI use;
:class:`FileSecurityStore` keeps three JSON files under
``<logstore.root>/_security/`` (``keys.json``, ``acls.json``,
``quotas.json``) for embedded mode, one node or several sharing a root;
:class:`~logstore.cluster.security_store.ZooKeeperSecurityStore` keeps the
same three documents in ZooKeeper for cluster mode. Both are a
:class:`DocumentStore`: three JSON lists, each replaced whole by a change.

Durability and visibility: a change takes a lock file (``fcntl.flock``: one
writer at a time, on one host's file system), reads the current file, writes
the new one to a temp file, fsyncs it and renames it over the old one, so a
reader sees the old or the new content, never a torn one. Readers re-check the
files' identity (inode, size, mtime) at most once per ``refresh_s`` (1 s) and
re-read a changed file, so a change reaches every node within about a second.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

import orjson

from logstore.errors import KafkaStorageError
from logstore.security.acl import AclBinding
from logstore.security.keys import ApiKey
from logstore.security.quotas import Quota
from logstore.storage import is_object_store

__all__ = ["DocumentStore", "FileSecurityStore", "SecurityState", "SecurityStore"]

DOCUMENTS = ("keys", "acls", "quotas")
"""The three documents of a store, each a JSON list."""


@dataclass(frozen=True)
class SecurityState:
    """One consistent-enough view of keys (by id), ACLs and quotas (by ``(principal, client_id)``)."""

    keys: dict[str, ApiKey] = field(default_factory=dict)
    acls: tuple[AclBinding, ...] = ()
    quotas: dict[tuple[str, str | None], Quota] = field(default_factory=dict)


class SecurityStore(Protocol):
    """Keys, ACLs and quotas shared by every node; changes reach every node within 5 s."""

    def snapshot(self) -> SecurityState:
        """The current state (cheap: cached, re-read only when the store changed)."""
        ...

    def add_key(self, key: ApiKey) -> None: ...

    def revoke_keys(self, *, principal: str | None = None, key_id: str | None = None) -> list[ApiKey]:
        """Remove the keys of ``principal``, or the key ``key_id``; returns the removed ones."""
        ...

    def add_acls(self, acls: list[AclBinding]) -> list[AclBinding]:
        """Add bindings; returns those that were not there yet."""
        ...

    def remove_acls(self, acls: list[AclBinding]) -> list[AclBinding]:
        """Remove bindings; returns those that were there."""
        ...

    def set_quota(self, quota: Quota) -> None:
        """Set (replace) the quota of ``(quota.principal, quota.client_id)``; with no rate at all, remove it."""
        ...

    def close(self) -> None:
        """Release what the store holds (a ZooKeeper session); the server calls it on shutdown."""
        ...


Change = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
"""A change of one document: the current list in, the new list out."""


class DocumentStore:
    """A :class:`SecurityStore` over three JSON-list documents (:data:`DOCUMENTS`); subclasses say where they live.

    A subclass implements :meth:`_update` (apply a change atomically against the
    current document) and keeps :attr:`_state` current in :meth:`snapshot`.
    """

    _state: SecurityState

    def snapshot(self) -> SecurityState:
        return self._state

    def _update(self, name: str, change: Change) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release here (files are opened per read or change); a subclass with a session ends it."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @staticmethod
    def _state_of(docs: dict[str, list[dict[str, Any]]]) -> SecurityState:
        return SecurityState(
            keys={d["key_id"]: ApiKey.from_dict(d) for d in docs["keys"]},
            acls=tuple(AclBinding.from_dict(d) for d in docs["acls"]),
            quotas={(q.principal, q.client_id): q for q in map(Quota.from_dict, docs["quotas"])},
        )

    def add_key(self, key: ApiKey) -> None:
        self._update("keys", lambda doc: [*doc, key.to_dict()])

    def revoke_keys(self, *, principal: str | None = None, key_id: str | None = None) -> list[ApiKey]:
        removed: list[ApiKey] = []

        def change(doc: list[dict[str, Any]]) -> list[dict[str, Any]]:
            removed.clear()  # a store may apply a change more than once (compare-and-set retries)
            keep = []
            for d in doc:
                if (principal is not None and d["principal"] == principal) or (
                    key_id is not None and d["key_id"] == key_id
                ):
                    removed.append(ApiKey.from_dict(d))
                else:
                    keep.append(d)
            return keep

        self._update("keys", change)
        return removed

    def add_acls(self, acls: list[AclBinding]) -> list[AclBinding]:
        added: list[AclBinding] = []

        def change(doc: list[dict[str, Any]]) -> list[dict[str, Any]]:
            added.clear()
            have = {AclBinding.from_dict(d) for d in doc}
            for acl in acls:
                if acl not in have:
                    have.add(acl)
                    added.append(acl)
                    doc.append(acl.to_dict())
            return doc

        self._update("acls", change)
        return added

    def remove_acls(self, acls: list[AclBinding]) -> list[AclBinding]:
        removed: list[AclBinding] = []
        drop = set(acls)

        def change(doc: list[dict[str, Any]]) -> list[dict[str, Any]]:
            removed.clear()
            keep = []
            for d in doc:
                acl = AclBinding.from_dict(d)
                if acl in drop:
                    removed.append(acl)
                else:
                    keep.append(d)
            return keep

        self._update("acls", change)
        return removed

    def set_quota(self, quota: Quota) -> None:
        def change(doc: list[dict[str, Any]]) -> list[dict[str, Any]]:
            keep = [d for d in doc if (d["principal"], d.get("client_id")) != (quota.principal, quota.client_id)]
            if quota.producer_byte_rate is not None or quota.consumer_byte_rate is not None:
                keep.append(quota.to_dict())
            return keep

        self._update("quotas", change)


_FileId = tuple[int, int, int]


class FileSecurityStore(DocumentStore):
    """:class:`SecurityStore` in ``<root>/_security/`` (local file systems; see the module doc)."""

    def __init__(self, root: str, *, refresh_s: float = 1.0) -> None:
        self.dir = os.path.join(root, "_security")
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._checked_at = -float("inf")
        self._ids: dict[str, _FileId | None] = {}
        self._docs: dict[str, list[dict[str, Any]]] = {name: [] for name in DOCUMENTS}
        self._state = SecurityState()

    # -- reading ------------------------------------------------------------------

    def snapshot(self) -> SecurityState:
        now = time.monotonic()
        if now - self._checked_at < self._refresh_s:
            return self._state
        with self._lock:
            if now - self._checked_at >= self._refresh_s:
                self._reload()
                self._checked_at = time.monotonic()
            return self._state

    def _reload(self) -> None:
        changed = False
        for name in DOCUMENTS:
            fid = self._file_id(name)
            if fid != self._ids.get(name, ()):
                self._docs[name] = self._read(name)
                self._ids[name] = fid
                changed = True
        if changed:
            self._state = self._state_of(self._docs)

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, f"{name}.json")

    def _file_id(self, name: str) -> _FileId | None:
        try:
            st = os.stat(self._path(name))
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _read(self, name: str) -> list[dict[str, Any]]:
        try:
            with open(self._path(name), "rb") as f:
                doc = orjson.loads(f.read())
        except FileNotFoundError:
            return []
        except (OSError, orjson.JSONDecodeError) as e:
            raise KafkaStorageError(f"cannot read {self._path(name)}: {e}") from e
        return list(doc)

    # -- writing ------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if is_object_store(self.dir):  # else a local folder named "s3:" would take the change and look like success
            raise KafkaStorageError(
                f"keys, ACLs and quotas cannot be stored under logstore.root '{self.dir}' yet: they have no "
                "object-store form (docs/object-storage.md)"
            )
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, ".lock"), "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _update(self, name: str, change: Change) -> None:
        with self._locked():
            doc = change(self._read(name))
            path = self._path(name)
            tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
            try:
                with open(tmp, "wb") as f:
                    f.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(tmp, 0o600)
                os.replace(tmp, path)
                dir_fd = os.open(self.dir, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            except OSError as e:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise KafkaStorageError(f"cannot write {path}: {e}") from e
        self._checked_at = -float("inf")  # this process sees its own change at once
