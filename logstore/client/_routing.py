"""Routing by cluster metadata, shared by the clients: bootstrap lists, the metadata view, per-node batches.

A client starts from ``bootstrap`` — one URL or several separated by commas,
like Kafka's ``bootstrap.servers`` — asks any of them for ``GET /v1/metadata``
(docs/design.md §8) and from then on knows every live node and each partition's
leader. :func:`plan_routes` is the routing decision, a pure function of that
view and a batch's keys and partitions; :class:`Nodes` holds one HTTP client
per node and refreshes the view from whichever node answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from logstore.client._http import http_client, raise_for
from logstore.errors import ClusterAuthorizationFailedError, LogstoreError, NetworkExceptionError
from logstore.log.partitioner import murmur2, to_positive

__all__ = ["ClusterView", "Nodes", "Route", "bootstrap_urls", "plan_routes"]


def bootstrap_urls(bootstrap: str) -> tuple[str, ...]:
    """``"http://a:1,http://b:2"`` → the URLs, in order, without trailing slashes.

    Raises:
        ValueError: no URL at all.
    """
    urls = tuple(u.strip().rstrip("/") for u in bootstrap.split(",") if u.strip())
    if not urls:
        raise ValueError(f"bootstrap needs at least one server URL, got '{bootstrap}'")
    return urls


@dataclass(frozen=True)
class ClusterView:
    """What ``GET /v1/metadata`` last said: live nodes and each partition's leader."""

    nodes: dict[int, str]
    """Live node id → base URL."""
    leaders: dict[str, tuple[int, ...]]
    """Topic → the leader's node id of each partition, by partition number (-1 = none live)."""
    controller: int | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ClusterView:
        nodes = {n["node_id"]: n["url"].rstrip("/") for n in body["nodes"]}
        leaders = {}
        for t in body["topics"]:
            by_partition = {p["partition"]: p["leader"] for p in t["partitions"]}
            count = max(by_partition, default=-1) + 1
            leaders[t["name"]] = tuple(by_partition.get(p, -1) for p in range(count))
        return cls(nodes, leaders, body.get("controller"))

    def leader_url(self, topic: str, partition: int) -> str | None:
        """The URL of the partition's live leader, or None when the view has none."""
        parts = self.leaders.get(topic, ())
        return self.nodes.get(parts[partition]) if 0 <= partition < len(parts) else None


@dataclass(frozen=True)
class Route:
    """Some records of a batch and the node to send them to."""

    url: str
    indexes: tuple[int, ...]
    """Positions of the records in the batch, in batch order."""
    forward: bool
    """False: the node leads the partitions of all these records (send ``?forward=false``, so a node that
    lost the lead answers 421 rather than forwarding); True: any node, which places or forwards them."""
    node_id: int | None = None
    """The leader's node id when ``forward`` is False."""


def record_partition(key: bytes | None, partition: int | None, num_partitions: int) -> int | None:
    """The partition the server would put a record in: explicit, else murmur2 of the key; None = keyless."""
    if partition is not None:
        return partition
    if key is not None:
        return to_positive(murmur2(key)) % num_partitions
    return None


def plan_routes(
    view: ClusterView | None,
    topic: str,
    keys: Sequence[bytes | None],
    partitions: Sequence[int | None],
    *,
    any_url: str,
) -> list[Route]:
    """Split one batch of ``topic`` into requests, one per node (the routing decision, pure).

    * Records with a partition (explicit, or their key's murmur2 partition,
      as the server computes it) go to their partition's leader, with
      ``forward`` False; one request per leader.
    * Keyless records, and records the view cannot place (unknown topic, a
      partition out of its range or without a live leader), go in one request
      to ``any_url`` with ``forward`` True: that node places and forwards them.
    * A node that leads every partition of the topic takes the whole batch in
      one request (embedded mode; ``leader.placement=topic``), so the records
      keep their order within each partition.

    Routes come in the order of their first record; an empty batch has none.
    """
    every = tuple(range(len(keys)))
    if not every:
        return []
    leaders = view.leaders.get(topic) if view is not None else None
    if view is None or not leaders:
        return [Route(any_url, every, forward=True)]
    if len(set(leaders)) == 1 and leaders[0] in view.nodes:
        return [Route(view.nodes[leaders[0]], every, forward=False, node_id=leaders[0])]
    by_leader: dict[int, list[int]] = {}
    placed: list[int] = []
    for i, (key, explicit) in enumerate(zip(keys, partitions, strict=True)):
        p = record_partition(key, explicit, len(leaders))
        leader = leaders[p] if p is not None and 0 <= p < len(leaders) else -1
        if leader in view.nodes:
            by_leader.setdefault(leader, []).append(i)
        else:
            placed.append(i)
    routes = [Route(view.nodes[n], tuple(ix), forward=False, node_id=n) for n, ix in by_leader.items()]
    if placed:
        routes.append(Route(any_url, tuple(placed), forward=True))
    return sorted(routes, key=lambda r: r.indexes[0])


