"""Where logstore keeps its files: a local directory or an object store, behind one interface.

``logstore.root`` is either a path (the local form, :mod:`._local`),
``s3://bucket/prefix`` (:mod:`._s3`) or ``az://container/prefix`` (Azure Blob Storage, :mod:`._azure`). Every module of
the log that reads or creates a file of a table goes through the
:class:`Storage` of its location (:func:`storage_for`), so the same code
commits to a disk and to S3. The primitives are the ones the Delta protocol and
logstore's own records need:

* :meth:`Storage.put_if_absent` — create an object whole, or fail with
  :class:`ObjectExists` if it exists: the mutual exclusion every Delta commit
  and every writer claim rests on (``os.link`` of a finished temporary file
  locally; ``If-None-Match: *`` on S3 and Azure Blob, as delta-rs commits);
* :meth:`Storage.read_versioned` / :meth:`Storage.replace` — read an object
  with its entity tag, and replace it only if it still has that tag
  (``If-Match`` on S3 and Azure Blob), else :class:`PreconditionFailed`;
* a write that cannot reach the object store raises :class:`StorageUnreachable`
  (a :class:`~logstore.errors.KafkaStorageError`): it may or may not have landed;
* :meth:`Storage.read`, :meth:`Storage.read_range`, :meth:`Storage.list_names`,
  :meth:`Storage.delete`, :meth:`Storage.delete_tree`;
* :meth:`Storage.arrow` — pyarrow's file system and path for a location, for
  Parquet data files; :attr:`Storage.delta_options` — the ``storage_options``
  delta-rs needs to open a table there.

Durability: an object-store write is durable when it returns; the local form
fsyncs what it creates (and its directory entry) before it returns.

Locations are strings: absolute local paths, or ``s3://bucket/key`` / ``az://container/key`` URIs;
:func:`join`, :func:`parent` and :func:`absolute` handle both.
"""

from __future__ import annotations

import os
import posixpath
import threading

from logstore.storage._base import ObjectExists, PreconditionFailed, Storage, StorageUnreachable, split_location
from logstore.storage._local import LocalStorage

__all__ = [
    "OBJECT_SCHEMES",
    "LocalStorage",
    "ObjectExists",
    "PreconditionFailed",
    "Storage",
    "StorageUnreachable",
    "absolute",
    "is_object_store",
    "join",
    "parent",
    "storage_for",
]

OBJECT_SCHEMES = ("s3", "az")
"""The URI schemes ``logstore.root`` may name: S3 (:mod:`._s3`) and Azure Blob Storage (:mod:`._azure`)."""

_LOCAL = LocalStorage()
_STORES: dict[tuple[int, str, str], Storage] = {}
_STORES_LOCK = threading.Lock()


def is_object_store(location: str) -> bool:
    """Whether ``location`` is an object-store URI (``s3://…``) rather than a local path."""
    return location.startswith(tuple(f"{s}://" for s in OBJECT_SCHEMES))


def absolute(location: str) -> str:
    """``location`` as an absolute local path, or the URI unchanged (without a trailing slash)."""
    if is_object_store(location):
        return location.rstrip("/")
    return os.path.abspath(location)


def join(location: str, *parts: str) -> str:
    """``location`` with ``parts`` appended, ``/``-separated for URIs."""
    if is_object_store(location):
        return posixpath.join(location.rstrip("/"), *parts)
    return os.path.join(location, *parts)


def parent(location: str) -> str:
    """The location ``location`` is directly under (``join``'s inverse): a directory, or a URI's prefix."""
    if is_object_store(location):
        return posixpath.dirname(location.rstrip("/"))
    return os.path.dirname(location.rstrip(os.sep))


def storage_for(location: str) -> Storage:
    """The storage that holds ``location``: one per bucket (container) and process on an object store, one local form.

    Raises:
        InvalidConfigError: a URI without a bucket or container.
        KafkaStorageError: an ``az://`` location with no Azure credentials in the environment.
    """
    if location.startswith("s3://"):
        scheme, (name, _) = "s3", split_location(location, "s3", "bucket")
    elif location.startswith("az://"):
        scheme, (name, _) = "az", split_location(location, "az", "container")
    else:
        return _LOCAL
    key = (os.getpid(), scheme, name)  # a forked child builds its own client
    with _STORES_LOCK:
        storage = _STORES.get(key)
        if storage is None:
            storage = _STORES[key] = _object_store(scheme, name)
        return storage


def _object_store(scheme: str, name: str) -> Storage:
    """A new client of bucket (container) ``name``; the forms' SDKs (boto3, azure-storage-blob: ~0.2 s to
    import) are loaded only by a process that uses an object store."""
    if scheme == "s3":
        from logstore.storage._s3 import S3Storage

        return S3Storage(name)
    from logstore.storage._azure import AzureStorage

    return AzureStorage(name)
