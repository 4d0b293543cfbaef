"""What a topic's writer knows of its table, and the commit race it runs at the log's next version.

Kafka's ``LocalLog`` beside ``UnifiedLog``: :class:`LogState` holds the table
version a writer has read up to, the topic's partition count and config, and
each partition's high watermark (the offset its next record gets). It keeps
them current by reading every commit made since — another writer's commit says
where the high watermarks, epochs and producers now stand, so folding it in is
cheap — and re-reads the table when a commit holds what only a re-read shows
(data from another engine, a new partition count, a config change).

Claims are commits too: :meth:`LogState.claim_epoch` (embedded: the table-wide
epoch) and :meth:`LogState.claim_partitions` (cluster: leader epochs per
partition) race for the next version like any other and fold in what they lose to.

:meth:`LogState.commit` creates a commit at the next free version
(put-if-absent). When another writer took that version first, its commit is
folded in: if it moved offsets this commit's files assumed, the writer must
plan again (:class:`Replan`); otherwise the same files are committed at the
version after. Driven by one thread, the topic writer's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from logstore.config import TopicConfig
from logstore.errors import (
    ConcurrentTransactionsError,
    FencedLeaderEpochError,
    InconsistentTopicIdError,
    KafkaStorageError,
)
from logstore.log import _delta
from logstore.log.append import CommitInDoubt, LogAppender, StaleVersion, VersionTaken
from logstore.log.catalog import Catalog, high_watermark
from logstore.log.epochs import LeaderEpochs, holder_of, is_leader_app, rival_claim
from logstore.log.producer_state import ProducerStateManager
from logstore.log.topic_id import id_in, read_id_file

__all__ = ["LogState", "Replan"]

_HW_PREFIX = "logstore.hw."


class Replan(Exception):
    """A concurrent commit changed offsets, partitions or config: plan again (after a re-read if ``full``)."""

    def __init__(self, full: bool) -> None:
        super().__init__("re-plan")
        self.full = full


class LogState:
    """The table as one writer knows it (see the module docstring); not thread-safe.

    Args:
        catalog: the catalog of the root holding the topic.
        topic: the topic's name.
        table: the writer's warm handle of the topic table.
        appender: writes the table's data and commit files.
        epochs: the writer's epochs, into which other writers' epochs are folded.
        producers: the writer's producer state, into which other writers' sequences are folded.
    """

    def __init__(
        self,
        catalog: Catalog,
        topic: str,
        table: DeltaTable,
        appender: LogAppender,
        epochs: LeaderEpochs,
        producers: ProducerStateManager,
    ) -> None:
        self.topic = topic
        self.version = table.version()
        """The newest Delta version this writer knows of (its own last commit, or what it read)."""
        self.num_partitions = 0
        self.config = TopicConfig()
        self.hw: list[int] = []
        """Per partition, the offset its next record gets."""
        self.topic_id: str | None = id_in(table.metadata().configuration)
        """The ID of the topic this writer writes (:mod:`logstore.log.topic_id`); it never changes."""
        self._root = catalog.topic_path(topic)
        self._catalog = catalog
        self._dt = table
        self._appender = appender
        self._epochs = epochs
        self._producers = producers
        self.load()

    def table_epoch(self) -> int:
        """The table-wide epoch (``logstore.epoch``) of the handle's snapshot; 0 if none."""
        return _delta.txn_version(self._dt, _delta.APP_EPOCH) or 0

    def catch_up(self) -> None:
        """Step over commits made by others since this writer last looked.

        Raises:
            FencedLeaderEpochError: a newer committer claimed the topic (or, in cluster mode, partitions of it).
            KafkaStorageError: the table could not be re-read.
        """
        self.check_topic_id()
        _moved, full = self.absorb(self.version + 1)
        if full:
            self.refresh()

    def check_topic_id(self) -> None:
        """Make sure the table at the topic's path is still the one this writer opened (one small read).

        A topic deleted and created again starts its versions again at 0: this
        writer's next version, high watermarks and epochs belong to the old one,
        and a commit made from them would land in the new table as if it followed.

        Raises:
            InconsistentTopicIdError: the topic was deleted (and perhaps created again) since.
            KafkaStorageError: the topic's ID file could not be read.
        """
        try:
            now = read_id_file(self._root)
        except OSError as e:
            raise KafkaStorageError(f"cannot read the ID of topic '{self.topic}': {e}") from e
        if now != self.topic_id:
            raise InconsistentTopicIdError(
                f"topic '{self.topic}' was deleted or created again since this writer opened it "
                f"(topic ID {self.topic_id} then, {now} now); its new incarnation is opened afresh"
            )

    def commit(
        self,
        files: list[Any],
        txns: list[tuple[str, int]],
        info: dict[str, Any] | None,
        touching: tuple[set[int], set[str]] | None = None,
    ) -> None:
        """Commit at the next free version; a version taken by a commit that moves offsets means re-plan.

        ``touching`` (cluster mode): the partitions and producers of this commit;
        a race lost to a commit that touched none of them keeps this commit's
        files and offsets valid.

        Raises:
            Replan: plan again (the files were deleted).
            CommitInDoubt: the outcome is unknown (see :class:`~logstore.log.append.LogAppender`).
            FencedLeaderEpochError: a commit read on the way holds a newer epoch.
        """
        version = self.version + 1
        while True:
            try:
                self._appender.commit(version, files, txns, info)
            except StaleVersion:
                self._appender.discard(files)
                raise Replan(True) from None
            except VersionTaken:
                moved, full = self.absorb(version, touching)
                if moved:
                    self._appender.discard(files)
                    raise Replan(full) from None
                if full:
                    # The winner changed what only a re-read shows (other partitions' offsets, say);
                    # this commit's partitions are untouched, so its files and offsets stay valid.
                    self.refresh()
                version = self.version + 1
                continue
            self.version = version
            return

    def claim_partitions(self, wanted: Mapping[int, int], max_attempts: int) -> None:
        """Cluster mode: commit a ``CLAIM`` of ``logstore.leader.<p>`` = epoch for ``wanted`` (partition → epoch).

        After it returns, no commit of an older leader of these partitions can
        land (every commit is made at the log's next version, after reading the
        versions before it, and a writer that reads a higher epoch than its own
        stops).

        Raises:
            FencedLeaderEpochError: the log already holds a higher epoch for one of
                them, or the same epoch claimed by another node (``partitions`` names
                which); nothing was claimed.
            ConcurrentTransactionsError: the race was lost ``max_attempts`` times.
        """
        if not wanted:
            return
        for _attempt in range(max_attempts):
            self.catch_up()
            if max(wanted) >= self.num_partitions:
                self.refresh()
            newer = self._epochs.held_by_newer(wanted)
            if newer:
                raise FencedLeaderEpochError(
                    f"topic '{self.topic}': partitions {list(newer)} are held by a newer leader epoch "
                    f"or by another node at the same epoch (wanted: {dict(wanted)})",
                    partitions=newer,
                )
            claims = self._epochs.claim_txns(wanted)
            try:
                self.commit([], claims, {"operation": "CLAIM"}, (set(wanted), set()))
            except CommitInDoubt as e:
                raise KafkaStorageError(f"cannot claim partitions of topic '{self.topic}': {e}") from e
            except Replan as replan:
                if replan.full:
                    self.refresh()
                continue
            self._epochs.claimed(wanted)
            return
        raise ConcurrentTransactionsError(f"topic '{self.topic}': could not claim partitions {sorted(wanted)}")

    def claim_epoch(self, *, chosen: bool, max_attempts: int) -> None:
        """Embedded mode: commit the writer's table-wide epoch (an empty commit carrying ``logstore.epoch``).

        Losing the race to another writer's claim of this epoch or a newer one
        means another leader holds it: a writer that chose its epoch itself
        (``chosen``) claims the next one up; one given its epoch by a coordinator
        is fenced. No two leaders ever hold one epoch.

        Raises:
            FencedLeaderEpochError: not ``chosen``, and the epoch is taken or older than the table's.
            ConcurrentTransactionsError: the race was lost ``max_attempts`` times.
        """
        epochs = self._epochs
        for _attempt in range(max_attempts):
            current = self.table_epoch()
            if current > epochs.epoch:
                if not chosen:
                    raise FencedLeaderEpochError(
                        f"topic '{self.topic}' is held by epoch {current}; cannot claim older epoch {epochs.epoch}"
                    )
                epochs.epoch = current + 1
            version = self.version + 1
            try:
                self.commit([], [(_delta.APP_EPOCH, epochs.epoch)], {"operation": "CLAIM"})
                return
            except CommitInDoubt as e:
                raise KafkaStorageError(f"cannot claim topic '{self.topic}': {e}") from e
            except FencedLeaderEpochError:
                if not chosen:
                    raise
            except Replan:
                pass
            rival = rival_claim(self._appender.actions_since(version))
            if rival >= epochs.epoch:
                if not chosen:
                    raise FencedLeaderEpochError(
                        f"topic '{self.topic}': another writer claimed epoch {rival} first; "
                        f"this writer's epoch {epochs.epoch} is taken"
                    )
                epochs.epoch = rival + 1
            self.reread()
        raise ConcurrentTransactionsError(f"topic '{self.topic}': could not claim epoch {epochs.epoch}")

    def absorb(self, version: int, touching: tuple[set[int], set[str]] | None = None) -> tuple[bool, bool]:
        """Step over the commits from ``version`` on; (did any move offsets, is a re-read needed).

        With ``touching`` (cluster mode: the partitions and producers of the
        commit being made), "moved" means moved offsets of those partitions or
        sequences of those producers; commits elsewhere are folded in but leave
        the commit being made valid.
        """
        commits: dict[int, list[dict[str, Any]]] = {}
        for v, action in self._appender.actions_since(version):
            commits.setdefault(v, []).append(action)
        moved = full = False
        for actions in commits.values():
            if any(_moves_offsets(a) for a in actions):
                moved = moved or touching is None or _touches(actions, *touching)
                full = full or not self._apply_winner(actions)
        if commits:
            self.version = max(commits)
        return moved, full

    def reread(self) -> None:
        """Bring the handle to the table's newest version and load from it, without folding anything in."""
        _delta.refresh(self._dt)
        self.version = max(self.version, self._dt.version())
        self.load()

    def refresh(self) -> None:
        """Re-read the table (new partitions, config, other committers' commits).

        Raises:
            FencedLeaderEpochError: a newer committer claimed the topic.
            KafkaStorageError: the table could not be re-read.
        """
        try:
            _delta.refresh(self._dt)
        except (DeltaError, OSError) as e:
            raise KafkaStorageError(f"cannot re-read topic '{self.topic}': {e}") from e
        self.version = max(self.version, self._dt.version())
        self.load()
        self._producers.reload()
        self._epochs.reloaded(self.table_epoch())

    def load(self) -> None:
        """Partition count, config, high watermarks and leader epochs from the handle's snapshot.

        Raises:
            InconsistentTopicIdError: the handle now reads another table at the topic's path (re-created).
        """
        loaded = id_in(self._dt.metadata().configuration)
        if loaded != self.topic_id:
            raise InconsistentTopicIdError(
                f"topic '{self.topic}' was created again since this writer opened it "
                f"(topic ID {self.topic_id} then, {loaded} now); its new incarnation is opened afresh"
            )
        self.num_partitions, self.config = self._catalog.topic_config(self.topic, self._dt)
        by_part: dict[int, list[_delta.DataFile]] = {p: [] for p in range(self.num_partitions)}
        for f in _delta.data_files(self._dt):
            by_part.setdefault(f.partition, []).append(f)
        self.hw = [high_watermark(self._dt, p, by_part[p]) for p in range(self.num_partitions)]
        self._epochs.load(self._dt, self.num_partitions)

    def _apply_winner(self, actions: list[dict[str, Any]]) -> bool:
        """Fold another committer's commit into this writer's state; False if only a re-read can.

        Raises:
            FencedLeaderEpochError: the winner holds a newer epoch.
        """
        txns = {str(a["txn"].get("appId")): int(a["txn"].get("version", 0)) for a in actions if "txn" in a}
        leaders = {int(app.removeprefix(_delta.LEADER_PREFIX)): v for app, v in txns.items() if is_leader_app(app)}
        ours = _delta.APP_EPOCH in txns or leaders or any(app.startswith(_HW_PREFIX) for app in txns)
        if not ours or any("metaData" in a or "protocol" in a for a in actions):
            return False
        holders = {
            int(app.removeprefix(_delta.HOLDER_PREFIX)): holder_of(v)
            for app, v in txns.items()
            if app.startswith(_delta.HOLDER_PREFIX)
        }
        self._epochs.absorb(txns.get(_delta.APP_EPOCH), leaders, holders)
        for app, version in txns.items():
            if app.startswith(_HW_PREFIX):
                p = int(app.removeprefix(_HW_PREFIX))
                if p >= len(self.hw):
                    return False
                self.hw[p] = max(self.hw[p], version)
            elif (at := _delta.parse_sequence_app(app)) is not None:
                self._producers.absorb(at[1], at[0], version)
            elif app.startswith(_delta.PRODUCER_MAX_PREFIX):
                self._producers.absorb(app.removeprefix(_delta.PRODUCER_MAX_PREFIX), None, version)
        self._epochs.check_fence()
        return True


