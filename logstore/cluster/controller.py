"""Cluster coordination through ZooKeeper: node registry, controller election, partition leaders.

Znodes, after Kafka's own layout, under the chroot of ``zookeeper.connect``
(default ``/logstore``):

* ``/brokers/ids/<node.id>`` — ephemeral ``{"node_id", "url"}`` (and ``"kafka"``: its advertised Kafka
  listener, ``host:port``, when it serves one): the node is alive while its ZooKeeper session is.
* ``/controller`` — ephemeral ``{"node_id", "epoch"}``: the one controller.
* ``/controller_epoch`` — the controller epoch, bumped by every election in
  the same transaction that creates ``/controller``, so exactly one node wins
  each epoch.
* ``/brokers/topics/<t>`` — ``{"partitions": n, "topic_id": id}``, written by
  whoever creates or first serves the topic (``topic_id`` as Kafka's: the
  topic's ID, :mod:`logstore.log.topic_id`; absent for a topic from before
  IDs); ``/brokers/topics/<t>/partitions/<p>/state`` —
  ``{"leader", "leader_epoch"}`` (plus ``"handover_to"`` and ``"drained"``
  during a hand-over, :mod:`logstore.cluster.rebalance`), written by the
  controller, only in a transaction that checks ``/controller_epoch`` is
  still the one it was elected with: a deposed controller's writes fail and
  change nothing. (The one other write: a leader handing a partition over
  marks it ``drained``, conditionally on the znode's version.)
* ``/admin/preferred_replica_election/request-<n>`` — a preferred-leader
  election asked for (``logstore cluster elect-leaders``); the controller acts
  on it and deletes it.
* ``/failover/<t>`` — the topic's failover lock (kazoo's lock recipe; its contenders' znodes are ephemeral),
  removed with the topic when nobody holds it.

Every node runs a :class:`ZooKeeperController`. Its worker thread takes part
in elections and, while it is the controller, places a leader on every
partition that has none alive (:func:`~logstore.cluster.placement.place_leaders`)
whenever the live nodes or the topics change, and moves partitions back to
their preferred leaders (:class:`~logstore.cluster.rebalance.LeaderRebalancer`).
Every node keeps a cached view of the whole tree (kazoo's ``TreeCache``) for
:meth:`ZooKeeperController.metadata`.

Where code runs: kazoo's own threads deliver events and only wake the worker;
ZooKeeper calls that wait are made on the worker or the caller's thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import Connect
from kazoo.recipe.cache import TreeCache

from logstore.cluster.connect import RECONNECT, ensure_chroot, split_connect
from logstore.cluster.placement import PartitionState, Placement, TopicPartitionKey, place_leaders, preferred_leaders
from logstore.cluster.rebalance import ELECTIONS, LeaderRebalancer, report_drained, request_election, stage_state
from logstore.common.logs import describe
from logstore.errors import DuplicateBrokerRegistrationError, StaleControllerEpochError

__all__ = [
    "FAILOVER_LOCKS",
    "ClusterMetadata",
    "NodeInfo",
    "SessionEvent",
    "ZooKeeperController",
]

log = logging.getLogger("logstore.cluster")

BROKERS = "/brokers"
IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
FAILOVER_LOCKS = "/failover"
_TXN_OPS = 200  # operations per ZooKeeper multi (its requests are bounded by jute.maxbuffer)
_REREGISTER_POLL_S = 0.05
"""How often a node whose session was lost asks again whether it may register again (``may_register_again``)."""

SessionEvent = str
"""``"suspended"`` (connection lost, session may live on), ``"lost"`` (session expired), ``"connected"``, and
``"registered"`` (registered again in a new session after ``"lost"``)."""


@dataclass(frozen=True)
class NodeInfo:
    """A node of the cluster, as ``/brokers/ids/<node.id>`` holds it."""

    node_id: int
    url: str
    """Base URL of the node's HTTP API, where other nodes forward to it."""
    kafka: str | None = None
    """``host:port`` Kafka clients reach the node's Kafka listener at (``advertised.listeners``); None = it serves
    none."""


