"""The nemesis: a real cluster under a seeded schedule of faults, a workload, a history, and its check.

``bench/nemesis.py --minutes N --seed S [--out DIR]`` starts a 3-server
ZooKeeper ensemble and 3 ``logstore serve`` nodes over one shared root
(``bench/_nemesis_cluster.py``; each node reaches ZooKeeper through a proxy
the nemesis can cut, ``bench/_proxy.py``), then for N minutes runs at once:

* **the workload** — producer threads sending to random nodes over HTTP:
  acks 0, 1 and all; idempotent (``producer_id`` + ``sequence``, a failed
  request retried with the same sequence) and plain; keyed, keyless and with
  explicit partitions; one record or several partitions per request. Every
  record's value is unique in the run. Member consumers of one group
  (cooperative-sticky) join, fetch, commit what they read, heartbeat, and now
  and then leave and join again; an observer reads the group's committed
  offsets. With ``--spark``, a Spark ``availableNow`` reader of its own group
  every 15 s (``bench/_nemesis_spark.py``).
* **the nemesis** — a fault at a time, chosen by ``random.Random(seed)``:
  kill -9 of a node and its restart; SIGSTOP then SIGCONT of a node (a zombie
  leader); kill -9 of a ZooKeeper server and its restart; kill -9 of the whole
  cluster and its restart; a node cut from ZooKeeper (its proxies) while it
  still serves clients, then healed; the delete and re-create of a topic;
  partitions added to a topic. With ``--security`` (the nodes run with
  ``security.enabled``, the clients as a super user), also a change of the
  security store: a probe principal gets an API key and an ACL to write a
  topic, then loses the ACL or its key, while probes check that every node
  follows within the documented 5 s (``stale_authorization``).

Every operation and its answer is a line of ``DIR/history.jsonl`` (format:
``bench/nemesis_check.py``). At the end the nemesis heals every fault, writes
one acks=all record to every partition (so each leader has replayed what a
dead one acknowledged), stops the nodes with SIGTERM, reads the final tables
directly with delta-rs into the history, and prints the checker's JSON line.
Exit status 0 when every anomaly count is 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _nemesis_cluster import NemesisCluster
from _nemesis_security import SecurityChange
from _nemesis_workload import CHURN, REQUEST_TIMEOUT_S, SESSION_MS, STABLE, History, Workload
from nemesis_check import ANOMALIES, check, load_history, read_final

BARRIER_S = 30.0
"""How long the final write to a partition is tried after every fault was healed."""


class Nemesis:
    """The faults, one at a time, in an order and with durations drawn from ``random.Random(seed)``."""

    FAULTS = (
        "kill_node",
        "pause_node",
        "kill_zookeeper",
        "cut_zookeeper",
        "cluster_down",
        "recreate_topic",
        "add_partitions",
        "change_security",
    )
    SECURE_ONLY = ("change_security",)
    """Faults that need ``--security``."""
    MAX_PARTITIONS = 6
    """Partitions of the stable topic at most: each added one is another partition to commit and check."""

    def __init__(self, cluster: NemesisCluster, workload: Workload, history: History, seed: int) -> None:
        self.cluster, self.workload, self.history = cluster, workload, history
        self.rng = random.Random(seed)
        self.admin = httpx.Client(timeout=30, headers=cluster.headers)
        self.security = SecurityChange(cluster, history, seed) if cluster.security else None

    def run(self, seconds: float, faults: tuple[str, ...] = FAULTS) -> None:
        """Faults from ``faults`` until ``seconds`` have passed, each after a quiet time of 2-5 s."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(self.rng.uniform(2.0, 5.0))  # quiet time: the cluster shows it recovered
            if time.monotonic() >= deadline:
                break
            self.fault(self.rng.choice(faults))

    def fault(self, kind: str) -> None:
        """Do one fault and record it; a fault the cluster does not recover from (a node that cannot start
        again) is recorded as failed, and the run goes on."""
        t0 = self.history.now()
        try:
            what = getattr(self, kind)()
        except Exception as e:  # a process that did not start again (ZooKeeper's own exit included): counted
            self.history.write("fault", "nemesis", None, t0, {"kind": kind}, ok=False, err=f"{type(e).__name__}: {e}")
            return
        if what is not None:
            self.history.write("fault", "nemesis", what.pop("node", None), t0, {"kind": kind, **what}, ok=True)

    def _node(self) -> int:
        return self.rng.choice(sorted(self.cluster.nodes))

    def kill_node(self) -> dict[str, Any]:
        n, hold = self._node(), self.rng.uniform(0.5, 6.0)
        self.cluster.nodes[n].kill()
        time.sleep(hold)
        self.cluster.nodes[n].start()
        return {"node": n, "down_s": round(hold, 2)}

    def pause_node(self) -> dict[str, Any]:
        n, hold = self._node(), self.rng.uniform(1.0, SESSION_MS / 1000 + 4)
        if not self.cluster.nodes[n].alive:
            return {"node": n, "skipped": "not running"}
        self.cluster.nodes[n].pause()
        time.sleep(hold)
        self.cluster.nodes[n].resume()
        return {"node": n, "paused_s": round(hold, 2)}

    def kill_zookeeper(self) -> dict[str, Any]:
        i, hold = self.rng.randrange(len(self.cluster.zk)), self.rng.uniform(1.0, 8.0)
        self.cluster.kill_zookeeper(i)
        time.sleep(hold)
        self.cluster.start_zookeeper(i)
        self.cluster.wait_zookeeper()
        return {"zookeeper": i + 1, "down_s": round(hold, 2)}

    def cut_zookeeper(self) -> dict[str, Any]:
        n, hold = self._node(), self.rng.uniform(1.0, SESSION_MS / 1000 + 5)
        self.cluster.cut(n)
        time.sleep(hold)
        self.cluster.heal(n)
        return {"node": n, "cut_s": round(hold, 2)}

    def cluster_down(self) -> dict[str, Any]:
        hold = self.rng.uniform(0.5, 3.0)
        for node in self.cluster.nodes.values():
            node.kill()
        time.sleep(hold)
        self.cluster.start_nodes()
        return {"down_s": round(hold, 2)}

    def recreate_topic(self) -> None:
        self.delete_topic()
        time.sleep(self.rng.uniform(0.0, 2.0))
        self.create_topic()  # both recorded as operations of their own

    def delete_topic(self) -> None:
        n = self._node()
        url = self.cluster.nodes[n].url
        self.history.call(
            "delete_topic",
            "nemesis",
            n,
            {"topic": CHURN},
            (self.admin, "DELETE", f"{url}/v1/topics/{CHURN}"),
            ok=(200, 204, 404),
        )

    def create_topic(self, partitions: int = 2) -> None:
        """Create the churn topic, trying again (another node) until it exists."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            n = self._node()
            url = self.cluster.nodes[n].url
            line = self.history.call(
                "create_topic",
                "nemesis",
                n,
                {"topic": CHURN, "partitions": partitions},
                (self.admin, "POST", f"{url}/v1/topics"),
                ok=(201,),
                json={"name": CHURN, "partitions": partitions},
            )
            if line["ok"] or line["status"] == 409:
                return
            time.sleep(0.5)
        raise RuntimeError(f"topic {CHURN} could not be created again within 120 s")

    def add_partitions(self) -> None:
        current = self.workload.partitions[STABLE]
        if current >= self.MAX_PARTITIONS:
            return
        n = self._node()
        url = self.cluster.nodes[n].url
        line = self.history.call(
            "add_partitions",
            "nemesis",
            n,
            {"topic": STABLE, "partitions": current + 1},
            (self.admin, "PATCH", f"{url}/v1/topics/{STABLE}"),
            ok=(200,),
            json={"partitions": current + 1},
        )
        if line["ok"]:
            self.workload.partitions[STABLE] = current + 1

    def change_security(self) -> dict[str, Any] | None:
        if self.security is None:
            return None
        return self.security.run(self.rng)

    def heal(self) -> None:
        """Undo whatever is still broken: every proxy healed, every ZooKeeper server and node running."""
        for n, node in self.cluster.nodes.items():
            self.cluster.heal(n)
            node.resume()
        for i, proc in enumerate(self.cluster.zk_procs):
            if proc is None or proc.poll() is not None:
                self.cluster.start_zookeeper(i)
        self.cluster.wait_zookeeper()
        for n, node in self.cluster.nodes.items():
            if not node.alive:
                t0 = self.history.now()
                try:
                    node.start()
                except RuntimeError as e:
                    self.history.write("fault", "nemesis", n, t0, {"kind": "heal"}, ok=False, err=str(e))


def barrier(cluster: NemesisCluster, history: History, partitions: dict[str, int], seed: int) -> None:
    """One acks=all record to every partition, tried until acknowledged (at most ``BARRIER_S``): each leader
    serves, and so has replayed what a dead leader acknowledged with acks=1. A partition that takes none is
    unavailable until the end of the history, which the checker reports."""
    rng = random.Random(f"{seed}-barrier")
    with httpx.Client(timeout=REQUEST_TIMEOUT_S, headers=cluster.headers) as client:
        for topic, count in partitions.items():
            for p in range(count):
                deadline = time.monotonic() + BARRIER_S
                body = {"records": [{"value": f"{seed}:barrier:{topic}:{p}", "partition": p}]}
                while True:
                    n = rng.choice(sorted(cluster.nodes))
                    url = cluster.nodes[n].url
                    req = {"topic": topic, "acks": "all", **body}
                    line = history.call(
                        "produce",
                        "barrier",
                        n,
                        req,
                        (client, "POST", f"{url}/v1/topics/{topic}/records"),
                        ok=(200,),
                        json=body,
                    )
                    if line["ok"]:
                        break
                    if time.monotonic() > deadline or not any(node.alive for node in cluster.nodes.values()):
                        break  # the checker counts it: unavailable until the end
                    time.sleep(0.2)


def run(
    minutes: float,
    seed: int,
    out: Path,
    producers: int = 3,
    members: int = 2,
    faults: tuple[str, ...] = Nemesis.FAULTS,
    spark: bool = False,
    security: bool = False,
) -> dict[str, Any]:
    """Start the cluster, run workload and nemesis for ``minutes``, check; the checker's result."""
    out.mkdir(parents=True, exist_ok=True)
    history = History(out / "history.jsonl")
    config = {
        "zookeeper.session.timeout.ms": SESSION_MS,
        "linger.ms": 2,
        "num.parser.processes": 0,
        "num.io.threads": 2,
        "stats.sample.ms": 60000,
    }
    cluster = NemesisCluster(out, security=security, **config)
    t0 = history.now()
    setup = {"seed": seed, "minutes": minutes, "root": str(cluster.root), "session_timeout_ms": SESSION_MS}
    setup |= {"faults": list(faults), "producers": producers, "members": members, "spark": spark, "security": security}
    try:
        cluster.start()
        history.write("setup", "nemesis", None, t0, setup, ok=True)
        workload = Workload(cluster, history, seed, producers, members)
        nemesis = Nemesis(cluster, workload, history, seed)
        admin = cluster.nodes[1].url
        for topic, n in workload.partitions.items():
            httpx.post(
                f"{admin}/v1/topics", json={"name": topic, "partitions": n}, headers=cluster.headers, timeout=30
            ).raise_for_status()
        workload.start()
        reader = None
        if spark:
            from _nemesis_spark import SparkReader

            reader = SparkReader(history, cluster.root)
            reader.start()
        nemesis.run(minutes * 60, faults)
        nemesis.heal()
        with contextlib.suppress(RuntimeError):  # every try is in the history; the final read says what is left
            nemesis.create_topic()  # exists again if the last delete was not followed by a create
        time.sleep(3)  # the workload runs on a healed cluster for a moment
        idle = history.now()
        workload.join()
        if reader is not None:
            reader.join()
        history.write("idle", "nemesis", None, idle, {"why": "no client writes until the barrier"}, ok=True)
        barrier(cluster, history, workload.partitions, seed)
        cluster.shutdown()
        for topic in workload.partitions:
            t = history.now()
            try:
                rows = read_final(cluster.root, topic)
            except Exception as e:  # a table delta-rs cannot read: the checker counts it
                history.write("final", "checker", None, t, {"topic": topic}, err=f"{type(e).__name__}: {e}")
            else:
                history.write("final", "checker", None, t, {"topic": topic}, ok=True, ans={"records": rows})
    finally:
        cluster.close()
        history.close()
    return check(load_history(history.path))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="how long the faults and the workload run")
    parser.add_argument("--seed", type=int, default=1, help="seeds the fault schedule and the workload's choices")
    parser.add_argument("--out", help="directory for history.jsonl, logs and data (default: a temporary one, removed)")
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--spark", action="store_true", help="also an availableNow Spark reader every 15 s")
    parser.add_argument(
        "--security", action="store_true", help="nodes with security.enabled, and changes of the security store"
    )
    parser.add_argument(
        "--faults",
        default=",".join(Nemesis.FAULTS),
        help=f"the faults to draw from, comma-separated (default: all of {', '.join(Nemesis.FAULTS)})",
    )
    args = parser.parse_args(argv)
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    if not faults or set(faults) - set(Nemesis.FAULTS):
        parser.error(f"--faults: choose among {', '.join(Nemesis.FAULTS)}")
    if not args.security:
        faults = tuple(f for f in faults if f not in Nemesis.SECURE_ONLY)
        if not faults:
            parser.error(f"--faults: {', '.join(Nemesis.SECURE_ONLY)} needs --security")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="nemesis-"))
    try:
        result = run(args.minutes, args.seed, out, args.producers, args.members, faults, args.spark, args.security)
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0 if all(result[k] == 0 for k in ANOMALIES) else 1


if __name__ == "__main__":
    sys.exit(main())
