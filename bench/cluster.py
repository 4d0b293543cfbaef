"""Cluster benchmark: acks=all produce throughput of 1, 2 and 3 nodes, a forwarding node, failover after kill -9.

Prints one JSON document. Starts a real ZooKeeper (``logstore.cluster.zookeeper_server``)
and ``logstore serve`` nodes on loopback over one fresh root, with one
8-partition topic, and drives them with the shared load generator
(``bench/_http_load.py``: the records of ``bench/ingest.py``, 1,000-record JSON
batches of 100-byte values, null keys), one generator process per node, all at
once:

* ``throughput``: for each node count in ``--nodes``, acks=all records/s summed
  over the nodes (each node gets ``--concurrency`` / nodes requests in flight);
  ``scaling_2_over_1`` is the ratio of 2 nodes to 1 (the goal is >= 1.6).
* ``forwarding``: two nodes with ``leader.placement=topic`` (one node leads
  the whole topic): records/s sent to the node that leads nothing, which only
  forwards, next to records/s sent to the leader itself.
* ``failover``: ``--kills`` times, kill -9 the leader of partition 0 and time
  until every partition it led takes an acks=all produce again on its new
  leader (asked with ``?forward=false``); p50 and max in ms, against
  ``zookeeper.session.timeout.ms`` (``--session-timeout-ms``). The killed
  node is restarted (same node id) before the next kill.
* ``placement``: three nodes, ``--placement-topics`` topics at once, with
  ``leader.placement`` = ``partition`` and = ``topic``: records/s of each
  (one Delta log per topic is a single serialization point; see docs/benchmarks.md).

With ``--node-cpus C`` each node — with the parser processes it starts — runs
in a cgroup of its own capped at ``C`` CPU cores (``bench/_cgroups.py``; the
load generators stay outside), so that more nodes bring more CPU, as separate
machines would; ``capped`` shows each cgroup's cap and how often it throttled.
Where cgroups cannot be made it runs uncapped and says why under ``capped``.
Every throughput run sends each node only the partitions it leads (each
request's records to one of them, with ``?forward=false``), so no request is
forwarded; ``scaling_to_1`` divides each node count's records/s by one node's.

Without cluster mode in this build (no ``node.id`` config key) it measures the
embedded one-node case only and says so. Run: ``.venv/bin/python bench/cluster.py``
(defaults take about a minute; ``--seconds 10 --kills 10`` for the issue's figures;
``--node-cpus 1 --kills 0 --placement-topics ''`` for scaling alone).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from _cgroups import CpuCaps, in_cgroup, unavailable
from _http_load import RECORDS, closed_loop
from harness import VALUE_BYTES, LogstoreServer, children, emit, free_port, summary_ms

from logstore.cluster.zookeeper_server import ZooKeeperServer
from logstore.config import LogstoreConfig

PARTITIONS = 8
TOPIC = "bench"


def cluster_mode_available() -> bool:
    """Whether this build's nodes take ``node.id`` (the node side of cluster mode)."""
    return "node.id" in LogstoreConfig.known_keys()


