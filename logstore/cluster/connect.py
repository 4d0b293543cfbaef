"""How a node reaches ZooKeeper: ``zookeeper.connect`` split into hosts and chroot, the chroot created, and the
reconnect policy of the node's long-lived clients (the coordinator, the security store)."""

from __future__ import annotations

from kazoo.client import KazooClient

from logstore.errors import InvalidConfigError

__all__ = ["DEFAULT_CHROOT", "RECONNECT", "ensure_chroot", "split_connect"]

DEFAULT_CHROOT = "/logstore"
RECONNECT = {"max_tries": -1, "max_delay": 0.5}
"""kazoo's ``connection_retry`` for a node's long-lived clients: try again at least every half second (kazoo's own
backoff grows to 60 s during an outage, and a client came back that long after ZooKeeper did)."""


def split_connect(connect: str) -> tuple[str, str]:
    """``host:port[,host:port…][/chroot]`` → (hosts, chroot), the chroot defaulting to ``/logstore``.

    Raises:
        InvalidConfigError: no host.
    """
    hosts, slash, chroot = connect.partition("/")
    if not hosts.strip():
        raise InvalidConfigError(f"zookeeper.connect needs host:port[,host:port][/chroot], got '{connect}'")
    chroot = "/" + chroot.strip("/") if slash and chroot.strip("/") else DEFAULT_CHROOT
    return hosts.strip(), chroot


def ensure_chroot(hosts: str, chroot: str, timeout_s: float) -> None:
    """Create the chroot znode (and its parents) if missing, so a client of ``hosts`` + ``chroot`` can start.

    A kazoo client of a chroot cannot create the chroot itself: this one, of the bare ``hosts``, does.
    Every client of the cluster (coordinator, security store) calls it before it connects.

    Args:
        hosts: ``host:port[,host:port…]``, without the chroot (see :func:`split_connect`).
        chroot: an absolute znode path such as ``/logstore``.
        timeout_s: how long to wait for ZooKeeper.

    Raises:
        KazooTimeoutError: ZooKeeper could not be reached within ``timeout_s``.
        KazooException: ZooKeeper refused the create (e.g. its ACLs).
    """
    plain = KazooClient(hosts=hosts, timeout=timeout_s)
    plain.start(timeout=timeout_s)
    try:
        plain.ensure_path(chroot)
    finally:
        plain.stop()
        plain.close()
