"""A topic deleted and created again whose new ``_delta_log`` directory has the old one's inode.

ext4 gives a new file or directory the lowest free inode of the group it picks,
so a topic created again right after it was deleted often gets its old
``_delta_log`` inode back — by chance, depending on what else the file system
hands out meanwhile. Tests make it certain: right after the delete they take
the old inode back as a directory of their own (making directories until one
gets it, which ext4 does within the first few), create the topic, and move its
new log's commit files into that directory, which then becomes its
``_delta_log``. The table is the new one, commit for commit; only the
directory's inode is the old one's.
"""

from __future__ import annotations

import os
from collections.abc import Callable

MAX_PROBES = 1_000


def log_inode(table_root: str) -> int:
    """The inode of a table's ``_delta_log`` directory."""
    return os.stat(os.path.join(table_root, "_delta_log")).st_ino


def recreate_reusing_log_inode(table_root: str, delete: Callable[[], None], create: Callable[[], None]) -> bool:
    """``delete()`` the topic at ``table_root``, ``create()`` it again, its ``_delta_log`` with the old inode.

    Nothing may read or write the topic between ``create()`` and the return.
    Returns whether the new ``_delta_log`` has the old inode (a file system that
    does not reuse inodes defeats it); the topic exists again either way.
    """
    old = log_inode(table_root)
    delete()
    holder = _take_inode(os.path.dirname(table_root), old)
    create()
    if holder is None:
        return False
    log = os.path.join(table_root, "_delta_log")
    for name in os.listdir(log):
        os.rename(os.path.join(log, name), os.path.join(holder, name))
    os.rmdir(log)
    os.rename(holder, log)
    return log_inode(table_root) == old


def _take_inode(parent: str, inode: int) -> str | None:
    """A new directory in ``parent`` with inode number ``inode``, or None if the file system gives none."""
    probes: list[str] = []
    try:
        for i in range(MAX_PROBES):
            probe = os.path.join(parent, f"_probe{i}")
            os.mkdir(probe)
            if os.stat(probe).st_ino == inode:
                return probe
            probes.append(probe)
        return None
    finally:
        for probe in probes:
            os.rmdir(probe)