class Cluster:
    """ZooKeeper (None when embedded) and ``logstore serve`` nodes over one root."""

    def __init__(self, root: Path, zookeeper: str | None, caps: CpuCaps | None = None, **config: object) -> None:
        self.root, self.zookeeper, self.caps, self.config = root, zookeeper, caps, config
        self.nodes: dict[int, LogstoreServer] = {}

    def start_node(self, node_id: int) -> LogstoreServer:
        """Start node ``node_id`` (again, after a kill: the same id and cgroup), in cgroup ``node-<id>`` if capped."""
        config = dict(self.config)
        if self.zookeeper is not None:
            config |= {"zookeeper.connect": self.zookeeper, "node.id": node_id}
        prefix = self.caps.prefix(f"node-{node_id}") if self.caps is not None else []
        node = LogstoreServer(self.root, prefix=prefix, **config).start()
        self.nodes[node_id] = node
        return node

    def metadata(self) -> dict[str, Any]:
        """``GET /v1/metadata`` from the first live node that answers."""
        for node in self.nodes.values():
            if node.proc is not None and node.proc.poll() is None:
                try:
                    r = httpx.get(node.url + "/v1/metadata", timeout=2)
                    if r.status_code == 200:
                        return dict(r.json())
                except httpx.TransportError:
                    continue
        raise RuntimeError("no node answers /v1/metadata")

    def leaders(self, topic: str = TOPIC) -> dict[int, int]:
        """Partition → leader's node id of ``topic``."""
        for t in self.metadata()["topics"]:
            if t["name"] == topic:
                return {p["partition"]: p["leader"] for p in t["partitions"]}
        return {}

    def wait_led(self, timeout_s: float = 60, topic: str = TOPIC) -> dict[int, int]:
        """Wait until every partition of ``topic`` has a live leader; returns the leaders."""
        deadline = time.monotonic() + timeout_s
        while True:
            md = self.metadata()
            live = {n["node_id"] for n in md["nodes"]}
            leaders = self.leaders(topic)
            if len(leaders) == PARTITIONS and all(v in live for v in leaders.values()):
                return leaders
            if time.monotonic() > deadline:
                raise RuntimeError(f"partitions without a live leader after {timeout_s} s: {leaders}")
            time.sleep(0.05)

    def url_of(self, node_id: int) -> str:
        return self.nodes[node_id].url

    def led(self, topics: tuple[str, ...]) -> dict[str, dict[str, list[int]]]:
        """Per node URL, per topic: the partitions that node leads (a node leading none of a topic's is left out)."""
        out: dict[str, dict[str, list[int]]] = {node.url: {} for node in self.nodes.values()}
        for topic in topics:
            for partition, leader in sorted(self.leaders(topic).items()):
                if leader in self.nodes:
                    out[self.nodes[leader].url].setdefault(topic, []).append(partition)
        return out

    def processes_capped(self) -> dict[str, dict[str, Any]]:
        """Per capped node: its processes (itself and those it started: its parsers), and whether all are inside."""
        if self.caps is None:
            return {}
        out = {}
        for node_id, node in self.nodes.items():
            if node.proc is not None and node.proc.poll() is None:
                pids = [node.proc.pid, *children(node.proc.pid)]
                out[f"node-{node_id}"] = {
                    "processes": len(pids),
                    "all_in_its_cgroup": in_cgroup(self.caps, f"node-{node_id}", pids),
                }
        return out

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()


