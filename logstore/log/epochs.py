"""Whom a topic writer commits as, and who fences it: leader epochs (Kafka's leader-epoch cache and fencing).

Embedded mode: one table-wide epoch, the ``logstore.epoch`` app transaction.
A writer claims the table's epoch + 1 when it opens (an empty ``CLAIM``
commit); every commit carries it, and a commit in the log with a higher epoch
means a newer writer claimed the topic: this one is a zombie and is fenced.
A cooperative writer (``join``, the Spark sink) commits under the table's
current epoch and fences no one.

Cluster mode (``leaders`` given): the fence is per partition. A writer commits
only partitions it leads, each commit carrying ``logstore.leader.<p>`` = the
ZooKeeper leader epoch of every partition it touches; a higher
``logstore.leader.<p>`` in the log fences it for ``p`` only. A ``CLAIM`` also
records which node claimed (``logstore.holder.<p>``): a claim of the log's
epoch succeeds only for the node that holds it (a restart of the same
leader), so no two nodes ever lead one partition at one epoch.

:class:`LeaderEpochs` holds this writer's epochs and the highest the log is
known to hold; the writer folds every commit it reads into it and asks it
which app transactions a commit carries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from logstore.errors import FencedLeaderEpochError, NotLeaderOrFollowerError
from logstore.log import _delta

__all__ = ["LeaderEpochs", "holder_of", "is_leader_app", "rival_claim"]


class LeaderEpochs:
    """This writer's epoch (embedded) or leader epochs per partition (cluster), and the log's (not thread-safe).

    Args:
        topic: the topic's name, for messages.
        join: a cooperative writer: it takes the table's epoch and fences no one.
        leaders: cluster mode: the partitions this writer leads, with their ZooKeeper
            leader epochs, already claimed. None = embedded mode.
        node_id: cluster mode: the node this writer claims for (``node.id``); -1 = unnamed
            (its claims record no holder, and it may claim the log's epoch again like an old log's).
    """

    def __init__(self, topic: str, *, join: bool, leaders: Mapping[int, int] | None, node_id: int = -1) -> None:
        self.topic = topic
        self.join = join
        self.node_id = node_id
        self.epoch = 0
        """Embedded: the table-wide epoch this writer commits under."""
        self._leaders: dict[int, int] | None = None if leaders is None else dict(leaders)
        self._table: dict[int, int] = {}
        """Per partition, the highest ``logstore.leader.<p>`` the log holds (as far as this writer has read)."""
        self._holder: dict[int, int] = {}
        """Per partition, the node that claimed the epoch in ``_table``, where the log names it."""

    @property
    def cluster(self) -> bool:
        """Whether the fence is per partition (cluster mode)."""
        return self._leaders is not None

    def led(self) -> dict[int, int]:
        """Cluster mode: the partitions this writer leads and their epochs (empty when embedded)."""
        return dict(self._leaders or {})

    def commit_txns(self, touched: Iterable[int]) -> list[tuple[str, int]]:
        """The epoch app transactions of a commit that moves offsets of ``touched`` partitions."""
        if self._leaders is None:
            return [(_delta.APP_EPOCH, self.epoch)]
        return [(_delta.app_leader(p), self._leaders[p]) for p in touched if p in self._leaders]

    def check_leading(self, records: pa.Table) -> None:
        """Cluster mode: every record is on a partition this writer leads.

        Raises:
            NotLeaderOrFollowerError: some are not; the message names them.
        """
        if self._leaders is None or not len(records):
            return
        parts = np.unique(records["partition"].combine_chunks().to_numpy(zero_copy_only=False))
        missing = [int(p) for p in parts if int(p) not in self._leaders]
        if missing:
            raise NotLeaderOrFollowerError(
                f"this node does not lead partitions {missing} of topic '{self.topic}'; retry at their leader"
            )

    def held_by_newer(self, wanted: Mapping[int, int]) -> tuple[int, ...]:
        """The partitions of ``wanted`` (partition → epoch) held by a higher epoch, or by another node at that epoch.

        A claim that names no node (an old log's, or an unnamed writer's) is taken as this node's.
        """
        return tuple(
            sorted(
                p
                for p, e in wanted.items()
                if self._table.get(p, -1) > e
                or (self._table.get(p, -1) == e and self._holder.get(p, self.node_id) != self.node_id)
            )
        )

    def claim_txns(self, wanted: Mapping[int, int]) -> list[tuple[str, int]]:
        """The app transactions of a ``CLAIM`` of ``wanted``: each epoch, and (if named) this node as holder."""
        txns = []
        for p, e in sorted(wanted.items()):
            txns.append((_delta.app_leader(p), e))
            if self.node_id >= 0:
                txns.append((_delta.app_holder(p), e << 32 | self.node_id))
        return txns

    def claimed(self, epochs: Mapping[int, int]) -> None:
        """Cluster mode: this writer's ``CLAIM`` of ``epochs`` landed; it leads them from now on."""
        assert self._leaders is not None
        self._see(epochs, {p: (e, self.node_id) for p, e in epochs.items() if self.node_id >= 0})
        self._leaders.update(epochs)

    def resign(self, partitions: Sequence[int]) -> None:
        """Cluster mode: stop leading ``partitions``."""
        if self._leaders is not None:
            for p in partitions:
                self._leaders.pop(p, None)

    def load(self, table: DeltaTable, num_partitions: int) -> None:
        """Read the leader epochs the (refreshed) table holds."""
        leaders = {
            p: e for p in range(num_partitions) if (e := _delta.txn_version(table, _delta.app_leader(p))) is not None
        }
        holders = {
            p: holder_of(h) for p in leaders if (h := _delta.txn_version(table, _delta.app_holder(p))) is not None
        }
        self._see(leaders, holders)

    def absorb(
        self, epoch: int | None, leaders: Mapping[int, int], holders: Mapping[int, tuple[int, int]] | None = None
    ) -> None:
        """Fold in the epochs of a commit another writer made: its ``logstore.epoch`` and ``logstore.leader.<p>``.

        ``holders``: its ``logstore.holder.<p>``, decoded (:func:`holder_of`).

        The caller then folds in the rest of the commit and calls :meth:`check_fence`.

        Raises:
            FencedLeaderEpochError: embedded: it holds a newer table-wide epoch than this writer's.
        """
        if epoch is None:
            pass
        elif self.join or self._leaders is not None:
            # A cluster leader shares the table with cooperative writers, whose table-wide epoch fences no leader.
            self.epoch = max(self.epoch, epoch)
        elif epoch > self.epoch:
            raise FencedLeaderEpochError(
                f"topic '{self.topic}' was claimed by epoch {epoch}; this committer (epoch {self.epoch}) is fenced"
            )
        self._see(leaders, holders or {})

    def reloaded(self, current: int) -> None:
        """The table was re-read and holds table-wide epoch ``current``.

        Raises:
            FencedLeaderEpochError: as :meth:`absorb`.
        """
        if self._leaders is not None:
            self.epoch = current
            self.check_fence()
        elif self.join:
            self.epoch = current
        elif current > self.epoch:
            raise FencedLeaderEpochError(
                f"topic '{self.topic}' was claimed by epoch {current}; this committer (epoch {self.epoch}) is fenced"
            )

    def check_fence(self) -> None:
        """Cluster mode: stop leading every partition the log holds a newer epoch of, and say which.

        Raises:
            FencedLeaderEpochError: with ``partitions`` = the ones given up.
        """
        if self._leaders is None:
            return
        fenced = self.held_by_newer(self._leaders)
        if not fenced:
            return
        epochs = {p: (self._leaders[p], self._table[p]) for p in fenced}
        self.resign(fenced)
        raise FencedLeaderEpochError(
            f"topic '{self.topic}': partitions {list(fenced)} were claimed by newer leader epochs "
            f"(ours, theirs: {epochs}); this node no longer commits them",
            partitions=fenced,
        )

    def _see(self, epochs: Mapping[int, int], holders: Mapping[int, tuple[int, int]]) -> None:
        """Fold in ``epochs`` (partition → epoch) and ``holders`` (partition → (epoch, node)) the log holds."""
        for p, e in epochs.items():
            if e > self._table.get(p, -1):
                self._table[p] = e
                self._holder.pop(p, None)
            held = holders.get(p)
            if held is not None and held[0] == self._table[p]:
                self._holder[p] = held[1]


def holder_of(version: int) -> tuple[int, int]:
    """(epoch, node id) of a ``logstore.holder.<p>`` app version (``epoch << 32 | node id``)."""
    return version >> 32, version & 0xFFFFFFFF


def is_leader_app(app: str) -> bool:
    """Whether a Delta app id is a partition's leader epoch (``logstore.leader.<p>``)."""
    return app.startswith(_delta.LEADER_PREFIX) and app.removeprefix(_delta.LEADER_PREFIX).isdigit()


def rival_claim(actions: Iterable[tuple[int, dict[str, Any]]]) -> int:
    """The highest table-wide epoch claimed by a ``CLAIM`` commit among ``actions`` ((version, action)); -1 if none."""
    commits: dict[int, list[dict[str, Any]]] = {}
    for v, action in actions:
        commits.setdefault(v, []).append(action)
    top = -1
    for acts in commits.values():
        if any(a.get("commitInfo", {}).get("operation") == "CLAIM" for a in acts):
            for a in acts:
                if a.get("txn", {}).get("appId") == _delta.APP_EPOCH:
                    top = max(top, int(a["txn"]["version"]))
    return top
