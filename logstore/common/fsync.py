"""Durability helpers for local files: what fsync means here."""

from __future__ import annotations

import os

__all__ = ["fsync_path"]


def fsync_path(path: str) -> None:
    """fsync a file, or a directory (so the entries created in it survive a power loss)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