def throughput(
    cluster: Cluster,
    urls: list[str],
    concurrency: int,
    seconds: float,
    topics: tuple[str, ...] = (TOPIC,),
    *,
    led_only: bool = True,
) -> float:
    """acks=all records/s summed over one generator per URL and topic, all running at once.

    With ``led_only`` (and cluster mode) each node is sent only the partitions
    it leads, with ``?forward=false``: a pair of node and topic whose
    partitions it leads none of gets no generator. Without, the node's
    partitioner chooses (and forwards what it does not lead).
    """
    led = cluster.led(topics) if led_only and cluster.zookeeper is not None else {}
    pairs = [(u, t) for u in urls for t in topics if not led or t in led.get(u, {})]
    per = max(1, concurrency // len(pairs))

    def one(ut: tuple[str, str]) -> dict[str, Any]:
        url, topic = ut
        parts = {topic: led[url][topic]} if led else None
        return closed_loop(url, topic, "all", per, seconds=seconds, partitions=parts)

    with ThreadPoolExecutor(len(pairs)) as pool:
        results = list(pool.map(one, pairs))
    failed = sum(r["failed"] for r in results)
    if failed:
        raise RuntimeError(f"{failed} produce requests failed (a leader moved during the run?): {results}")
    return sum(r["records_per_s"] for r in results)


def placement(
    zk_connect: str,
    node_config: dict[str, object],
    nodes: int,
    topics: int,
    concurrency: int,
    seconds: float,
    caps: CpuCaps | None = None,
) -> dict[str, int]:
    """acks=all records/s of ``nodes`` nodes over ``topics`` topics, per ``leader.placement``.

    ``partition`` spreads every topic's partition leaders over the nodes, so
    the nodes race for each topic's one Delta log; ``topic`` gives each topic
    one leader, which commits alone but is the topic's only writer.
    """
    out = {}
    names = tuple(TOPIC if i == 0 else f"{TOPIC}{i}" for i in range(topics))
    for how in ("partition", "topic"):
        with tempfile.TemporaryDirectory() as d:
            config = node_config | {"leader.placement": how}
            cluster = Cluster(Path(d), f"{zk_connect}/bench-placement-{how}-{time.monotonic_ns()}", caps, **config)
            try:
                for node_id in range(1, nodes + 1):
                    cluster.start_node(node_id)
                for name in names:
                    cluster.nodes[1].create_topic(name, PARTITIONS)
                    cluster.wait_led(topic=name)
                urls = [node.url for node in cluster.nodes.values()]
                out[how] = round(throughput(cluster, urls, concurrency, seconds, names))
            finally:
                cluster.stop()
    return out


def produce_once(url: str, partition: int) -> bool:
    """One acks=all record to ``partition``, asked of ``url`` as its leader (no forwarding)."""
    try:
        r = httpx.post(
            f"{url}/v1/topics/{TOPIC}/records",
            params={"acks": "all", "forward": "false"},
            json={"records": [{"value": "probe", "partition": partition}]},
            timeout=5,
        )
    except httpx.TransportError:
        return False
    return r.status_code == 200


def failover(cluster: Cluster, timeout_s: float) -> float:
    """kill -9 the leader of partition 0; seconds until each partition it led takes a produce on its new leader."""
    leaders = cluster.wait_led()
    victim = leaders[0]
    moved = {p for p, n in leaders.items() if n == victim}
    proc = cluster.nodes[victim].proc
    assert proc is not None
    start = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    pending = set(moved)
    while pending:
        if time.monotonic() - start > timeout_s:
            raise RuntimeError(f"partitions {sorted(pending)} not available {timeout_s} s after the kill")
        md = cluster.metadata()
        live = {n["node_id"]: n["url"] for n in md["nodes"]}
        now = cluster.leaders()
        for p in list(pending):
            leader = now.get(p, -1)
            if leader != victim and leader in live and produce_once(live[leader], p):
                pending.discard(p)
        time.sleep(0.02)
    elapsed = time.monotonic() - start
    cluster.start_node(victim)  # back, same node id, before the next kill
    cluster.wait_led()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1,2,3", help="node counts to measure, comma-separated")
    ap.add_argument("--seconds", type=float, default=3, help="length of each throughput run")
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight, over all nodes")
    ap.add_argument("--kills", type=int, default=2, help="kill -9s for the failover distribution")
    ap.add_argument("--placement-topics", default="1,3", help="topic counts for the placement comparison (3 nodes)")
    ap.add_argument("--session-timeout-ms", type=int, default=3000, help="zookeeper.session.timeout.ms of the nodes")
    ap.add_argument(
        "--node-cpus",
        type=float,
        default=0,
        help="cap each node (with its parser processes) at this many CPU cores in a cgroup of its own (0: uncapped)",
    )
    args = ap.parse_args()
    counts = [int(n) for n in args.nodes.split(",") if n.strip()]
    clustered = cluster_mode_available()
    out: dict[str, Any] = {
        "cluster_mode": clustered,
        "batch_records": RECORDS,
        "value_bytes": VALUE_BYTES,
        "partitions": PARTITIONS,
        "seconds": args.seconds,
        "concurrency": args.concurrency,
        "session_timeout_ms": args.session_timeout_ms if clustered else None,
    }
    if not clustered:
        counts = [1]
        out["skipped"] = "this build has no cluster mode (no node.id config key): embedded one-node case only"
    rates: dict[str, float] = {}
    with ExitStack() as stack:
        caps = None
        if args.node_cpus > 0:
            why = unavailable()
            if why is None:
                caps = stack.enter_context(CpuCaps(args.node_cpus))
                out["capped"] = {"node_cpus": args.node_cpus, "throttled_by_node_count": {}, "processes_inside": {}}
            else:
                print(f"cluster.py: cannot cap the nodes' CPU ({why}); running uncapped", file=sys.stderr)
                out["capped"] = {"node_cpus": None, "uncapped_because": why}
        zk_connect = None
        if clustered:
            zk_dir = stack.enter_context(tempfile.TemporaryDirectory())
            zk = ZooKeeperServer(zk_dir, port=free_port())
            zk_proc = zk.spawn()
            stack.callback(zk_proc.wait)
            stack.callback(zk_proc.kill)
            zk.wait_serving(zk_proc)
            zk_connect = zk.connect
        node_config: dict[str, object] = {"zookeeper.session.timeout.ms": args.session_timeout_ms} if clustered else {}
        for n in counts:
            with tempfile.TemporaryDirectory() as d:
                chroot = f"/bench-{n}-{time.monotonic_ns()}"
                cluster = Cluster(Path(d), zk_connect + chroot if zk_connect else None, caps, **node_config)
                try:
                    for node_id in range(1, n + 1):
                        cluster.start_node(node_id)
                    first = next(iter(cluster.nodes.values()))
                    first.create_topic(TOPIC, PARTITIONS)
                    if clustered:
                        cluster.wait_led()
                    urls = [node.url for node in cluster.nodes.values()]
                    before = caps.stats() if caps is not None else {}
                    rates[str(n)] = throughput(cluster, urls, args.concurrency, args.seconds)
                    if caps is not None:
                        nodes = [f"node-{i}" for i in range(1, n + 1)]
                        out["capped"]["throttled_by_node_count"][str(n)] = caps.throttled_since(before, nodes)
                        out["capped"]["processes_inside"][str(n)] = cluster.processes_capped()
                    if clustered and n == max(counts) and args.kills > 0:
                        limit_s = args.session_timeout_ms / 1000 + 60
                        times = [failover(cluster, timeout_s=limit_s) for _ in range(args.kills)]
                        out["failover"] = {
                            "nodes": n,
                            "kills": len(times),
                            **summary_ms([t * 1000 for t in times], percentiles=(50,), digits=0),
                            "samples_ms": [round(t * 1000) for t in times],
                        }
                finally:
                    cluster.stop()
        if clustered and zk_connect is not None:
            with tempfile.TemporaryDirectory() as d:
                config = node_config | {"leader.placement": "topic"}
                cluster = Cluster(Path(d), f"{zk_connect}/bench-forward-{time.monotonic_ns()}", caps, **config)
                try:
                    cluster.start_node(1)
                    cluster.start_node(2)
                    cluster.nodes[1].create_topic(TOPIC, PARTITIONS)
                    leader = cluster.wait_led()[0]
                    forwarder = 2 if leader == 1 else 1
                    out["forwarding"] = {
                        "forward_only_node_records_per_s": round(
                            throughput(
                                cluster, [cluster.url_of(forwarder)], args.concurrency, args.seconds, led_only=False
                            )
                        ),
                        "leader_node_records_per_s": round(
                            throughput(cluster, [cluster.url_of(leader)], args.concurrency, args.seconds)
                        ),
                    }
                finally:
                    cluster.stop()
            out["placement_records_per_s"] = {
                f"{t}_topics": placement(zk_connect, node_config, 3, t, args.concurrency, args.seconds, caps)
                for t in (int(x) for x in args.placement_topics.split(",") if x.strip())
            }
    out["throughput_records_per_s"] = {k: round(v) for k, v in rates.items()}
    if "1" in rates:
        out["scaling_to_1"] = {k: round(v / rates["1"], 2) for k, v in rates.items()}
    if "1" in rates and "2" in rates:
        out["scaling_2_over_1"] = round(rates["2"] / rates["1"], 2)
    emit(out)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
