"""This ingest node's membership of a cluster: registration, leadership watch, the acks=1 lease.

Cluster mode is on when ``zookeeper.connect`` is set (docs/design.md §8). A
:class:`ClusterMembership` runs a :class:`~logstore.cluster.ZooKeeperController`
(registry, controller election, partition states) and one thread of its own
that

* whenever the coordinator's cached view of the tree changes (and every
  second regardless) compares its partition leaders with the last ones it
  handed on, and on a change calls ``on_change`` (the broker
  then opens the topics this node leads and tells each pipeline its
  partitions and their epochs);
* while this node hands a partition over (preferred-leader election,
  :mod:`logstore.cluster.rebalance`), calls ``on_change`` every
  ``_HANDOVER_POLL_S`` too, so the broker says ``drained`` as soon as the
  partition is;
* every sixth of the session timeout makes one ZooKeeper round trip and
  keeps the time it *sent* the last one that succeeded: the node's **lease**.

The session timeout is the one ZooKeeper *negotiated*, re-read at every
(re)connect: the server clamps ``zookeeper.session.timeout.ms`` to its
``[minSessionTimeout, maxSessionTimeout]`` (2 and 20 ticks by default) and
expires the session after the timeout it granted, so a lease reckoned from a
larger configured value would outlive the session.

The lease closes the window of a paused leader (SIGSTOP, a long GC): an acks=1
answer before the commit is a promise that the next leader keeps by replaying
this node's write-ahead log, and the next leader is chosen only once this
node's session expired — at least a session timeout after the last round trip
ZooKeeper answered. A node therefore answers an acks=1 promise only while
:meth:`ClusterMembership.lease_valid` (its last successful round trip was sent less
than two thirds of the negotiated session timeout ago, and the session is not suspended);
otherwise the request waits for its commit, which the Delta fence refuses
after a takeover (the producer retries at the new leader). Frames logged
while the lease held are on disk before any new leader reads the log.

A new leader replays departed nodes' write-ahead logs and claims its partitions under the topic's
failover lock (:meth:`ClusterMembership.failover_lock`), a lock in ZooKeeper held in this node's session, so
it serves a shared directory and an object-store root alike. Only nodes not registered count as departed, so a
node registers only once nothing it promised can be skipped:

* a starting node commits its previous run's frames under the same lock before it registers
  (``before_register`` of :meth:`ClusterMembership.start`);
* a node whose session was lost (paused, or cut from ZooKeeper, past its session timeout) registers again
  only once every acks=1 batch it promised offsets is answered (``promises_unanswered``): committed, or
  failed because a new leader's claim fenced it — a claim made while this node was not registered, so the
  claimer replayed its frames. Registered at once, a new leader reading the registry during its claim
  would count it live, skip its frames, and fence its commit of those promised records: they would be
  lost. Until then it stays unregistered and accepts no produce; it logs once which topics hold how many
  such batches.

Session events: ``suspended`` or ``lost`` stop this node accepting produce
and promising at once (``on_session(False)``); it keeps committing what it
accepted — the per-partition fence in the Delta log refuses whatever a new
leader's claim made stale. ``connected`` lets it serve again, for the
partitions ZooKeeper still says it leads; after ``lost``, only once it has registered again (above).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout, NoNodeError
from kazoo.retry import KazooRetry, RetryFailedError

from logstore.cluster import (
    FAILOVER_LOCKS,
    ClusterMetadata,
    NodeInfo,
    ZooKeeperController,
    ensure_chroot,
    split_connect,
)
from logstore.common.logs import describe
from logstore.config import LogstoreConfig
from logstore.errors import DuplicateBrokerRegistrationError, InvalidConfigError, KafkaStorageError

__all__ = [
    "FAILOVER_LOCKS",
    "LEASE_FRACTION",
    "ClusterMembership",
    "advertised_kafka",
    "advertised_url",
    "check_node_id_free",
]

log = logging.getLogger("logstore.cluster")

LEASE_FRACTION = 2 / 3
"""Share of the negotiated session timeout an acks=1 lease lasts after the round trip that renewed it was sent."""
_WATCH_S = 1.0
"""Longest wait between two looks at the cached view (changes wake the watch at once)."""
_HANDOVER_POLL_S = 0.02
"""How often a node handing a partition over looks whether it has drained (the partition is unavailable meanwhile)."""


def advertised_url(config: LogstoreConfig) -> str:
    """``advertised.url``, else ``http(s)://<server.host>:<server.port>`` (what other nodes forward to)."""
    if config.advertised_url:
        return config.advertised_url.rstrip("/")
    scheme = "https" if config.server_ssl_certfile else "http"
    host = config.server_host if config.server_host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    return f"{scheme}://{host}:{config.server_port}"


