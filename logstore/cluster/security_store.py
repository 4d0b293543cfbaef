"""Keys, ACLs and quotas in ZooKeeper, for cluster mode (the store every node and the CLI share).

The three documents of :class:`~logstore.security.store.DocumentStore` —
``keys``, ``acls``, ``quotas``, each a JSON list — are the znodes
``/security/<name>`` under the chroot of ``zookeeper.connect``, as Kafka keeps
its ACLs in ZooKeeper. A change is a compare-and-set: read the znode and its
version, apply the change, write it back only at that version, and on a
conflict (another node or CLI changed it meanwhile) read again and re-apply,
so concurrent changes never lose one another.

Visibility: every store watches the three znodes (kazoo ``DataWatch``) and
swaps in a new snapshot when one changes, so a key revoked on one node is
refused by every node within one ZooKeeper round trip, not a polling
interval. A znode holds at most ``jute.maxbuffer`` (1 MiB by default): about
4,000 API keys or 5,000 ACL bindings.

:func:`open_security_store` is the one place that chooses the store: this one
when ``zookeeper.connect`` is set, else the root's files. The server's guard
and the ``logstore keys|acls|quotas`` commands both open it.

Where code runs: kazoo's event thread delivers the watches; changes run on
the caller's thread.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import orjson
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from logstore.cluster.connect import RECONNECT, ensure_chroot, split_connect
from logstore.config import LogstoreConfig
from logstore.errors import KafkaStorageError
from logstore.security.store import DOCUMENTS, Change, DocumentStore, FileSecurityStore, SecurityState

__all__ = ["ZooKeeperSecurityStore", "open_security_store"]

SECURITY = "/security"


class ZooKeeperSecurityStore(DocumentStore):
    """:class:`~logstore.security.store.SecurityStore` in ZooKeeper (see the module docstring).

    Args:
        connect: ``zookeeper.connect`` (``host:port[,…][/chroot]``).
        timeout_s: how long to wait for ZooKeeper when connecting.

    Raises:
        KafkaStorageError: ZooKeeper could not be reached within ``timeout_s``.
    """

    def __init__(self, connect: str, *, timeout_s: float = 15.0) -> None:
        hosts, chroot = split_connect(connect)
        self._zk = KazooClient(hosts=f"{hosts}{chroot}", timeout=timeout_s, connection_retry=RECONNECT)
        self._lock = threading.Lock()
        self._docs: dict[str, list[dict[str, Any]]] = {name: [] for name in DOCUMENTS}
        self._versions = {name: -1 for name in DOCUMENTS}
        """The znode version each document was read at: an older one arriving late never replaces it."""
        self._state = SecurityState()
        self._ready = {name: threading.Event() for name in DOCUMENTS}
        try:
            ensure_chroot(hosts, chroot, timeout_s)
            self._zk.start(timeout=timeout_s)
            for name in DOCUMENTS:
                with contextlib.suppress(NodeExistsError):
                    self._zk.create(f"{SECURITY}/{name}", b"[]", makepath=True)
                self._zk.DataWatch(f"{SECURITY}/{name}", self._watcher(name))
        except (KazooException, KazooTimeoutError) as e:  # kazoo's start timeout is not a KazooException
            self.close()
            raise KafkaStorageError(f"cannot reach ZooKeeper at {connect} for keys and ACLs: {e}") from e
        for event in self._ready.values():
            event.wait(timeout_s)

    def close(self) -> None:
        """End the ZooKeeper session (and its watches); the store answers from its last snapshot after."""
        self._zk.stop()
        self._zk.close()

    def _watcher(self, name: str) -> Any:
        def changed(data: bytes | None, stat: Any) -> None:
            self._install(name, list(orjson.loads(data) if data else []), stat.version if stat else -1)
            self._ready[name].set()

        return changed

    def _update(self, name: str, change: Change) -> None:
        path = f"{SECURITY}/{name}"
        try:
            while True:
                try:
                    data, stat = self._zk.get(path)
                except NoNodeError:
                    data, stat = b"[]", None
                doc = change(list(orjson.loads(data) if data else []))
                body = orjson.dumps(doc)
                try:
                    if stat is None:
                        self._zk.create(path, body, makepath=True)
                        version = 0
                    else:
                        version = self._zk.set(path, body, version=stat.version).version
                except (BadVersionError, NodeExistsError):
                    continue  # changed meanwhile: apply the change to the new content
                break
        except KazooException as e:
            raise KafkaStorageError(f"cannot change {name} in ZooKeeper: {e}") from e
        self._install(name, doc, version)  # this process sees its own change at once, before the watch fires

    def _install(self, name: str, doc: list[dict[str, Any]], version: int) -> None:
        with self._lock:
            if version < self._versions[name]:
                return
            self._docs[name], self._versions[name] = doc, version
            self._state = self._state_of(self._docs)


def open_security_store(config: LogstoreConfig) -> DocumentStore:
    """The store of keys, ACLs and quotas ``config`` names: ZooKeeper in cluster mode, else ``<root>/_security/``.

    With ``zookeeper.connect`` set, every node and the CLI share the znodes under its chroot (the coordinator's),
    wherever their roots are; embedded, the root's files. The caller closes the store (``with`` or ``close()``).

    Raises:
        KafkaStorageError: cluster mode and ZooKeeper could not be reached within ``zookeeper.session.timeout.ms``.
    """
    if config.zookeeper_connect:
        return ZooKeeperSecurityStore(config.zookeeper_connect, timeout_s=config.zookeeper_session_timeout_ms / 1000)
    return FileSecurityStore(config.root)
