"""Object-storage benchmark: produce on S3 against the local file system, in the same run.

Prints one JSON document. Each run starts a ``logstore serve`` child process
on each of three roots in turn (a fresh root each time) and measures the same
produce load on it over HTTP (``bench/_http_load.py``, the load generator
shares the machine):

* ``local``: a directory under the temporary directory (the default root);
* ``s3``: ``s3://<new bucket>/data`` on moto's S3 server (``moto_server``, a
  child process on 127.0.0.1 for the whole run) — what the object-store code
  path costs when the store answers at once;
* ``s3_delayed``: the same on a new bucket, with the node reaching moto through
  a proxy (``bench/_proxy.py``) that holds every answer ``--delay-ms`` (20 ms
  by default, about what S3 Standard takes to answer a small request), so each
  S3 request of the node takes that much longer — what a node on real S3
  should see.

For each root, the topics (``--topics`` of ``--partitions`` each) are created and
opened, then two closed loops run for ``--seconds`` each, ``--concurrency``
requests in flight, every request 1,000 records of ``harness.VALUE_BYTES``-byte
values to a topic drawn at random:

* ``acks_all``: each request answered once its records are committed to the
  topic's Delta table; ``acks_1``: answered once its records are in the
  write-ahead log (on an object-store root, a WAL object in the same bucket);
* per loop: ``records_per_s``; ``p50_ms`` / ``p99_ms`` / ``max_ms`` /
  ``mean_ms``, each acknowledged request's latency, send to answer;
  ``failed``, requests not answered 200/202; ``commits_per_s_per_topic``, the
  node's Delta commits to the loop's topics a second, divided by the topics
  (``logstore_commit_latency_seconds_count`` on ``/metrics``, read before and
  after the loop: group commit takes many requests into one commit, so this is
  how often a topic's table gets a new version); ``records_per_commit``;
  ``store_cpu_cores``, the CPU moto used during the loop over its seconds (0
  on the local root): moto runs on the same cores as the node, so an
  object-store root's figures are also bounded by it; ``s3_requests_per_commit``
  (``s3_delayed`` only, counted by the proxy; ``null`` elsewhere), the node's
  S3 requests during the loop over its Delta commits (with acks=1 the
  write-ahead log's requests too): the requests a commit waits for, at
  ``--delay-ms`` each when they run one after another.

``ratios``: each S3 root's median ``records_per_s``, ``p50_ms``, ``p99_ms`` and
``commits_per_s_per_topic`` over the local root's (``s3_over_local``, ``s3_delayed_over_local``). Every figure is
the median of ``--runs`` runs; ``per_run`` keeps each run's figures. The S3
legs reach the store over loopback: moto's own time per request is in the raw
``s3`` figures, the injected latency is the only network.

Run: ``.venv/bin/python bench/object_store.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import httpx
from _http_load import LOAD_GENERATOR, RECORDS, closed_loop, touch
from _proxy import CuttableProxy
from harness import (
    TICKS_PER_S,
    VALUE_BYTES,
    LogstoreServer,
    cpu_ticks,
    emit,
    free_port,
    load_average,
    machine,
    median_of,
    stop_child,
    storage,
)
from prometheus_client.parser import text_string_to_metric_families

ROOTS = ("local", "s3", "s3_delayed")
ACKS = {"acks_all": "all", "acks_1": "1"}
"""The loops of each root: figure name → the request's ``acks``."""
S3_ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}
"""Credentials and region for moto (it accepts any unless told to check them)."""
COMMITS = "logstore_commit_latency_seconds"
"""The node's per-topic commit histogram: its ``_count`` is the topic's Delta commits so far."""


class Moto:
    """``moto_server`` on a free loopback port in a child process; ``url`` is its endpoint."""

    def __init__(self, log: Path) -> None:
        exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or "moto_server"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with log.open("ab") as out:
            self.proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(self.port)], stdout=out, stderr=out)
        deadline = time.monotonic() + 60
        while self.proc.poll() is None and time.monotonic() < deadline:  # the socket, not a fixed time
            try:
                httpx.get(self.url + "/moto-api/", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto_server did not start: {log.read_text()[-2000:]}")

    def bucket(self) -> str:
        """A new, empty bucket's name."""
        name = f"bench-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=self.url, region_name=S3_ENV["AWS_REGION"], **_keys()).create_bucket(
            Bucket=name
        )
        return name

    def cpu_s(self) -> float:
        """CPU seconds (user + system) moto has used so far."""
        return sum(cpu_ticks(f"/proc/{self.proc.pid}/stat")[:2]) / TICKS_PER_S

    def stop(self) -> None:
        stop_child(self.proc, timeout_s=30)


