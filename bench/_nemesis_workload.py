"""The nemesis's clients and its history: producers, group members and an observer, each a thread.

:class:`History` writes one JSON line per operation (the format of
``bench/nemesis_check.py``), from many threads, on one monotonic clock.
:class:`Workload` is what ``bench/nemesis.py`` runs while it breaks the
cluster (its module docstring says what each client does); every request goes
to a random node and is recorded with its answer or error.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from _nemesis_cluster import NemesisCluster

__all__ = ["CHURN", "GROUP", "REQUEST_TIMEOUT_S", "SESSION_MS", "STABLE", "History", "Workload"]

SESSION_MS = 4000
"""``zookeeper.session.timeout.ms`` of the nodes: a dead node's partitions move after this."""
GROUP = "nemesis"
STABLE, CHURN = "stable", "churn"
"""The topic the group reads and partitions are added to; the topic deleted and created again."""
REQUEST_TIMEOUT_S = 8.0
RETRIABLE = {None, 421, 429, 500, 503, 504}
"""Outcomes after which an idempotent producer sends the same request (same sequence) again."""
DELIVERY_TIMEOUT_S = 30.0
"""How long an idempotent producer keeps sending a request that failed in a retriable way, like Kafka's
``delivery.timeout.ms``: a partition's window of unavailability then ends at the first attempt the cluster
acknowledges, not whenever the workload happens to write that partition again."""
RETRY_BACKOFF_S = 0.1
"""The pause between two attempts of one request (Kafka's ``retry.backoff.ms``)."""
ATTEMPT_TIMEOUT_S = SESSION_MS / 1000
"""How long one produce attempt may take: by then a paused or cut leader has lost its partitions, so the next
attempt, to another random node (never the one that did not answer), can succeed (an attempt to a paused node
would otherwise hold the thread for the whole pause, and a second one to it would add another timeout)."""


class History:
    """The history file: one JSON line per operation, written by many threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f = path.open("w")
        self._lock = threading.Lock()
        self.t_zero = time.monotonic()

    def now(self) -> float:
        return round(time.monotonic() - self.t_zero, 4)

    def write(self, op: str, proc: str, node: int | None, t0: float, req: Any, **outcome: Any) -> dict[str, Any]:
        line = {"op": op, "proc": proc, "node": node, "t0": t0, "t1": self.now(), "req": req}
        line |= {"ok": False, "status": None, "ans": None, "err": None} | outcome
        with self._lock:
            self._f.write(json.dumps(line) + "\n")
            self._f.flush()
        return line

    def call(
        self,
        op: str,
        proc: str,
        node: int | None,
        req: Any,
        send: tuple[httpx.Client, str, str],
        ok: tuple[int, ...],
        shape: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Send one HTTP request, ``send = (client, method, url)`` with ``kwargs``, and record it; ``ok``: the
        statuses that mean success; ``shape``: what of a successful answer the history keeps (the checker's
        shapes, not the wire's)."""
        t0 = self.now()
        client, method, url = send
        try:
            r = client.request(method, url, **kwargs)
        except httpx.HTTPError as e:
            return self.write(op, proc, node, t0, req, err=f"{type(e).__name__}: {e}")
        ans = r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else None
        err = None if r.status_code in ok else (r.text[:300] or str(r.status_code))
        if shape is not None and ans is not None and err is None:
            ans = shape(ans)
        return self.write(op, proc, node, t0, req, ok=r.status_code in ok, status=r.status_code, ans=ans, err=err)

    def close(self) -> None:
        self._f.close()


