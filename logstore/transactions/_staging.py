"""Records of open transactions, kept durably outside every topic table until their commit.

A transactional produce writes its records (partitions chosen, checked) as one
Arrow IPC file under
``<root>/_transactions/_staged/<transactional id>/<transaction seq>/<topic>/<n>.arrow``,
fsynced with its directories before the produce is answered. No reader of a
topic ever looks there: the topic's Delta table holds nothing of the
transaction until the commit appends the staged records through the node's
writer. An abort, and a restart that rolls an open transaction back, delete
the transaction's directory. (The folder starts with ``_`` so that Delta's
vacuum of ``_transactions`` leaves it alone.)
"""

from __future__ import annotations

import os
import shutil
import uuid
from urllib.parse import quote, unquote

import pyarrow as pa

from logstore.common.fsync import fsync_path
from logstore.errors import KafkaStorageError
from logstore.log.schema import INPUT_SCHEMA

__all__ = ["Staging"]


class Staging:
    """The staged records of every transaction of one root (thread-safe per transaction: callers serialise a tid)."""

    def __init__(self, transactions_dir: str, *, fsync: bool = True) -> None:
        self.root = os.path.join(transactions_dir, "_staged")
        self._fsync = fsync

    def _dir(self, tid: str, seq: int, topic: str | None = None) -> str:
        d = os.path.join(self.root, quote(tid, safe=""), str(seq))
        return d if topic is None else os.path.join(d, topic)

    def write(self, tid: str, seq: int, topic: str, n: int, records: pa.Table) -> None:
        """Stage ``records`` (:data:`~logstore.log.schema.INPUT_SCHEMA`) as the ``n``-th file of the transaction.

        Durable when it returns: the file and every directory entry leading to it are fsynced.

        Raises:
            KafkaStorageError: the file could not be written; nothing of it counts.
        """
        d = self._dir(tid, seq, topic)
        final = os.path.join(d, f"{n:010d}.arrow")
        tmp = os.path.join(d, f".{uuid.uuid4().hex}.tmp")
        try:
            created = _makedirs(d)
            with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, INPUT_SCHEMA) as writer:
                writer.write_table(records.cast(INPUT_SCHEMA))
            if self._fsync:
                fsync_path(tmp)
            os.replace(tmp, final)
            if self._fsync:
                fsync_path(d)
                for created_dir in created:  # a new directory is an entry of its parent
                    fsync_path(os.path.dirname(created_dir))
        except OSError as e:
            raise KafkaStorageError(f"cannot stage records of transaction '{tid}' under {d}: {e}") from e

    def read(self, tid: str, seq: int) -> dict[str, pa.Table]:
        """Every staged record of the transaction, per topic, in the order they were produced.

        Raises:
            KafkaStorageError: a staged file could not be read.
        """
        d = self._dir(tid, seq)
        out: dict[str, pa.Table] = {}
        try:
            topics = sorted(os.listdir(d)) if os.path.isdir(d) else []
            for topic in topics:
                names = sorted(n for n in os.listdir(os.path.join(d, topic)) if n.endswith(".arrow"))
                parts = []
                for name in names:
                    with pa.memory_map(os.path.join(d, topic, name)) as source:
                        parts.append(pa.ipc.open_file(source).read_all())
                if parts:
                    out[topic] = pa.concat_tables(parts)
        except (OSError, pa.ArrowInvalid) as e:
            raise KafkaStorageError(f"cannot read the staged records of transaction '{tid}' under {d}: {e}") from e
        return out

    def files(self, tid: str, seq: int) -> dict[str, int]:
        """The number of staged files of the transaction, per topic (its commit's check against its manifest)."""
        d = self._dir(tid, seq)
        try:
            topics = sorted(os.listdir(d)) if os.path.isdir(d) else []
            return {t: sum(n.endswith(".arrow") for n in os.listdir(os.path.join(d, t))) for t in topics}
        except OSError as e:
            raise KafkaStorageError(f"cannot list the staged records of transaction '{tid}' under {d}: {e}") from e

    def delete(self, tid: str, seq: int | None = None) -> None:
        """Remove what the transaction (every transaction of ``tid`` when ``seq`` is None) staged."""
        d = self._dir(tid, seq) if seq is not None else os.path.join(self.root, quote(tid, safe=""))
        shutil.rmtree(d, ignore_errors=True)

    def keep_only(self, tid: str, seq: int | None) -> None:
        """Remove what every transaction of ``tid`` but number ``seq`` staged (None: every one)."""
        for staged in self.staged_seqs(tid):
            if staged != seq:
                self.delete(tid, staged)

    def staged_ids(self) -> list[str]:
        """The transactional ids with anything staged (for the clean-up after a restart)."""
        try:
            return [unquote(n) for n in os.listdir(self.root)]
        except FileNotFoundError:
            return []

    def staged_seqs(self, tid: str) -> list[int]:
        """The transaction numbers of ``tid`` with a staging directory."""
        try:
            return [int(n) for n in os.listdir(os.path.join(self.root, quote(tid, safe=""))) if n.isdigit()]
        except FileNotFoundError:
            return []


def _makedirs(d: str) -> list[str]:
    """``os.makedirs(d)``; the directories it created, deepest first (their parents' entries need an fsync)."""
    missing = []
    p = d
    while not os.path.isdir(p):
        missing.append(p)
        p = os.path.dirname(p)
    os.makedirs(d, exist_ok=True)
    return missing