def _keys() -> dict[str, str]:
    return {"aws_access_key_id": S3_ENV["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": S3_ENV["AWS_SECRET_ACCESS_KEY"]}


def commits(url: str, topics: list[str]) -> int:
    """Delta commits the node at ``url`` has made to ``topics`` so far."""
    total = 0.0
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=30).text):
        if family.name == COMMITS:
            total += sum(
                s.value for s in family.samples if s.name == COMMITS + "_count" and s.labels.get("topic") in topics
            )
    return int(total)


def leg(
    node: LogstoreServer,
    moto: Moto | None,
    proxy: CuttableProxy | None,
    topics: list[str],
    acks: str,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One closed loop of ``acks`` on ``topics``: the load generator's figures, commits/s per topic, moto's CPU."""
    before, cpu = commits(node.url, topics), moto.cpu_s() if moto else 0.0
    answers = proxy.answers if proxy else 0
    r = closed_loop(node.url, topics, acks, args.concurrency, seconds=args.seconds)
    made = commits(node.url, topics) - before
    requests = proxy.answers - answers if proxy else None
    return {
        "records_per_s": round(r["records_per_s"]),
        **{k: r[k] for k in ("p50_ms", "p99_ms", "max_ms", "mean_ms")},
        "requests": r["requests"],
        "failed": r["failed"],
        "commits_per_s_per_topic": round(made / r["seconds"] / len(topics), 2),
        "records_per_commit": round(r["records"] / made, 1) if made else None,
        "store_cpu_cores": round((moto.cpu_s() - cpu) / r["seconds"], 2) if moto else 0.0,
        "s3_requests_per_commit": round(requests / made, 1) if requests is not None and made else None,
    }


def one_root(name: str, moto: Moto, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh node on root ``name`` (see the module docstring); its acks=all and acks=1 legs."""
    proxy = None
    if name == "s3_delayed":
        proxy = CuttableProxy(("127.0.0.1", moto.port), name="s3-delay", delay_s=args.delay_ms / 1e3)
    endpoint = f"http://{proxy.address}" if proxy else moto.url
    with tempfile.TemporaryDirectory(prefix="bench-objstore-") as d:
        root = Path(d) if name == "local" else f"s3://{moto.bucket()}/data"
        node = LogstoreServer(root, env=S3_ENV | {"AWS_ENDPOINT_URL": endpoint}).start()
        try:
            topics = [f"t{i}" for i in range(args.topics)]
            for t in topics:
                node.create_topic(t, args.partitions)
            touch(node.url, topics, args.concurrency)
            closed_loop(node.url, topics, "all", args.concurrency, requests=2 * args.concurrency)  # warm-up
            on = None if name == "local" else moto
            return {acks_key: leg(node, on, proxy, topics, acks, args) for acks_key, acks in ACKS.items()}
        finally:
            node.stop()
            if proxy:
                proxy.close()


def ratios(m: dict[str, Any]) -> dict[str, Any]:
    """Each S3 root's records/s, p50, p99 and commits/s per topic over the local root's, for both acks."""
    out: dict[str, Any] = {}
    for name in ROOTS[1:]:
        out[f"{name}_over_local"] = {
            acks: {
                k: round(m[name][acks][k] / m["local"][acks][k], 3) if m["local"][acks][k] else None
                for k in ("records_per_s", "p50_ms", "p99_ms", "commits_per_s_per_topic")
            }
            for acks in ACKS
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=15, help="seconds of each closed loop")
    ap.add_argument("--topics", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    ap.add_argument("--delay-ms", type=float, default=20, help="added to each S3 request on the s3_delayed root")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 1 run, 3 s loops")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.seconds = 1, 3
    tmp = tempfile.gettempdir()
    out: dict[str, Any] = {"machine": machine() | {"storage": storage(tmp)}}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-moto-") as logs:
        moto = Moto(Path(logs) / "moto.log")
        try:
            results = [{name: one_root(name, moto, args) for name in ROOTS} for _ in range(args.runs)]
        finally:
            moto.stop()
    medians = median_of(results)
    out |= {
        "load_generator": LOAD_GENERATOR,
        "store": "moto_server (S3) on 127.0.0.1",
        "delay_ms": args.delay_ms,
        "runs": args.runs,
        "seconds": args.seconds,
        "topics": args.topics,
        "partitions": args.partitions,
        "concurrency": args.concurrency,
        "request_records": RECORDS,
        "value_bytes": VALUE_BYTES,
        **medians,
        "ratios": ratios(medians),
        "per_run": results,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    out["machine"] |= {"storage_end": storage(tmp), "load_average_end": load_average()}
    emit(out)


if __name__ == "__main__":
    main()
