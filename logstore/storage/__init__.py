"""Where logstore keeps its files: a local directory or an object store, behind one interface.

``logstore.root`` is either a path (the local form, :mod:`._local`) or
``s3://bucket/prefix`` (the object-store form, :mod:`._s3`). Every module of
the log that reads or creates a file of a table goes through the
:class:`Storage` of its location (:func:`storage_for`), so the same code
commits to a disk and to S3. The primitives are the ones the Delta protocol and
logstore's own records need:

* :meth:`Storage.put_if_absent` — create an object whole, or fail with
  :class:`ObjectExists` if it exists: the mutual exclusion every Delta commit
  and every writer claim rests on (``os.link`` of a finished temporary file
  locally; ``If-None-Match: *`` on S3, as delta-rs commits);
* :meth:`Storage.read_versioned` / :meth:`Storage.replace` — read an object
  with its entity tag, and replace it only if it still has that tag
  (``If-Match`` on S3), else :class:`PreconditionFailed`;
* :meth:`Storage.read`, :meth:`Storage.read_range`, :meth:`Storage.list_names`,
  :meth:`Storage.delete`, :meth:`Storage.delete_tree`;
* :meth:`Storage.arrow` — pyarrow's file system and path for a location, for
  Parquet data files; :attr:`Storage.delta_options` — the ``storage_options``
  delta-rs needs to open a table there.

Durability: an object-store write is durable when it returns; the local form
fsyncs what it creates (and its directory entry) before it returns.

Locations are strings: absolute local paths, or ``s3://bucket/key`` URIs;
:func:`join` and :func:`absolute` handle both.
"""

from __future__ import annotations

import os
import posixpath
import threading

from logstore.storage._base import ObjectExists, PreconditionFailed, Storage
from logstore.storage._local import LocalStorage
from logstore.storage._s3 import S3Storage, parse_s3

__all__ = [
    "OBJECT_SCHEMES",
    "LocalStorage",
    "ObjectExists",
    "PreconditionFailed",
    "S3Storage",
    "Storage",
    "absolute",
    "is_object_store",
    "join",
    "storage_for",
]

OBJECT_SCHEMES = ("s3",)
"""The URI schemes ``logstore.root`` may name (``az://`` is not served yet)."""

_LOCAL = LocalStorage()
_S3: dict[tuple[int, str], S3Storage] = {}
_S3_LOCK = threading.Lock()


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


def storage_for(location: str) -> Storage:
    """The storage that holds ``location``: one per bucket and process for S3, one local form.

    Raises:
        InvalidConfigError: a URI without a bucket.
    """
    if not location.startswith("s3://"):
        return _LOCAL
    bucket, _ = parse_s3(location)
    key = (os.getpid(), bucket)  # a forked child builds its own client
    with _S3_LOCK:
        storage = _S3.get(key)
        if storage is None:
            storage = _S3[key] = S3Storage(bucket)
        return storage