class Workload:
    """The clients: producers, group members and an offsets observer, each a thread (see the module docstring)."""

    def __init__(self, cluster: NemesisCluster, history: History, seed: int, producers: int, members: int) -> None:
        self.cluster, self.history, self.seed = cluster, history, seed
        self.partitions = {STABLE: 3, CHURN: 2}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._producer, args=(i,), daemon=True) for i in range(producers)]
        self.threads += [threading.Thread(target=self._member, args=(i,), daemon=True) for i in range(members)]
        self.threads.append(threading.Thread(target=self._observer, daemon=True))
        self.failures: list[BaseException] = []

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        if self.failures:
            raise RuntimeError(f"a workload thread failed: {self.failures[0]!r}") from self.failures[0]

    def _guard(self, body: Callable[[], None]) -> None:
        try:
            body()
        except BaseException as e:  # no thread dies silently: join() raises it
            self.failures.append(e)
            raise

    def _node(self, rng: random.Random, avoid: int | None = None, named: int | None = None) -> tuple[int, str]:
        """``named`` (the leader the last attempt's 421 named) when it is a node, as a Kafka client goes to the
        leader its metadata refresh names; else a random node, not ``avoid`` (the node the last attempt got no
        answer from) when there is another, as a Kafka client marks a broker down after a request timeout."""
        if named in self.cluster.nodes:
            return named, self.cluster.nodes[named].url
        n = rng.choice([n for n in sorted(self.cluster.nodes) if n != avoid] or sorted(self.cluster.nodes))
        return n, self.cluster.nodes[n].url

    # -- producers -----------------------------------------------------------------

    def _producer(self, i: int) -> None:
        self._guard(lambda: self._produce_loop(i))

    def _produce_loop(self, i: int) -> None:
        rng = random.Random(f"{self.seed}-producer-{i}")
        proc, producer_id = f"producer-{i}", f"nemesis-{self.seed}-{i}"
        sequences: dict[str, int] = {}
        count = 0
        follow: tuple[str, list[int]] | None = None
        """Partitions a plain request failed on: the next request writes them again, idempotent, until answered."""
        with httpx.Client(timeout=REQUEST_TIMEOUT_S, headers=self.cluster.headers) as client:
            while not self.stop.is_set():
                if follow is not None:
                    (topic, chosen), follow = follow, None
                    acks, idempotent = "all", True
                else:
                    topic = rng.choice((STABLE, STABLE, CHURN))
                    acks = rng.choice(("0", "1", "all", "all"))
                    idempotent = acks != "0" and rng.random() < 0.5
                    mode, n = rng.choice(("keyed", "keyless", "explicit")), rng.choice((1, 1, 2, 4))
                    chosen = [rng.randrange(self.partitions[topic]) if mode == "explicit" else -1 for _ in range(n)]
                records = []
                for p in chosen:
                    count += 1
                    record: dict[str, Any] = {"value": f"{self.seed}:{i}:{count}"}
                    if p >= 0:
                        record["partition"] = p
                    elif mode == "keyed":
                        record["key"] = f"k{rng.randrange(40)}"
                    records.append(record)
                body: dict[str, Any] = {"records": records}
                if idempotent:
                    sequences[topic] = sequences.get(topic, -1) + 1
                    body |= {"producer_id": producer_id, "sequence": sequences[topic]}
                req = {"topic": topic, "acks": acks, **{k: v for k, v in body.items()}}
                give_up = time.monotonic() + (DELIVERY_TIMEOUT_S if idempotent else 0.0)
                silent: int | None = None  # the node the last attempt got no answer from
                named: int | None = None  # the leader the last attempt's 421 named
                while True:
                    node, url = self._node(rng, avoid=silent, named=named)
                    line = self.history.call(
                        "produce",
                        proc,
                        node,
                        req,
                        (client, "POST", f"{url}/v1/topics/{topic}/records"),
                        ok=(202,) if acks == "0" else (200,),
                        params={"acks": acks},
                        json=body,
                        timeout=ATTEMPT_TIMEOUT_S,
                    )
                    done = line["ok"] or line["status"] not in RETRIABLE or time.monotonic() >= give_up
                    if done or self.stop.is_set():
                        break
                    silent = node if line["status"] is None else None
                    named = _leader_named(line)
                    time.sleep(RETRY_BACKOFF_S)
                explicit = sorted({r["partition"] for r in records if "partition" in r})
                if not idempotent and acks != "0" and explicit and not line["ok"] and line["status"] in RETRIABLE:
                    follow = (topic, explicit)  # as a producer with more records for them would: sampled until up
                time.sleep(rng.uniform(0.01, 0.05))

    # -- group members -----------------------------------------------------------------

    def _member(self, i: int) -> None:
        self._guard(lambda: self._member_loop(i))

    def _member_loop(self, i: int) -> None:
        rng = random.Random(f"{self.seed}-member-{i}")
        proc, base = f"member-{i}", f"/v1/groups/{GROUP}/members"
        member: str | None = None
        generation = 0
        h = self.history
        with httpx.Client(timeout=REQUEST_TIMEOUT_S, headers=self.cluster.headers) as client:
            while not self.stop.is_set():
                node, url = self._node(rng)
                if member is None:
                    join = {"topics": [STABLE], "assignor": "cooperative-sticky", "session_timeout_ms": 6000}
                    join |= {"auto.offset.reset": "earliest", "max.poll.interval.ms": 30000}
                    line = h.call(
                        "join",
                        proc,
                        node,
                        {"group": GROUP},
                        (client, "POST", url + base),
                        ok=(200,),
                        json=join,
                        shape=_assignment,
                    )
                    if line["ok"]:
                        member, generation = line["ans"]["member_id"], line["ans"]["generation"]
                    else:
                        time.sleep(0.5)
                    continue
                req = {"group": GROUP, "member_id": member, "generation": generation}
                line = h.call(
                    "heartbeat",
                    proc,
                    node,
                    req,
                    (client, "POST", f"{url}{base}/{member}/heartbeat"),
                    ok=(200,),
                    json={"generation": generation},
                    shape=_assignment,
                )
                if line["status"] == 404:
                    member = None  # expired: join again
                    continue
                if line["ok"]:
                    generation = line["ans"]["generation"]
                self._fetch_and_commit(client, rng, proc, member, generation)
                if rng.random() < 0.02:
                    node, url = self._node(rng)
                    h.call(
                        "leave",
                        proc,
                        node,
                        {"group": GROUP, "member_id": member},
                        (client, "DELETE", f"{url}{base}/{member}"),
                        ok=(204,),
                    )
                    member = None

    def _fetch_and_commit(
        self, client: httpx.Client, rng: random.Random, proc: str, member: str, generation: int
    ) -> None:
        node, url = self._node(rng)
        path = f"{url}/v1/groups/{GROUP}/members/{member}"
        line = self.history.call(
            "fetch",
            proc,
            node,
            {"group": GROUP, "member_id": member},
            (client, "GET", path + "/records"),
            ok=(200,),
            params={"max_records": 200, "wait_ms": 300},
            shape=lambda a: {"records": [[r["topic"], r["partition"], r["offset"], r["value"]] for r in a["records"]]},
        )
        if not line["ok"]:
            time.sleep(0.2)
            return
        records = line["ans"]["records"]
        if not records:
            return
        nxt: dict[tuple[str, int], int] = {}
        for t, p, o, _v in records:
            nxt[(t, p)] = max(nxt.get((t, p), 0), o + 1)
        offsets = [[t, p, o] for (t, p), o in sorted(nxt.items())]
        body = {"generation": generation, "offsets": [{"topic": t, "partition": p, "offset": o} for t, p, o in offsets]}
        node, url = self._node(rng)
        self.history.call(
            "commit",
            proc,
            node,
            {"group": GROUP, "member_id": member, "generation": generation, "offsets": offsets},
            (client, "POST", f"{url}/v1/groups/{GROUP}/members/{member}/offsets"),
            ok=(204,),
            json=body,
        )

    def _observer(self) -> None:
        self._guard(self._observe_loop)

    def _observe_loop(self) -> None:
        rng = random.Random(f"{self.seed}-observer")
        with httpx.Client(timeout=REQUEST_TIMEOUT_S, headers=self.cluster.headers) as client:
            while not self.stop.wait(2.0):
                node, url = self._node(rng)
                self.history.call(
                    "group_offsets",
                    "observer",
                    node,
                    {"group": GROUP},
                    (client, "GET", f"{url}/v1/groups/{GROUP}"),
                    ok=(200,),
                    shape=lambda doc: {"offsets": _committed(doc)},
                )


def _assignment(ans: dict[str, Any]) -> dict[str, Any]:
    """A join/heartbeat answer with its assignment as [[topic, partition], …] (the history's shape)."""
    return ans | {"assignment": [[a["topic"], a["partition"]] for a in ans["assignment"]]}


def _committed(doc: dict[str, Any]) -> list[list[Any]]:
    return [
        [t["topic"], p["partition"], p["committed_offset"]]
        for t in doc.get("topics", [])
        for p in t["partitions"]
        if p.get("committed_offset") is not None
    ]


def _leader_named(line: dict[str, Any]) -> int | None:
    """The node id a 421 ``NOT_LEADER_OR_FOLLOWER`` answer names as the partition's leader, if any."""
    ans = line["ans"]
    leader = ans.get("leader") if line["status"] == 421 and isinstance(ans, dict) else None
    return leader.get("node_id") if isinstance(leader, dict) else None