@dataclass(frozen=True)
class ClusterMetadata:
    """The cluster as this node's cache last saw it (``GET /v1/metadata``)."""

    controller: int | None
    """The controller's node id; None while an election is under way."""
    controller_epoch: int
    nodes: tuple[NodeInfo, ...]
    """Live nodes, by id."""
    partitions: dict[TopicPartitionKey, PartitionState] = field(default_factory=dict)
    """Every partition that has been given a leader."""
    topic_ids: dict[str, str] = field(default_factory=dict)
    """Topic → its ID, for the topics known that have one (a topic created again has a new one)."""

    def leader(self, topic: str, partition: int) -> PartitionState | None:
        return self.partitions.get((topic, partition))

    def node(self, node_id: int) -> NodeInfo | None:
        return next((n for n in self.nodes if n.node_id == node_id), None)


def _registration(node: NodeInfo) -> dict[str, Any]:
    """What ``/brokers/ids/<node.id>`` holds: ``{"node_id", "url"}``, and ``"kafka"`` when it serves the listener."""
    doc: dict[str, Any] = {"node_id": node.node_id, "url": node.url}
    if node.kafka is not None:
        doc["kafka"] = node.kafka
    return doc


class _NegotiatingConnection(ConnectionHandler):
    """kazoo's connection, keeping the session timeout the server granted in each session handshake.

    The server clamps the timeout a client asks for to its
    ``[minSessionTimeout, maxSessionTimeout]`` (by default 2 and 20 ticks) and
    expires the session after the timeout it *granted*. kazoo reads that
    value from the ``ConnectResponse`` (its ``time_out``) but keeps it only in
    a local variable, so this subclass keeps it from the same reply: every
    (re)connect replaces it, before kazoo reports the state ``CONNECTED``.
    """

    negotiated_ms: int | None = None

    def _invoke(self, timeout: float, request: Any, xid: int | None = None) -> Any:
        result = super()._invoke(timeout, request, xid)
        if isinstance(request, Connect) and isinstance(result, tuple) and result[0].time_out > 0:
            self.negotiated_ms = int(result[0].time_out)
        return result


def _state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def _read_states(zk: KazooClient, topics: Iterable[str] | None = None) -> dict[TopicPartitionKey, PartitionState]:
    """The partition states ZooKeeper holds now, of ``topics`` (None: of every topic)."""
    out: dict[TopicPartitionKey, PartitionState] = {}
    for topic in zk.get_children(TOPICS) if topics is None else topics:
        try:
            parts = zk.get_children(f"{TOPICS}/{topic}/partitions")
        except NoNodeError:
            continue
        for p in parts:
            try:
                data, _ = zk.get(_state_path(topic, int(p)))
            except NoNodeError:
                continue
            out[(topic, int(p))] = PartitionState.from_json(data)
    return out


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _register(zk: KazooClient, node: NodeInfo) -> None:
    """Create ``/brokers/ids/<node.id>`` in this session (kept if it is this session's own, from before a reconnect).

    Raises:
        DuplicateBrokerRegistrationError: another live session holds it.
    """
    path = f"{IDS}/{node.node_id}"
    try:
        zk.create(path, _dumps(_registration(node)), ephemeral=True)
    except NodeExistsError:
        data, stat = zk.get(path)
        if stat.ephemeralOwner == zk.client_id[0]:
            return
        raise DuplicateBrokerRegistrationError(
            f"node.id {node.node_id} is registered by a live node ({data.decode(errors='replace')}); "
            "give every node its own node.id, or wait zookeeper.session.timeout.ms after a crash"
        ) from None


