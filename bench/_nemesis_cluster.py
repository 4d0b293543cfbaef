"""The cluster the nemesis attacks: a 3-server ZooKeeper ensemble, ``logstore serve`` nodes, proxies between them.

Every process is a real one on loopback: ZooKeeper's servers
(:func:`logstore.cluster.zookeeper_server.ensemble`, each with its ``myid`` and
``server.N`` lines) and ``logstore serve`` nodes in cluster mode over one
shared root. Node *n* reaches each ZooKeeper server through a
:class:`~_proxy.CuttableProxy` of its own, so the nemesis can cut one node
from ZooKeeper while it keeps serving clients. A node keeps its HTTP port
across restarts, so clients keep their list of nodes.

With ``security``, the nodes run with ``security.enabled`` and the nemesis's
clients act as the super user ``User:nemesis``, whose API key is put in the
cluster's security store (ZooKeeper) before the nodes start: :attr:`NemesisCluster.headers`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from _proxy import CuttableProxy
from harness import free_port

from logstore.cluster.security_store import ZooKeeperSecurityStore
from logstore.cluster.zookeeper_server import ZooKeeperServer, ensemble
from logstore.security import new_key

__all__ = ["NemesisCluster", "Node", "free_port"]

_LOGSTORE = [sys.executable, "-m", "logstore_cli"]
CHROOT = "/nemesis"
SUPER_USER = "User:nemesis"
"""The principal every client of the nemesis acts as when security is on (in ``super.users``)."""


class Node:
    """One ``logstore serve`` node of the cluster: its id, port, child process and stderr log."""

    def __init__(self, node_id: int, root: Path, zookeeper: str, log_dir: Path, **config: object) -> None:
        self.node_id = node_id
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = {"zookeeper.connect": zookeeper, "node.id": node_id, **config}
        self.log_path = log_dir / f"node-{node_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}
        env |= {"LOGSTORE_" + k.upper().replace(".", "_"): str(v) for k, v in self.config.items()}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [*_LOGSTORE, "--root", str(self.root), "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def start(self, timeout_s: float = 90) -> None:
        """Start and wait until ``/readyz`` answers 200; a start refused because the node's previous session
        has not expired yet (its id still registered) is tried again until ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        self.spawn()
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                if "registered by a live node" not in self.log_path.read_text()[-2000:]:
                    raise RuntimeError(f"node {self.node_id} exited at start; see {self.log_path}")
                time.sleep(0.5)
                self.spawn()
                continue
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    self.paused = False
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"node {self.node_id} did not become ready within {timeout_s} s; see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL (a paused node dies too)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.paused = False

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout_s: float = 60) -> int | None:
        """SIGTERM (controlled shutdown); SIGKILL if it does not exit within ``timeout_s``."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None


class NemesisCluster:
    """ZooKeeper ensemble + proxies + nodes under ``work_dir`` (data in ``work_dir/data``)."""

    def __init__(
        self, work_dir: Path, nodes: int = 3, zookeepers: int = 3, *, security: bool = False, **node_config: object
    ) -> None:
        self.security = security
        if security:
            node_config = {"security.enabled": "true", "super.users": SUPER_USER, **node_config}
        self.headers: dict[str, str] = {}
        """What every client request carries: the super user's API key when security is on."""
        self.work_dir = work_dir
        self.root = work_dir / "data"
        self.logs = work_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        ports = [(free_port(), free_port(), free_port()) for _ in range(zookeepers)]
        self.zk: list[ZooKeeperServer] = ensemble(str(work_dir / "zookeeper"), ports)
        self.zk_procs: list[subprocess.Popen[bytes] | None] = [None] * zookeepers
        self.proxies: dict[int, list[CuttableProxy]] = {}
        self.nodes: dict[int, Node] = {}
        for n in range(1, nodes + 1):
            self.proxies[n] = [CuttableProxy((z.host, z.port), name=f"zk-proxy-{n}") for z in self.zk]
            connect = ",".join(p.address for p in self.proxies[n]) + CHROOT
            self.nodes[n] = Node(n, self.root, connect, self.logs, **node_config)

    # -- ZooKeeper -----------------------------------------------------------------

    def start_zookeeper(self, i: int) -> None:
        z = self.zk[i]
        self.zk_procs[i] = z.spawn(log=str(self.logs / f"zookeeper-{i + 1}.log"))

    def kill_zookeeper(self, i: int) -> None:
        proc = self.zk_procs[i]
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self.zk_procs[i] = None

    def wait_zookeeper(self, timeout_s: float = 90) -> None:
        """Until every running member serves in a quorum."""
        for z, proc in zip(self.zk, self.zk_procs, strict=True):
            if proc is not None:
                z.wait_serving(proc, timeout_s)

    # -- nodes -----------------------------------------------------------------------

    def start_nodes(self, ids: list[int] | None = None) -> None:
        """Start these nodes (default: all) at once, and wait until each is ready."""
        chosen = [self.nodes[n] for n in (ids or list(self.nodes))]
        with ThreadPoolExecutor(len(chosen)) as pool:
            for f in [pool.submit(node.start) for node in chosen]:
                f.result()

    def cut(self, n: int) -> None:
        for p in self.proxies[n]:
            p.cut()

    def heal(self, n: int) -> None:
        for p in self.proxies[n]:
            p.heal()

    def security_store(self) -> ZooKeeperSecurityStore:
        """The cluster's keys and ACLs in ZooKeeper, reached directly (not through a node's proxies); close it."""
        return ZooKeeperSecurityStore(",".join(f"{z.host}:{z.port}" for z in self.zk) + CHROOT)

    def start(self) -> None:
        for i in range(len(self.zk)):
            self.start_zookeeper(i)
        self.wait_zookeeper()
        if self.security:
            record, key = new_key(SUPER_USER)
            with self.security_store() as store:
                store.add_key(record)
            self.headers = {"Authorization": f"Bearer {key}"}
        self.start_nodes()

    def shutdown(self) -> None:
        """Stop the nodes (SIGTERM, so acks=1 records are committed), then ZooKeeper; close the proxies."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(lambda node: node.stop(), self.nodes.values()))
        self.close()

    def close(self) -> None:
        """Kill whatever still runs (also after a failure)."""
        for node in self.nodes.values():
            node.kill()
        for i in range(len(self.zk)):
            with contextlib.suppress(OSError):
                self.kill_zookeeper(i)
        for proxies in self.proxies.values():
            for p in proxies:
                p.close()
