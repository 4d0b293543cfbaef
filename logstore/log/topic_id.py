"""A topic's identity: a random ID given at creation, as Kafka's topic IDs (KIP-516).

A topic's name outlives the topic: delete ``orders``, create it again, and the
new table sits at the same path with its versions and offsets starting again
at 0 (on ext4 even its ``_delta_log`` directory may get the old inode back).
Whatever holds state of a topic — a reader's snapshot, a writer's high
watermarks and epochs, a group's committed offsets, a Spark query's offsets, a
node's pipeline — must never carry it over to the new topic. So every topic
gets an ID when it is created: 16 random bytes shown as URL-safe base64
without padding (22 characters, as Kafka's ``Uuid.toString``). It is written
once, before the topic exists, and never changed, in two places:

* the table property ``logstore.topic.id`` (:data:`TOPIC_ID_PROPERTY`): it
  travels with the table, so every snapshot a reader or writer loads — and
  Spark SQL, delta-rs, ``SHOW TBLPROPERTIES`` — says which topic it is of;
* the file ``<topic>/_topic_id`` (:data:`ID_FILE`) beside ``_delta_log``
  (Delta ignores files whose names start with ``_``): one small read tells a
  reader following the log, or a writer about to commit, whether the table at
  the path is still the one it loaded, without reading the log. It is written
  before the table's first commit and removed with the table.

Topics created before IDs existed have neither. Their ID is None, and None is
treated as an ID like any other: such a topic keeps working, and when it is
deleted and created again the new one has an ID, so the change is seen.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping

from logstore.common.fsync import fsync_path
from logstore.storage import is_object_store, join, storage_for

__all__ = ["ID_FILE", "TOPIC_ID_PROPERTY", "id_in", "new_topic_id", "read_id_file", "write_id_file"]

TOPIC_ID_PROPERTY = "logstore.topic.id"
"""The table property holding the topic's ID (not a topic config key: it cannot be altered)."""
ID_FILE = "_topic_id"
"""The file in the topic's directory holding its ID, for a check in one read."""


def new_topic_id() -> str:
    """A new random topic ID: 16 random bytes as URL-safe base64 without padding (22 characters).

    As Kafka's ``Uuid.randomUuid``, never one whose text starts with ``-`` (it
    would read as a command-line flag).
    """
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def id_in(configuration: Mapping[str, str | None]) -> str | None:
    """The topic ID among a table's properties; None for a topic created before IDs existed."""
    return configuration.get(TOPIC_ID_PROPERTY) or None


def read_id_file(table_root: str) -> str | None:
    """The ID in ``<table_root>/_topic_id``; None when there is none (no topic there, or one from before IDs).

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        return storage_for(table_root).read(join(table_root, ID_FILE)).decode("ascii").strip() or None
    except FileNotFoundError:
        return None


def write_id_file(table_root: str, topic_id: str) -> None:
    """Write ``topic_id`` to ``<table_root>/_topic_id`` whole (a temporary file renamed over it), durably.

    Creates ``table_root`` if needed and replaces a file a half-finished delete left.

    Raises:
        OSError: the file could not be written.
    """
    if is_object_store(table_root):
        storage_for(table_root).put(join(table_root, ID_FILE), topic_id.encode("ascii"))
        return
    os.makedirs(table_root, exist_ok=True)
    path = os.path.join(table_root, ID_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(topic_id.encode("ascii"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_path(table_root)
