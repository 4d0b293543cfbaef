"""Running Apache ZooKeeper, the cluster's coordinator, from the project's jar cache.

ZooKeeper is the real Apache server (3.9), fetched from Maven Central by
``make`` into ``.cache/zookeeper`` (``jars/zookeeper/pom.xml``) — a folder of
its own, because every jar in ``.cache/jars`` goes on Spark's classpath.
:class:`ZooKeeperServer` writes a ``zoo.cfg`` into the data directory and runs
``QuorumPeerMain`` on it with the machine's ``java``: standalone by default,
or as one member of an ensemble when ``peers`` are given. ``logstore
zookeeper start`` runs it in the foreground; the tests start real servers
with it (never a mock).

The admin HTTP server is off (it would take port 8080, the ingest API's
default); the ``ruok``/``srvr``/``mntr``/``stat`` four-letter words stay on for probes.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from logstore.errors import InvalidConfigError, KafkaStorageError

__all__ = ["DEFAULT_CLIENT_PORT", "ZooKeeperServer", "ensemble", "zookeeper_classpath", "zookeeper_ok"]

DEFAULT_CLIENT_PORT = 2181
_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def _project_dir() -> Path:
    return Path(__file__).resolve().parents[2] / ".cache" / "zookeeper"


def zookeeper_classpath(jars_dir: str | os.PathLike[str] | None = None) -> str:
    """The Java classpath of the ZooKeeper server in ``jars_dir`` (default: the project's ``.cache/zookeeper``).

    Raises:
        InvalidConfigError: no ZooKeeper jars there (run ``make zookeeper``).
    """
    folder = Path(jars_dir) if jars_dir else _project_dir()
    jars = sorted(folder.glob("*.jar"))
    if not any(j.name.startswith("zookeeper-3") for j in jars):
        raise InvalidConfigError(
            f"no ZooKeeper jars in {folder}; run 'make zookeeper' to fetch them from Maven Central"
        )
    return os.pathsep.join(str(j) for j in jars)


def zookeeper_ok(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when a ZooKeeper server at ``host:port`` serves sessions: ``srvr`` reports its ``Mode``.

    Not ``ruok``: ZooKeeper answers ``imok`` as soon as its port is open, while it still loads its data and
    drops every session request ("not currently serving requests"). ``srvr`` reports a mode (``standalone``,
    ``leader``, ``follower``) only once it serves; an ensemble member reports one only once it is in a quorum.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(b"srvr")
            s.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    except OSError:
        return False
    return any(f"Mode: {mode}".encode() in data for mode in ("standalone", "leader", "follower"))


@dataclass(frozen=True)
class ZooKeeperServer:
    """One ZooKeeper server: where it keeps its data and where it listens.

    Args:
        data_dir: snapshots and transaction log; ``zoo.cfg`` (and ``myid`` in
            an ensemble) are written here.
        port: the client port.
        host: the address it listens on (loopback by default).
        server_id: this member's id in ``peers`` (ensemble only).
        peers: the ensemble as ``(id, host, quorum_port, election_port)``;
            empty = standalone.
        tick_time_ms: ZooKeeper's time unit; session timeouts are bounded to
            [2, 20] ticks, so 500 ms allows sessions of 1 to 10 s.
        jars_dir: where the jars are (default: the project's cache).
    """

    data_dir: str
    port: int = DEFAULT_CLIENT_PORT
    host: str = "127.0.0.1"
    server_id: int | None = None
    peers: tuple[tuple[int, str, int, int], ...] = ()
    tick_time_ms: int = 500
    jars_dir: str | None = None

    @property
    def connect(self) -> str:
        """``host:port`` for clients (``zookeeper.connect``)."""
        return f"{self.host}:{self.port}"

    def write_config(self) -> str:
        """Write ``zoo.cfg`` (and ``myid``) into the data directory; returns the config's path."""
        os.makedirs(self.data_dir, exist_ok=True)
        lines = [
            f"tickTime={self.tick_time_ms}",
            "initLimit=20",
            "syncLimit=10",
            f"dataDir={os.path.abspath(self.data_dir)}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr,stat",
            "autopurge.purgeInterval=1",
        ]
        if self.peers:
            if self.server_id is None or self.server_id not in {p[0] for p in self.peers}:
                raise InvalidConfigError("an ensemble member needs a server id that is one of its peers")
            lines += [f"server.{i}={h}:{q}:{e}" for i, h, q, e in self.peers]
            with open(os.path.join(self.data_dir, "myid"), "w") as f:
                f.write(f"{self.server_id}\n")
        path = os.path.join(self.data_dir, "zoo.cfg")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def command(self) -> list[str]:
        """The ``java`` command line that runs this server (writes its config first)."""
        java = shutil.which("java")
        if java is None:
            raise InvalidConfigError("ZooKeeper needs Java: no 'java' on PATH")
        config = self.write_config()
        return [
            java,
            "-Xmx256m",
            "-cp",
            zookeeper_classpath(self.jars_dir),
            "-Dzookeeper.admin.enableServer=false",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            _MAIN,
            config,
        ]

    def exec(self) -> None:
        """Become the server: this process is replaced by the JVM, so signals reach ZooKeeper itself."""
        cmd = self.command()
        os.execv(cmd[0], cmd)

    def spawn(self, *, log: str | None = None) -> subprocess.Popen[bytes]:
        """Start as a child process (output to ``log``, default ``<data_dir>/zookeeper.log``)."""
        cmd = self.command()  # creates the data directory
        out = open(log or os.path.join(self.data_dir, "zookeeper.log"), "ab")  # noqa: SIM115 - the child owns it
        try:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        finally:
            out.close()

    def wait_serving(self, proc: subprocess.Popen[bytes] | None = None, timeout_s: float = 60) -> None:
        """Block until the server serves sessions (:func:`zookeeper_ok`; in an ensemble: once it is in a quorum).

        Raises:
            KafkaStorageError: it exited or did not serve within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise KafkaStorageError(f"ZooKeeper on {self.connect} exited with status {proc.returncode}")
            if zookeeper_ok(self.host, self.port):
                return
            time.sleep(0.05)
        raise KafkaStorageError(f"ZooKeeper on {self.connect} did not start serving within {timeout_s} s")


def ensemble(base_dir: str, ports: Sequence[tuple[int, int, int]], host: str = "127.0.0.1") -> list[ZooKeeperServer]:
    """The members of an ensemble on one host: ``ports`` = (client, quorum, election) per member."""
    peers = tuple((i + 1, host, q, e) for i, (_c, q, e) in enumerate(ports))
    return [
        ZooKeeperServer(os.path.join(base_dir, f"zk{i + 1}"), port=c, host=host, server_id=i + 1, peers=peers)
        for i, (c, _q, _e) in enumerate(ports)
    ]
