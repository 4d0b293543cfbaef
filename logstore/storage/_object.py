"""What the object-store forms of :class:`~logstore.storage.Storage` (S3, Azure Blob) do alike.

An object store has keys, not directories: a directory-like prefix exists when an object is under it
(:meth:`ObjectStore.exists`), and the names under it are the keys and sub-prefixes one ``/`` down
(:meth:`ObjectStore.list_names`). A tree is deleted in the order that stops a straggling writer
(:meth:`ObjectStore.delete_tree`).

Put-if-absent and conditional replace are one conditional PUT of each form (``If-None-Match: *`` /
``If-Match: <etag>``). The store's client retries a PUT whose reply was lost; when the first attempt was
stored, the retry's condition fails on that very object. So a conditional PUT that fails its condition
after a retry reads the object back and succeeds if it holds the bytes sent; one that failed at its first
attempt met another writer's object and costs no read.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from logstore.storage._base import ObjectExists, PreconditionFailed, split_location

__all__ = ["ObjectStore"]


class ConditionFailed(PreconditionFailed):
    """A conditional PUT found its condition failed (the object there, or its tag changed).

    ``retried``: the client had retried the request, so the condition may have failed on the request's own
    first attempt.
    """

    def __init__(self, location: str, *, retried: bool) -> None:
        super().__init__(location)
        self.retried = retried


class ObjectStore(abc.ABC):
    """One bucket or container of an object store (see the module docstring); thread-safe if the form's client is.

    A form names its ``scheme`` (``s3``) and what the store calls its top level (``bucket``), and gives the
    primitives below: a head, a listing, a conditional PUT, a single delete (and a batch delete if it has one),
    with its own client and its own mapping of the client's errors.
    """

    scheme: ClassVar[str]
    """The URI scheme of its locations (``s3``, ``az``)."""
    holder: ClassVar[str]
    """What the store calls its top level (``bucket``, ``container``), for error messages."""

    def __init__(self, name: str) -> None:
        self._name = name

    # -- the interface ----------------------------------------------------------

    @abc.abstractmethod
    def read_versioned(self, location: str) -> tuple[bytes, str]:
        """The whole object and its entity tag, for a later :meth:`replace`."""

    def exists(self, location: str) -> bool:
        """Whether the object exists, or any object under ``location`` taken as a directory-like prefix."""
        if self._is_object(location):
            return True
        return bool(self._list(self._key(location).rstrip("/") + "/", delimiter=True, limit=1))

    def put_if_absent(self, location: str, data: bytes) -> str:
        """See :meth:`logstore.storage.Storage.put_if_absent`."""
        try:
            return self._put_if(location, data, etag=None)
        except ConditionFailed as e:
            if (tag := self._own_retry(e, location, data)) is not None:
                return tag
            raise ObjectExists(location) from None

    def replace(self, location: str, data: bytes, etag: str) -> str:
        """See :meth:`logstore.storage.Storage.replace`."""
        try:
            return self._put_if(location, data, etag=etag)
        except FileNotFoundError:
            raise PreconditionFailed(location) from None
        except ConditionFailed as e:
            if (tag := self._own_retry(e, location, data)) is not None:
                return tag
            raise PreconditionFailed(location) from None

    def list_names(self, prefix: str) -> list[str]:
        """Names directly under the directory-like ``prefix`` (objects and sub-prefixes), sorted; [] if none."""
        key = self._key(prefix)
        key = f"{key}/" if key else ""
        return sorted({name.removeprefix(key).rstrip("/") for name in self._list(key, delimiter=True)})

    def delete_tree(self, prefix: str) -> None:
        """Delete every object under ``prefix``: the topic ID, then the Delta log newest first, then the rest."""
        key = self._key(prefix).rstrip("/") + "/"
        keys = self._list(key, delimiter=False)
        # The topic ID first (a writer about to commit sees its topic gone), then the log from its newest commit
        # (a straggler finds the commit before its next one missing and stops), then the data.
        first = [k for k in keys if k == f"{key}_topic_id"]
        log = sorted((k for k in keys if k.startswith(f"{key}_delta_log/")), reverse=True)
        rest = [k for k in keys if k not in set(first) | set(log)]
        for k in first + log:
            self._delete_key(prefix, k)
        self._delete_keys(prefix, rest)

    # -- what each form gives ---------------------------------------------------

    @abc.abstractmethod
    def _is_object(self, location: str) -> bool:
        """Whether an object is stored at exactly ``location`` (a head request)."""

    @abc.abstractmethod
    def _list(self, prefix: str, *, delimiter: bool, limit: int | None = None) -> list[str]:
        """The keys starting with the key ``prefix`` (with ``delimiter``: the keys and sub-prefixes one ``/`` down,
        the sub-prefixes ending in ``/``); at least the first ``limit`` of them when one is given."""

    @abc.abstractmethod
    def _put_if(self, location: str, data: bytes, *, etag: str | None) -> str:
        """PUT ``data`` whole at ``location`` if no object is there (``etag`` None) or if the object's tag is still
        ``etag``; the new tag.

        Raises:
            ConditionFailed: the condition failed; ``retried`` says whether the client had retried the PUT.
            FileNotFoundError: there is no object to replace.
            StorageUnreachable: the store could not be reached; the outcome is unknown.
        """

    @abc.abstractmethod
    def _delete_key(self, prefix: str, key: str) -> None:
        """Delete the object ``key`` (as listed, a key of this store) found under the tree ``prefix``."""

    def _delete_keys(self, prefix: str, keys: list[str]) -> None:
        """Delete the objects ``keys`` found under the tree ``prefix``, in no particular order: one by one, unless the
        form has a batch delete."""
        for k in keys:
            self._delete_key(prefix, k)

    # -- internals --------------------------------------------------------------

    def _key(self, location: str) -> str:
        """The key of ``location`` in this bucket (container).

        Raises:
            InvalidConfigError: ``location`` names no bucket (container).
            ValueError: ``location`` is in another bucket (container).
        """
        name, key = split_location(location, self.scheme, self.holder)
        if name != self._name:
            raise ValueError(f"{location} is not in {self.holder} {self._name}")
        return key

    def _own_retry(self, failed: ConditionFailed, location: str, data: bytes) -> str | None:
        """After a conditional PUT failed its condition: the object's tag if a retry found its own first attempt.

        Only a retried PUT can meet itself, so a condition that failed at the first attempt costs no read.

        Raises:
            OSError, KafkaStorageError: the object could not be read back (the outcome is unknown).
        """
        if not failed.retried:
            return None
        try:
            stored, tag = self.read_versioned(location)
        except FileNotFoundError:
            return None
        return tag if stored == data else None