class ZooKeeperController:
    """This node's membership of a cluster (see the module docstring).

    Args:
        connect: ``zookeeper.connect``.
        node: this node's id and URL.
        session_timeout_ms: ``zookeeper.session.timeout.ms``; a node silent
            this long is dead and its partitions move.
        placement: ``leader.placement`` (``partition`` or ``topic``).
        rebalance: ``(auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds,
            leader.imbalance.per.broker.percentage)``.
        on_session: called with a :data:`SessionEvent` from kazoo's thread;
            on ``"suspended"`` and ``"lost"`` a leader must stop committing at
            once (its epoch may already belong to another node).
        on_change: called from kazoo's thread whenever the cached tree
            changes (nodes, topics, leaders); it must only wake someone up.
        may_register_again: asked on the worker thread before this node registers again after ``"lost"``;
            False: not yet (no election either), asked again every ``_REREGISTER_POLL_S``.
    """

    def __init__(
        self,
        connect: str,
        node: NodeInfo,
        *,
        session_timeout_ms: int = 18_000,
        placement: Placement = "partition",
        rebalance: tuple[bool, float, int] = (True, 300.0, 10),
        on_session: Callable[[SessionEvent], None] | None = None,
        on_change: Callable[[], None] | None = None,
        may_register_again: Callable[[], bool] = lambda: True,
    ) -> None:
        self.node = node
        self._hosts, self._chroot = split_connect(connect)
        self._timeout_s = session_timeout_ms / 1000
        self._placement = placement
        self._on_session = on_session
        self._on_change = on_change
        self._may_register_again = may_register_again
        self._zk = KazooClient(
            hosts=f"{self._hosts}{self._chroot}", timeout=self._timeout_s, connection_retry=RECONNECT
        )
        # kazoo 2.x builds its connection in KazooClient.__init__ and keeps no negotiated timeout: swap in one that does
        plain = self._zk._connection
        self._connection = _NegotiatingConnection(
            self._zk, plain.retry_sleeper, logger=plain.logger, sasl_options=plain.sasl_options
        )
        self._zk._connection = self._connection
        self._cache: TreeCache | None = None
        auto, interval_s, percentage = rebalance
        self._rebalancer = LeaderRebalancer(
            self._zk, placement=placement, auto=auto, interval_s=interval_s, percentage=percentage
        )
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"controller-{node.node_id}", daemon=True)
        self._lock = threading.Lock()
        # Controller state, only while this node is the controller (worker thread only).
        self._epoch: int | None = None
        self._epoch_version = -1
        self._states: dict[TopicPartitionKey, PartitionState] = {}
        self._topic_ids: dict[str, str | None] = {}
        """Topic → its ID as the last round read it, whose partitions ``_states`` holds (empty: states read afresh)."""
        self._reregister, self._reregisters = False, 0  # register again (after a lost session); times asked
        self._resigning = False
        self._controller: tuple[int | None, int] = (None, 0)
        """(node id, epoch) of the current controller, as the ``/controller`` watch last saw it."""

    # -- lifecycle --------------------------------------------------------------

    def start(self, before_register: Callable[[], None] = lambda: None) -> None:
        """Connect, run ``before_register`` (:meth:`lock` works; no node counts this one live yet), register this
        node and join the controller election.

        Raises:
            DuplicateBrokerRegistrationError: a live node holds this ``node.id``.
            KafkaStorageError: ZooKeeper could not be reached within the session timeout.
        """
        ensure_chroot(self._hosts, self._chroot, self._timeout_s)
        self._zk.add_listener(self._session_changed)
        self._zk.start(timeout=self._timeout_s)
        for path in (IDS, TOPICS, ELECTIONS):
            self._zk.ensure_path(path)
        with contextlib.suppress(NodeExistsError):
            self._zk.create(CONTROLLER_EPOCH, b"0")
        before_register()
        _register(self._zk, self.node)
        self._cache = TreeCache(self._zk, BROKERS)
        self._cache.listen(lambda _event: self._cache_changed())
        self._cache.start()
        self._zk.DataWatch(CONTROLLER, self._controller_changed)
        self._zk.ChildrenWatch(ELECTIONS, lambda _children: self._wake.set())
        self._thread.start()

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Controlled shutdown: hand this node's partitions (and the controller role) to others, then leave.

        Returns once no partition names this node as leader (or after ``timeout_s``), so a SIGTERM'd node is
        unavailable for about one controller round trip, not a session timeout.
        """
        with self._lock:
            self._resigning = True
        # Bounded: kazoo holds a request while it reconnects, so a node stopped during an outage would wait forever.
        with contextlib.suppress(NoNodeError, KazooException, self._zk.handler.timeout_exception):
            self._zk.delete_async(f"{IDS}/{self.node.node_id}").get(timeout=timeout_s)
        self._wake.set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._leads_any_in(self.metadata().partitions):
            time.sleep(0.01)
        self.close()

    def close(self) -> None:
        """Leave at once: the session ends, so this node's ephemeral znodes go now, not after a timeout."""
        self._closed.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self._cache is not None:
            self._cache.close()
        self._zk.stop()
        self._zk.close()

    # -- what other parts of the node ask ---------------------------------------

    def metadata(self) -> ClusterMetadata:
        """Controller, live nodes and partition leaders, from this node's cache (no ZooKeeper round trip)."""
        cache = self._cache
        if cache is None:
            return ClusterMetadata(None, 0, ())
        nodes = []
        for child in cache.get_children(IDS) or ():
            data = cache.get_data(f"{IDS}/{child}")
            if data is not None and data.data:
                doc = json.loads(data.data)
                nodes.append(NodeInfo(int(doc["node_id"]), str(doc["url"]), doc.get("kafka")))
        partitions: dict[TopicPartitionKey, PartitionState] = {}
        topic_ids: dict[str, str] = {}
        for topic in cache.get_children(TOPICS) or ():
            data = cache.get_data(f"{TOPICS}/{topic}")
            if data is not None and data.data:
                topic_id = json.loads(data.data).get("topic_id")
                if topic_id:
                    topic_ids[topic] = str(topic_id)
            for p in cache.get_children(f"{TOPICS}/{topic}/partitions") or ():
                data = cache.get_data(_state_path(topic, int(p)))
                if data is not None and data.data:
                    partitions[(topic, int(p))] = PartitionState.from_json(data.data)
        controller, epoch = self._controller
        nodes_sorted = tuple(sorted(nodes, key=lambda n: n.node_id))
        return ClusterMetadata(controller, epoch, nodes_sorted, partitions, topic_ids)

    def register_topic(self, topic: str, partitions: int, topic_id: str | None = None) -> None:
        """Make ``topic`` known to the controller (idempotent; a larger count adds partitions).

        ``topic_id`` (the topic's ID, None for a topic from before IDs) replaces
        another one a znode left by the deleted topic holds, with the new count:
        every node watching sees the topic was created again.
        """
        path = f"{TOPICS}/{topic}"
        doc: dict[str, Any] = {"partitions": partitions}
        if topic_id is not None:
            doc["topic_id"] = topic_id
        try:
            self._zk.create(path, _dumps(doc), makepath=True)
        except NodeExistsError:
            data, stat = self._zk.get(path)
            known = json.loads(data) if data else {}
            other = topic_id is not None and known.get("topic_id") != topic_id
            if other or partitions > known.get("partitions", 0):
                if not other:
                    doc = known | {"partitions": partitions}
                try:
                    self._zk.set(path, _dumps(doc), version=stat.version)
                except BadVersionError:
                    self.register_topic(topic, partitions, topic_id)

    def unregister_topic(self, topic: str) -> None:
        """Forget a deleted topic, its partition states and its failover lock (unless a node is holding it)."""
        for _attempt in range(20):  # the controller may be creating its partitions' states meanwhile
            try:
                self._zk.delete(f"{TOPICS}/{topic}", recursive=True)
                break
            except NoNodeError:
                break
            except NotEmptyError:
                continue
        with contextlib.suppress(NoNodeError, NotEmptyError):  # a held lock's znodes go with their sessions
            self._zk.delete(f"{FAILOVER_LOCKS}/{topic}")

    def report_drained(self, topic: str, partition: int, leader_epoch: int) -> bool:
        """This node, handing ``partition`` over, committed all it accepted for it (a hand-over's step 2)."""
        return report_drained(self._zk, self.node.node_id, topic, partition, leader_epoch)

    def request_election(self, partitions: list[TopicPartitionKey] | None) -> str:
        """Ask the controller for a preferred-leader election (None: every partition); returns the request's znode."""
        return request_election(self._zk, partitions)

    @property
    def session_timeout_s(self) -> float:
        """The session timeout ZooKeeper granted at the last (re)connect; before the first, the one asked for.

        The server expires this node's session after this long without a round trip, whatever it was asked for.
        """
        negotiated = self._connection.negotiated_ms
        return self._timeout_s if negotiated is None else negotiated / 1000

    def ping(self) -> None:
        """One round trip to ZooKeeper (a leader's lease: it heard from the ensemble when it sent this).

        Raises:
            KazooException: no answer (connection lost, session expired).
        """
        self._zk.exists(IDS)

    def lock(self, path: str) -> Any:
        """A ``kazoo.recipe.lock.Lock`` at ``path`` taken in this node's session (its znode goes with the session)."""
        return self._zk.Lock(path, str(self.node.node_id))

    @property
    def is_controller(self) -> bool:
        return self._epoch is not None

    # -- worker -----------------------------------------------------------------

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(timeout=_REREGISTER_POLL_S if self._reregister else 1.0)
            self._wake.clear()
            if self._closed.is_set():
                return
            try:
                self._step()
            except StaleControllerEpochError as e:
                log.warning("node %d: %s", self.node.node_id, e.message)
                self._resign()
            except KazooException as e:  # connection trouble: the session listener says what it means
                log.warning("node %d: coordination step failed, retrying: %s", self.node.node_id, describe(e))
                time.sleep(0.1)
                self._wake.set()
            except Exception as e:  # the coordinator must outlive any one failure
                log.exception("node %d: coordination step failed, retrying: %s", self.node.node_id, describe(e))
                time.sleep(0.5)
                self._wake.set()

    def _step(self) -> None:
        if self._zk.state != KazooState.CONNECTED:
            return
        with self._lock:
            reregister, self._reregister = self._reregister, False
            resigning, asked = self._resigning, self._reregisters
        if reregister and not resigning:
            try:  # not yet (asked again in _REREGISTER_POLL_S, see _run; no election meanwhile), or failed: again
                if not self._may_register_again():
                    return self._set_reregister()
                _register(self._zk, self.node)
            except BaseException:
                self._set_reregister()
                raise
            with self._lock:  # unless the session was lost again meanwhile: the registration went with it
                if self._reregisters == asked:
                    self._notify("registered")
        if self._epoch is None and not resigning:
            self._elect()
        if self._epoch is not None:
            self._reconcile()
            if resigning and not self._leads_any_in(self._states):
                self._resign()

    def _elect(self) -> None:
        try:
            data, stat = self._zk.get(CONTROLLER_EPOCH)
        except NoNodeError:
            return
        epoch = int(data or b"0") + 1
        txn = self._zk.transaction()
        txn.create(CONTROLLER, _dumps({"node_id": self.node.node_id, "epoch": epoch}), ephemeral=True)
        txn.set_data(CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
        results = txn.commit()
        if any(isinstance(r, Exception) for r in results):
            return  # another node won this epoch
        self._epoch, self._epoch_version = epoch, stat.version + 1
        self._states, self._topic_ids = _read_states(self._zk), {}
        log.info("node %d is the controller (epoch %d)", self.node.node_id, epoch)

    def _reconcile(self) -> None:
        live = sorted(int(c) for c in self._zk.get_children(IDS))
        if self._resigning:
            live = [n for n in live if n != self.node.node_id]
        wanted: list[TopicPartitionKey] = []
        ids: dict[str, str | None] = {}
        for topic in self._zk.get_children(TOPICS):
            try:
                data, _ = self._zk.get(f"{TOPICS}/{topic}")
            except NoNodeError:
                continue
            doc = json.loads(data) if data else {}
            count = int(doc.get("partitions", 0))
            ids[topic] = doc.get("topic_id")
            wanted += [(topic, p) for p in range(count)]
        # A topic deleted and created again since its states were read has a new ID: the old one's states must
        # not stand for the new one's, which are read again, not taken for absent: another controller may have
        # placed them since, and a partition placed anew starts at epoch 0, below any a leader may have claimed.
        changed = {t for t, i in ids.items() if self._topic_ids.get(t, i) != i}
        self._topic_ids = ids
        self._states = {tp: s for tp, s in self._states.items() if tp[0] in ids and tp[0] not in changed}
        if changed:
            self._states |= _read_states(self._zk, changed)
        preferred = preferred_leaders(wanted, live, self._placement)
        changes = place_leaders(wanted, self._states, live, self._placement, preferred)
        if changes:
            self._write_states(changes)
        if not self._resigning:
            self._rebalancer.step(self._states, wanted, live, self._write_states)

    def _write_states(self, changes: dict[TopicPartitionKey, PartitionState]) -> None:
        items = sorted(changes.items())
        for tp, _ in items:
            self._zk.ensure_path(f"{TOPICS}/{tp[0]}/partitions/{tp[1]}")
        for start in range(0, len(items), _TXN_OPS):
            chunk = items[start : start + _TXN_OPS]
            txn = self._zk.transaction()
            txn.check(CONTROLLER_EPOCH, self._epoch_version)
            for i, (tp, state) in enumerate(chunk):  # each raised above the epoch ZooKeeper holds, version-checked
                chunk[i] = (tp, stage_state(self._zk, txn, _state_path(*tp), state))
            results = txn.commit()
            if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):  # another op failed
                raise StaleControllerEpochError(
                    f"controller epoch {self._epoch} is stale (another controller was elected); "
                    f"{len(chunk)} leader changes were not written"
                )
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                self._states = _read_states(self._zk)  # someone else's view of a state differed: re-read, retry
                self._wake.set()
                return
            for tp, state in chunk:
                self._states[tp] = state
                log.info(
                    "partition %s-%d: leader %d, epoch %d%s",
                    tp[0],
                    tp[1],
                    state.leader,
                    state.leader_epoch,
                    "" if state.handover_to is None else f", handing over to {state.handover_to}",
                )

    def _resign(self) -> None:
        epoch, self._epoch, self._states, self._topic_ids = self._epoch, None, {}, {}
        try:
            data, _ = self._zk.get(CONTROLLER)
            if json.loads(data).get("node_id") == self.node.node_id:
                self._zk.delete(CONTROLLER)
        except (NoNodeError, KazooException, ValueError):
            pass
        log.info("node %d resigned as controller (epoch %s)", self.node.node_id, epoch)

    # -- helpers ----------------------------------------------------------------

    def _set_reregister(self) -> None:
        with self._lock:
            self._reregister, self._reregisters = True, self._reregisters + 1

    def _leads_any_in(self, states: dict[TopicPartitionKey, PartitionState]) -> bool:
        return any(s.leader == self.node.node_id for s in states.values())

    def _controller_changed(self, data: bytes | None, _stat: Any) -> None:
        if data is None:
            self._controller = (None, self._controller[1])
            self._wake.set()  # no controller: run an election
            return
        try:
            doc = json.loads(data)
            self._controller = (int(doc["node_id"]), int(doc["epoch"]))
        except (ValueError, KeyError, TypeError):
            log.warning("node %d: unreadable %s: %r", self.node.node_id, CONTROLLER, data)

    def _cache_changed(self) -> None:
        self._wake.set()
        if self._on_change is not None:
            self._on_change()

    def _session_changed(self, state: str) -> None:
        if state == KazooState.LOST:
            self._epoch = None  # /controller was ephemeral: it is gone with the session
            self._set_reregister()
            self._notify("lost")
        elif state == KazooState.SUSPENDED:
            self._notify("suspended")
        else:
            self._wake.set()
            self._notify("connected")

    def _notify(self, event: SessionEvent) -> None:
        if self._on_session is not None:
            try:
                self._on_session(event)
            except Exception:  # a listener's failure must not break kazoo's event thread
                log.exception("node %d: session listener failed on %s", self.node.node_id, event)