class Nodes:
    """One HTTP client per node URL, and the cluster view, refreshed from whichever node answers.

    Thread-safe. A server that denies the metadata (no DESCRIBE on the
    cluster) leaves the view None: the clients then send everything to the
    bootstrap nodes, which forward.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        timeout_s: float,
        api_key: str | None,
        ca_file: str | None,
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        self.bootstrap = bootstrap_urls(bootstrap)
        self._options: dict[str, Any] = {
            "timeout_s": timeout_s,
            "api_key": api_key,
            "ca_file": ca_file,
            "client_cert": client_cert,
        }
        self._clients: dict[str, httpx.Client] = {}
        self._lock = threading.Lock()
        self._turn = 0
        self.view: ClusterView | None = None
        self.refreshed_at = 0.0
        """``time.monotonic()`` of the last refresh attempt."""
        self.routable = True
        """False once a server denied the metadata (no DESCRIBE on the cluster) or has no ``/v1/metadata``."""

    def client(self, url: str) -> httpx.Client:
        with self._lock:
            c = self._clients.get(url)
            if c is None:
                c = self._clients[url] = http_client(url, **self._options)
            return c

    def urls(self) -> list[str]:
        """Every node known: the live ones of the view first, then the bootstrap list."""
        known = list(self.view.nodes.values()) if self.view is not None else []
        return known + [u for u in self.bootstrap if u not in known]

    def next_url(self, avoid: str | None = None) -> str:
        """A node, round-robin over the live nodes (or the bootstrap list without a view); ``avoid`` if no other."""
        with self._lock:
            self._turn += 1
            turn = self._turn
        urls = list(self.view.nodes.values()) if self.view is not None and self.view.nodes else list(self.bootstrap)
        others = [u for u in urls if u != avoid] or urls
        return others[turn % len(others)]

    def refresh(self, avoid: str | None = None) -> ClusterView | None:
        """Ask the nodes in turn (``avoid``, one that just failed, last) for metadata; the new view.

        Keeps the old view when no node answers. Without DESCRIBE on the
        cluster the view stays None.

        Raises:
            LogstoreError: a node answered with another error than a denial.
        """
        self.refreshed_at = time.monotonic()
        urls = self.urls()
        if avoid in urls:
            urls.remove(avoid)
            urls.append(avoid)
        for url in urls:
            try:
                r = self.client(url).get("/v1/metadata")
            except httpx.TransportError:
                continue
            if r.status_code == 404:
                self.routable = False  # a server from before /v1/metadata: no routing
                return self.view
            try:
                raise_for(r)
            except ClusterAuthorizationFailedError:
                self.routable = False
                return None
            self.routable = True
            self.view = ClusterView.from_json(r.json())
            return self.view
        return self.view

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """A request to the first node that answers (the view's live nodes, then the bootstrap list).

        Raises:
            NetworkExceptionError: no node could be reached (each URL and why, e.g. connection refused).
            LogstoreError: the error the server answered with.
        """
        return self.call_at(self.urls(), method, path, **kw)

    def call_at(self, urls: Sequence[str], method: str, path: str, **kw: Any) -> Any:
        """As :meth:`call`, trying ``urls`` in order."""
        failures = []
        for url in urls:
            try:
                r = self.client(url).request(method, path, **kw)
            except httpx.TransportError as e:
                failures.append(f"{url}: {e or type(e).__name__}")
                continue
            raise_for(r)
            return r.json() if r.content else None
        raise NetworkExceptionError(f"cannot reach any server ({'; '.join(failures)})")

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()


def is_leadership_error(e: LogstoreError) -> bool:
    """The node is not (or no longer) the leader: refresh metadata before retrying."""
    return e.name in ("NOT_LEADER_OR_FOLLOWER", "FENCED_LEADER_EPOCH")
