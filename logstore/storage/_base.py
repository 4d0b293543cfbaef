"""The storage interface (see :mod:`logstore.storage`)."""

from __future__ import annotations

from typing import Protocol

import pyarrow.fs as pafs

from logstore.errors import InvalidConfigError, KafkaStorageError

__all__ = ["ObjectExists", "PreconditionFailed", "Storage", "StorageUnreachable", "split_location"]


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


class StorageUnreachable(KafkaStorageError):
    """The object store could not be reached (connection refused, closed or timed out, after the client's retries).

    A write that ends so is in doubt: an earlier attempt may have been stored with its reply lost on the
    way back. A caller that must know reads the object back (a Delta commit does: :mod:`logstore.log.append`).
    """


class Storage(Protocol):
    """What the log needs of the place it keeps its files. Thread-safe.

    Every method takes a full location (a local path, or an ``s3://`` or ``az://`` URI).
    A missing object is :class:`FileNotFoundError`; any other failure is an
    ``OSError`` (the callers turn both into Kafka errors naming the topic) or,
    for a bucket (container) that does not exist or credentials that are refused,
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

        A PUT that the client retried after its reply was lost finds its own object there: the object is
        then read back, and holding ``data`` it counts as created by this call.

        Raises:
            ObjectExists: it exists with other bytes (nothing was written).
            StorageUnreachable: the store could not be reached; the object may or may not have been created.
        """
        ...

    def replace(self, location: str, data: bytes, etag: str) -> str:
        """Overwrite the object only if its entity tag is still ``etag``; the new tag.

        As with :meth:`put_if_absent`, a retried PUT that finds ``data`` there (its own first attempt) succeeds.

        Raises:
            PreconditionFailed: it changed or is gone (nothing was written).
            StorageUnreachable: the store could not be reached; the object may or may not have been replaced.
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


def split_location(location: str, scheme: str, holder: str) -> tuple[str, str]:
    """(holder, key) of ``<scheme>://holder/key``, the key without slashes at its ends; ``holder`` names what
    the store calls its top level (an S3 bucket, an Azure container) in the error.

    Raises:
        InvalidConfigError: no holder named.
    """
    name, _, key = location.removeprefix(f"{scheme}://").partition("/")
    if not name:
        raise InvalidConfigError(
            f"logstore.root '{location}': an {scheme}:// root names a {holder} ({scheme}://{holder}/prefix)"
        )
    return name, key.strip("/")
