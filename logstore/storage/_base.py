"""The storage interface (see :mod:`logstore.storage`)."""

from __future__ import annotations

from typing import Protocol

import pyarrow.fs as pafs

__all__ = ["ObjectExists", "PreconditionFailed", "Storage"]


class ObjectExists(Exception):
    """:meth:`Storage.put_if_absent` found the object already there: another writer created it first."""

    def __init__(self, location: str) -> None:
        super().__init__(f"{location} exists")
        self.location = location


class PreconditionFailed(Exception):
    """:meth:`Storage.replace` found the object changed (or gone) since it was read."""

    def __init__(self, location: str) -> None:
        super().__init__(f"{location} changed since it was read")
        self.location = location


class Storage(Protocol):
    """What the log needs of the place it keeps its files. Thread-safe.

    Every method takes a full location (a local path or an ``s3://`` URI).
    A missing object is :class:`FileNotFoundError`; any other failure is an
    ``OSError`` (the callers turn both into Kafka errors naming the topic) or,
    for a bucket that does not exist or credentials that are refused,
    :class:`~logstore.errors.KafkaStorageError` naming the setting to change.
    """

    delta_options: dict[str, str]
    """``storage_options`` for delta-rs at a location of this storage (empty for local paths)."""

    def check(self, location: str) -> None:
        """Make sure ``location`` can be used as a root (the bucket exists, the credentials are accepted).

        Raises:
            KafkaStorageError: it cannot; the message names the setting to change.
        """
        ...

    def read(self, location: str) -> bytes:
        """The whole object."""
        ...

    def read_range(self, location: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the object's end)."""
        ...

    def read_versioned(self, location: str) -> tuple[bytes, str]:
        """The whole object and its entity tag, for a later :meth:`replace`."""
        ...

    def exists(self, location: str) -> bool:
        """Whether the object exists (locally: a file or a directory)."""
        ...

    def put(self, location: str, data: bytes) -> None:
        """Create or overwrite the object, whole (readers see the old or the new bytes, never a mix)."""
        ...

    def put_if_absent(self, location: str, data: bytes) -> str:
        """Create the object whole unless it exists; its entity tag.

        Raises:
            ObjectExists: it exists (nothing was written).
        """
        ...

    def replace(self, location: str, data: bytes, etag: str) -> str:
        """Overwrite the object only if its entity tag is still ``etag``; the new tag.

        Raises:
            PreconditionFailed: it changed or is gone (nothing was written).
        """
        ...

    def list_names(self, prefix: str) -> list[str]:
        """Names directly under the directory-like ``prefix`` (objects and sub-prefixes), sorted; [] if none."""
        ...

    def delete(self, location: str) -> None:
        """Delete the object; nothing if it is not there."""
        ...

    def delete_tree(self, prefix: str) -> None:
        """Delete everything under ``prefix`` (a table, say), commit files first so a straggling writer stops."""
        ...

    def arrow(self, location: str) -> tuple[pafs.FileSystem, str]:
        """pyarrow's file system for ``location`` and the path to give it (for Parquet files)."""
        ...
