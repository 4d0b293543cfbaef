"""Topics written commit by commit, one file per partition and commit, for the maintenance tests."""

from __future__ import annotations

from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import ProducerBatch


def small_commits(store: LogStore, topic: str, commits: int, partitions: int) -> TopicWriter:
    """``commits`` commits of two records per partition (some keys, values and headers null); returns the writer."""
    w = TopicWriter(store.catalog, topic)
    for c in range(commits):
        parts = [p for p in range(partitions) for _ in range(2)]
        w.append(
            [
                ProducerBatch(
                    input_table(
                        parts,
                        [f"v{c}-{i}".encode() if i % 5 else None for i in range(len(parts))],
                        keys=[f"k{i % 3}".encode() if i % 4 else None for i in range(len(parts))],
                        timestamps_ms=[1_700_000_000_000 + c] * len(parts),
                        headers=[[("h", f"{c}".encode())] if i % 2 else [] for i in range(len(parts))],
                    )
                )
            ]
        )
    return w


def old_commits(store: LogStore, topic: str, n: int, *, keys: tuple[bytes, bytes] | None = None) -> None:
    """``n`` commits of two records on partition 0, values ``<c>a`` and ``<c>b``, stamped long ago (1970).

    ``keys`` are the two records' keys (none by default).
    """
    w = TopicWriter(store.catalog, topic)
    for c in range(n):
        w.append(
            [
                ProducerBatch(
                    input_table(
                        [0, 0],
                        [f"{c}a".encode(), f"{c}b".encode()],
                        keys=list(keys) if keys else None,
                        timestamps_ms=[1_000_000, 1_000_000],
                    )
                )
            ]
        )