def advertised_kafka(config: LogstoreConfig) -> str | None:
    """``host:port`` of the Kafka listener clients are told of: ``advertised.listeners``, else ``listeners`` (a
    wildcard host as 127.0.0.1); None when the listener is off. The protocol (``SASL_SSL://`` …) is left out."""
    value = (config.advertised_listeners or config.listeners).strip()
    if not value:
        return None
    address = value.partition("://")[2] or value
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"{host}:{port}"


@contextlib.contextmanager
def _asked_for_a_request(what: str, connected: bool) -> Iterator[None]:
    """A ZooKeeper call made for a client's request: its failure answers the request with a retriable
    ``KAFKA_STORAGE_ERROR``, not an unknown server error. While the session is not ``connected`` it is not made:
    kazoo would hold it until ZooKeeper answers again, and the request with it."""
    if not connected:
        raise KafkaStorageError(f"ZooKeeper did not answer {what} (not connected); retry")
    try:
        yield
    except KazooException as e:
        raise KafkaStorageError(f"ZooKeeper did not answer {what} ({e!r}); retry") from e


def check_node_id_free(config: LogstoreConfig) -> None:
    """Refuse early, before serving, when a live node holds ``node.id`` (the node registers for good at start).

    Raises:
        InvalidConfigError: ``node.id`` is not set.
        DuplicateBrokerRegistrationError: ``/brokers/ids/<node.id>`` exists (a live node's ephemeral znode).
        KafkaStorageError: ZooKeeper cannot be reached within the session timeout.
    """
    if config.node_id < 0:
        raise InvalidConfigError("cluster mode (zookeeper.connect is set) needs node.id, a unique integer >= 0")
    hosts, chroot = split_connect(config.zookeeper_connect)
    timeout_s = config.zookeeper_session_timeout_ms / 1000
    zk = KazooClient(hosts=f"{hosts}{chroot}", timeout=timeout_s)
    try:
        ensure_chroot(hosts, chroot, timeout_s)  # a client of a missing chroot warns and cannot create it
        zk.start(timeout=timeout_s)
    except Exception as e:  # kazoo's timeout is a plain exception class of its own
        raise KafkaStorageError(f"cannot reach ZooKeeper at zookeeper.connect={config.zookeeper_connect}: {e}") from e
    try:
        # One read, not exists() then get(): the previous run's session may expire between the two.
        data, _ = zk.get(f"/brokers/ids/{config.node_id}")
    except NoNodeError:
        return  # free
    finally:
        zk.stop()
        zk.close()
    raise DuplicateBrokerRegistrationError(
        f"node.id {config.node_id} is registered by a live node ({data.decode(errors='replace')}); "
        "give every node its own node.id, or wait zookeeper.session.timeout.ms after a crash"
    )