def _touches(actions: list[dict[str, Any]], partitions: set[int], producers: set[str]) -> bool:
    """Whether a commit moved offsets or producer sequences of ``partitions`` (or may have: not ours).

    ``producers``: the producers of the commit being made; a writer of the
    legacy per-topic sequence (``logstore.producer.<id>``) touches all of a producer's partitions.
    """
    for a in actions:
        if "metaData" in a or "protocol" in a:
            return True
        if "add" in a and a["add"].get("dataChange", True):
            p = a["add"].get("partitionValues", {}).get("partition")
            if p is None or int(p) in partitions:
                return True
        if "txn" in a:
            app = str(a["txn"].get("appId"))
            if app == _delta.APP_EPOCH:
                return True  # a table-wide claim or a cooperative writer: it may have moved any offset
            for prefix in (_HW_PREFIX, _delta.LEADER_PREFIX):
                if app.startswith(prefix) and int(app.removeprefix(prefix)) in partitions:
                    return True
            at = _delta.parse_sequence_app(app)
            if at is not None and at[0] in partitions:
                return True
            if app.startswith(_delta.PRODUCER_PREFIX) and app.removeprefix(_delta.PRODUCER_PREFIX) in producers:
                return True
    return False


def _moves_offsets(action: dict[str, Any]) -> bool:
    if "txn" in action:
        app = str(action["txn"].get("appId"))
        return app == _delta.APP_EPOCH or is_leader_app(app)
    if "metaData" in action or "protocol" in action:
        return True
    return "add" in action and bool(action["add"].get("dataChange", True))