class ClusterMembership:
    """This node in the cluster (see the module docstring).

    Args:
        config: needs ``zookeeper.connect`` and ``node.id``.
        on_change: called on this object's thread with the new view whenever
            the partition leaders (or live nodes) change.
        on_session: called from kazoo's thread with True (connected, and registered) or False
            (suspended, lost, or not registered again yet): whether this node may accept produce now.
        promises_unanswered: topic → acks=1 batches promised offsets and not answered yet (None: a pipeline of the
            topic is still closing); asked before registering again after a lost session, which waits for ``{}``.

    Raises:
        InvalidConfigError: ``node.id`` is not set.
    """

    def __init__(
        self,
        config: LogstoreConfig,
        *,
        on_change: Callable[[ClusterMetadata], None],
        on_session: Callable[[bool], None],
        promises_unanswered: Callable[[], dict[str, int | None]] = dict,
    ) -> None:
        if config.node_id < 0:
            raise InvalidConfigError("cluster mode (zookeeper.connect is set) needs node.id, a unique integer >= 0")
        self.node = NodeInfo(config.node_id, advertised_url(config), advertised_kafka(config))
        self.configured_session_timeout_s = config.zookeeper_session_timeout_ms / 1000
        self._logged_timeout_s = self.configured_session_timeout_s
        self._changed = threading.Event()
        self.coordinator = ZooKeeperController(
            config.zookeeper_connect,
            self.node,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            placement="topic" if config.leader_placement == "topic" else "partition",
            rebalance=(
                config.auto_leader_rebalance_enable,
                float(config.leader_imbalance_check_interval_seconds),
                config.leader_imbalance_per_broker_percentage,
            ),
            on_session=self._session_changed,
            on_change=self._changed.set,
            may_register_again=self._may_register_again,
        )
        self._promises_unanswered = promises_unanswered
        self._registered = True
        """False from a lost session until this node registered again (it accepts no produce meanwhile)."""
        self._session_events = 0
        """Session events so far: a lease round trip counts only if none came while it was on its way."""
        self._waiting_logged = False
        self._on_change = on_change
        self._on_session = on_session
        self._lease_from = -math.inf
        self._connected = False
        self._seen: ClusterMetadata | None = None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"cluster-node-{config.node_id}", daemon=True)

    @property
    def node_id(self) -> int:
        return self.node.node_id

    def start(self, before_register: Callable[[], None] = lambda: None) -> None:
        """Register and watch (requests forwarded to this node before it serves are refused, and retried).

        ``before_register`` runs once the ZooKeeper session is open, while other nodes do not count this one live
        yet (:meth:`failover_lock` works): the node commits its previous run's write-ahead log then.

        Raises:
            DuplicateBrokerRegistrationError: a live node holds this ``node.id``.
        """
        sent = time.monotonic()

        def connected() -> None:  # the session is open: a request's ZooKeeper calls may be made
            self._lease_from, self._connected = sent, True
            before_register()

        self.coordinator.start(connected)
        self._lease_from, self._connected = sent, True
        self._log_negotiated()
        self._thread.start()

    @property
    def session_timeout_s(self) -> float:
        """The session timeout ZooKeeper granted at the last (re)connect (before the first: the configured one)."""
        return self.coordinator.session_timeout_s

    @property
    def lease_s(self) -> float:
        """How long an acks=1 lease lasts after the round trip that renewed it was sent."""
        return self.session_timeout_s * LEASE_FRACTION

    def lease_valid(self) -> bool:
        """Whether an acks=1 promise may be answered now (see the module docstring): never while the session
        is down, nor after a lost one until this node registered again."""
        return self._connected and self._registered and time.monotonic() - self._lease_from < self.lease_s

    def metadata(self) -> ClusterMetadata:
        """The cluster as this node's ZooKeeper cache sees it (no round trip)."""
        return self.coordinator.metadata()

    @contextlib.contextmanager
    def failover_lock(self, topic: str) -> Iterator[None]:
        """Hold the topic's failover lock in ZooKeeper: one new leader of the topic replays and claims at a time.

        Whichever new leader of a departed node's partitions comes first replays
        all of that node's frames of the topic; the others find them committed.
        Only replays and claims take it, never a leader's ordinary commits, so a
        paused (SIGSTOPped) leader does not block it. It is a znode of this node's
        ZooKeeper session (:data:`FAILOVER_LOCKS`), the same whether the root is a
        shared directory or an object store, and it goes with the session: a holder
        that dies, or is paused past its session timeout, lets the next contender
        in within that timeout. A holder whose session expired may still finish its
        replay and claim when it resumes; that is safe, because the lock only saves
        work: a frame lands once however many replay it (the idempotent writer
        re-plans after every lost commit race), and a claim at a stale epoch is
        refused by the newer one in the Delta log (:class:`~logstore.errors.FencedLeaderEpochError`).

        Waits up to the negotiated session timeout for the lock (by then a holder
        that stopped has lost it). Releasing it retries for at most that long, a
        second apart: a ZooKeeper away longer has expired the session, and the
        znode with it.

        Raises:
            KafkaStorageError: not taken within the session timeout (another node is still replaying the topic, or
                ZooKeeper cannot be reached): the caller tries again later.
        """
        timeout_s = self.session_timeout_s
        lock = self.coordinator.lock(f"{FAILOVER_LOCKS}/{topic}")
        asked = time.monotonic()
        try:
            taken = lock.acquire(timeout=timeout_s)
        except LockTimeout:
            taken = False
        except KazooException as e:  # a lost connection or session
            raise KafkaStorageError(f"topic {topic}: cannot take the failover lock in ZooKeeper: {describe(e)}") from e
        if not taken:
            raise KafkaStorageError(
                f"topic {topic}: the failover lock in ZooKeeper ({FAILOVER_LOCKS}/{topic}) was not free within "
                f"{timeout_s:.1f} s (another node is replaying or claiming); trying again later"
            )
        if (waited := time.monotonic() - asked) >= 0.5:
            log.info(
                "topic %s: took the failover lock after %.2f s (another node was replaying or claiming)", topic, waited
            )
        try:
            yield
        finally:
            # Not lock.release(): kazoo's retries wait up to an hour between attempts while ZooKeeper is away, and
            # this thread holds the topic's writer. After a session timeout without an answer the session has
            # expired, and the lock's znode went with it.
            retry = KazooRetry(max_tries=-1, max_delay=1.0, deadline=timeout_s, ignore_expire=False)
            try:
                retry(lock._inner_release)
            except (RetryFailedError, KazooException) as e:
                log.warning("topic %s: failover lock not released (%s); it goes with the session", topic, describe(e))

    def register_topic(self, topic: str, partitions: int, topic_id: str | None = None) -> None:
        """Make a topic (or its added partitions) known to the controller, which gives them leaders.

        ``topic_id``: the topic's ID, kept in its znode as Kafka keeps it in ``/brokers/topics/<t>``.

        Raises:
            KafkaStorageError: ZooKeeper did not answer (connection lost, session expired): retriable.
        """
        with _asked_for_a_request(f"registering topic '{topic}'", self._connected):
            self.coordinator.register_topic(topic, partitions, topic_id)

    def unregister_topic(self, topic: str) -> None:
        """Make a deleted topic unknown to the controller (before its table goes).

        Raises:
            KafkaStorageError: ZooKeeper did not answer (connection lost, session expired): retriable.
        """
        with _asked_for_a_request(f"removing topic '{topic}'", self._connected):
            self.coordinator.unregister_topic(topic)

    def report_drained(self, topic: str, partition: int, leader_epoch: int) -> bool:
        """This node committed everything it accepted for a partition it hands over (preferred-leader election)."""
        return self.coordinator.report_drained(topic, partition, leader_epoch)

    def request_election(self, partitions: list[tuple[str, int]] | None) -> str:
        """Ask the controller for a preferred-leader election (None: every partition); returns the request's znode."""
        return self.coordinator.request_election(partitions)

    def recheck(self) -> None:
        """Hand the cluster's view to ``on_change`` again soon, on this object's thread, changed or not.

        After the node retired a pipeline of a re-created topic: the new one opens with its leadership.
        """
        self._seen = None
        self._changed.set()

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Controlled shutdown: hand this node's partitions to others, then leave (after the node drained)."""
        self._closed.set()
        self._changed.set()
        self._connected = False
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.coordinator.shutdown(timeout_s)

    def close(self) -> None:
        """Leave at once (the session ends; partitions move without a hand-over)."""
        self._closed.set()
        self._changed.set()
        self._connected = False
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.coordinator.close()

    # -- the node's thread --------------------------------------------------------

    def _run(self) -> None:
        next_ping = 0.0
        while not self._closed.is_set():
            watch_s = _HANDOVER_POLL_S if self._seen is not None and self._handing_over(self._seen) else _WATCH_S
            self._changed.wait(min(watch_s, max(0.0, next_ping - time.monotonic())))
            self._changed.clear()
            if self._closed.is_set():
                return
            try:
                now = time.monotonic()
                if now >= next_ping:
                    next_ping = now + self.session_timeout_s / 6
                    self._ping()
                meta = self.coordinator.metadata()
                if meta != self._seen or self._handing_over(meta):
                    self._seen = meta
                    self._on_change(meta)
            except Exception as e:  # the watch must outlive any one failure (a topic that cannot be opened now)
                log.exception(
                    "node %d: applying the cluster's leadership failed, retrying: %s", self.node_id, describe(e)
                )
                self._seen = None
                time.sleep(0.5)

    def _handing_over(self, meta: ClusterMetadata) -> bool:
        """Whether this node is handing a partition over and has not said it drained: look again until it has."""
        me = self.node_id
        return any(s.leader == me and s.handover_to is not None and not s.drained for s in meta.partitions.values())

    def _ping(self) -> None:
        sent, session = time.monotonic(), self._session_events
        try:
            self.coordinator.ping()
        except KazooException as e:
            log.warning(
                "node %d: ZooKeeper round trip failed (acks=1 lease not renewed): %s", self.node_id, describe(e)
            )
            return
        if self._session_events == session:  # else the session changed meanwhile: the round trip proves nothing
            self._lease_from = max(self._lease_from, sent)

    def _session_changed(self, event: str) -> None:
        """The session's state (``connected``, ``suspended``, ``lost``) and this node's registration
        (``lost`` ends it, ``registered`` gives it back) are kept apart: produce is accepted only with both."""
        if event == "registered":
            self._registered = True
            log.warning("node %d: registered again in a new ZooKeeper session", self.node_id)
        else:
            self._session_events += 1
            self._connected = event == "connected"
            if event == "lost":
                self._registered = False
            if not self._connected:
                self._lease_from = -math.inf
                if self._closed.is_set():  # this node is leaving: its own session ends, not a fault
                    log.info("node %d: ZooKeeper session closed: left the cluster", self.node_id)
                else:
                    log.warning("node %d: ZooKeeper session %s: not accepting produce", self.node_id, event)
            else:
                self._log_negotiated()
        self._on_session(self._connected and self._registered)

    def _may_register_again(self) -> bool:
        """After a lost session: whether every acks=1 batch this node promised is answered (the module docstring);
        asked on the coordinator's thread, which asks again shortly while it says no."""
        unanswered = self._promises_unanswered()
        if not unanswered:
            self._waiting_logged = False
            return True
        if not self._waiting_logged:
            self._waiting_logged = True
            held = ", ".join(f"{t}: {'closing' if n is None else n}" for t, n in sorted(unanswered.items()))
            log.warning(
                "node %d: not registering again in the new ZooKeeper session until the acks=1 batches promised "
                "offsets are answered (committed, or fenced by a new leader that replays them); topics holding "
                "them: %s",
                self.node_id,
                held,
            )
        return False

    def _log_negotiated(self) -> None:
        """Say once (and again on a change) that ZooKeeper granted a session timeout other than the configured one."""
        granted = self.session_timeout_s
        if granted != self._logged_timeout_s:
            self._logged_timeout_s = granted
            log.warning(
                "node %d: ZooKeeper negotiated a session timeout of %d ms (zookeeper.session.timeout.ms is %d); "
                "the acks=1 lease lasts %d ms",
                self.node_id,
                round(granted * 1000),
                round(self.configured_session_timeout_s * 1000),
                round(granted * LEASE_FRACTION * 1000),
            )
