"""The checker of a nemesis history (``bench/nemesis.py``): what went wrong, in Jepsen's terms.

A history is JSON lines, one operation each, as the nemesis writes them:
``{"op", "proc", "node", "t0", "t1", "req", "ok", "status", "ans", "err"}``
— ``t0``/``t1`` the operation's start and end (seconds, one monotonic clock of
the nemesis process), ``ok`` whether it succeeded, ``status`` the HTTP status
(None when none came back), ``ans`` the answer and ``err`` the error text.
The operations it reads:

- ``produce``: ``req = {"topic", "acks", "producer_id", "sequence", "records":
  [{"value", "key", "partition"}]}``; ``ans = {"offsets": [{"partition",
  "offset"}]}`` in request order. Every record's value is unique in the run.
- ``create_topic`` / ``delete_topic`` / ``add_partitions``: ``req = {"topic", …}``.
- ``join`` / ``heartbeat`` / ``leave`` of a group member: ``req = {"group",
  "member_id"}``, ``ans = {"member_id", "generation", "assignment": [[topic, partition], …]}``.
- ``fetch`` by a member: ``ans = {"records": [[topic, partition, offset, value], …]}``.
- ``commit`` by a member: ``req = {"group", "member_id", "generation",
  "offsets": [[topic, partition, offset], …]}`` (offset = the next one to read).
- ``group_offsets``: ``GET /v1/groups/{g}``, ``ans = {"offsets": [[topic, partition, committed], …]}``.
- ``security_change`` (``--security``): ``req = {"principal", "allowed"}``,
  from the start to the end of the write to the security store that gave
  ``principal`` the right to write (``allowed`` true) or took it away.
  A ``produce`` whose ``req`` has a ``principal`` is a probe sent with that
  principal's key.
- ``fault``: what the nemesis did, ``req = {"kind", …}``; kind
  ``cluster_down`` spans the time the whole cluster was killed (from the kill
  to every node serving again), which unavailability does not count.
- ``idle``: a time no client wrote (the workload stopped, the final writes not
  begun yet), which unavailability does not count either.
- ``final``: the topic's table read directly after the run (delta-rs):
  ``req = {"topic"}``, ``ans = {"records": [[partition, offset, value], …]}``.

**Incarnations.** A topic deleted and created again is a new log: its offsets
start at 0 and the old records are gone, as they should be. Each
``delete_topic`` (also one that failed: it may have happened) opens a window
that the end of the next ``create_topic`` of that topic that succeeded or
found it existing (409) closes; an operation lies in incarnation *k*
when *k* windows closed before it started, and is *ambiguous* when it overlaps
a window (then no rule judges it). Only operations in a topic's last
incarnation are checked against the final table.

**The anomalies** (each a count; all must be 0):

- ``lost``: a record acknowledged with acks=1 or all (200) is not in the final table.
- ``duplicate``: a value stored more than once (extra copies).
- ``misplaced``: an acknowledged record stored at another partition or offset than its answer gave.
- ``gaps``: offsets missing between a partition's log start (0: the nemesis runs no retention) and its last offset.
- ``reused_offsets``: two records of one partition at one offset.
- ``refused``: a produce a correct producer sent answered 400, 409 or 422
  (a correct producer is never refused; 404 of a deleted or missing topic or
  partition, 429 back-pressure, 421/503 during failover are retriable, not anomalies).
- ``reread_after_commit``: a group member fetched a record below an offset
  its group had committed before the fetch started.
- ``double_owner``: a partition owned by two live members of a group at once.
  A member certainly owns a partition from the end of one join/heartbeat
  answer that lists it until the start of its next request, when that one's
  answer lists it too (the coordinator revokes only through an answer, and a
  member whose session ended gets no answer with an assignment).
- ``commit_backwards``: a group's committed offset seen (``group_offsets``,
  or a later commit) below one a commit had already set.
- ``restart_failed``: a fault the cluster did not recover from — a node or
  ZooKeeper server that could not start again (a ``fault`` with ``ok`` false).
- ``unreadable``: a topic's final table that delta-rs cannot read (a ``final`` with ``ok`` false).
- ``stale_authorization``: a probe answered against the security store's
  state (200 after its principal lost the right, 401/403 after it gained it)
  although the last change of that principal begun before the probe ended had
  completed more than ``AUTHORIZATION_BOUND_S`` (5 s) before the probe began.

**Unavailability**, per partition and incarnation: the longest time from a
failed acks=1/all attempt on it (a request naming the partition explicitly)
to the next acknowledged write to it (or, never followed by one, to the end
of the history or of the topic's incarnation), minus the time the whole cluster was
down on purpose and ``idle`` time. Answers 404 (no such topic or partition,
yet or any more) and refusals (counted as ``refused``) are not failed
attempts, nor are authorisation answers (401, 403). ``worst_unavailability_s`` is the largest, ``None`` when no attempt
failed; ``worst_unavailability_at`` = ``[topic, partition, start, end]``
(history seconds).

Run: ``python bench/nemesis_check.py HISTORY.jsonl`` prints one JSON line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ANOMALIES", "check", "load_history", "read_final"]

ANOMALIES = (
    "lost",
    "duplicate",
    "misplaced",
    "gaps",
    "reused_offsets",
    "refused",
    "reread_after_commit",
    "double_owner",
    "commit_backwards",
    "restart_failed",
    "unreadable",
    "stale_authorization",
)
"""Every count the checker makes that must be 0."""

AUTHORIZATION_BOUND_S = 5.0
"""How long a change of keys or ACLs may take to reach every node (docs/design.md §10)."""

REFUSED_STATUSES = (400, 409, 422)
"""Answers a correct producer must never get."""

Op = dict[str, Any]


def load_history(path: str | Path) -> list[Op]:
    """The operations of a history file, in file order."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_final(root: str | Path, topic: str) -> list[list[Any]]:
    """``[[partition, offset, value], …]`` of ``topic``'s Delta table under ``root``, read with delta-rs."""
    from deltalake import DeltaTable

    table = DeltaTable(str(Path(root) / "topics" / topic)).to_pyarrow_table(columns=["partition", "offset", "value"])
    values = [v if v is None else v.decode("utf-8", "replace") for v in table.column("value").to_pylist()]
    return [
        list(r)
        for r in zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), values, strict=True)
    ]


# -- incarnations -------------------------------------------------------------------


class Incarnations:
    """Per topic, the windows in which it was deleted and created again (see the module docstring)."""

    def __init__(self, ops: Iterable[Op]) -> None:
        self.windows: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for op in sorted((o for o in ops if o["op"] in ("delete_topic", "create_topic")), key=lambda o: o["t0"]):
            topic = op["req"]["topic"]
            wins = self.windows[topic]
            if op["op"] == "delete_topic":
                if wins and wins[-1][1] == math.inf:
                    continue  # still open: one window until the topic exists again
                wins.append((op["t0"], math.inf))
            elif (op["ok"] or op.get("status") == 409) and wins and wins[-1][1] == math.inf:  # 409: it exists
                wins[-1] = (wins[-1][0], op["t1"])

    def of(self, topic: str, t0: float, t1: float) -> int | None:
        """The incarnation of an operation on ``topic`` over [t0, t1]; None when it overlaps a window."""
        k = 0
        for start, end in self.windows.get(topic, ()):
            if end < t0:
                k += 1
            elif start <= t1:
                return None
        return k

    def end_of(self, topic: str, k: int, default: float) -> float:
        """When incarnation ``k`` of ``topic`` ended (the start of the delete after it); ``default`` if it did not."""
        wins = self.windows.get(topic, ())
        return wins[k][0] if k < len(wins) else default

    def last(self, topic: str) -> int:
        """The final table's incarnation (None-free: an open window means the topic is gone at the end)."""
        return sum(1 for _s, end in self.windows.get(topic, ()) if end != math.inf)


# -- the rules ------------------------------------------------------------------------


def check(ops: Sequence[Op]) -> dict[str, Any]:
    """Every anomaly count, the worst unavailability and the run's facts; one JSON-able dict."""
    setup = next((o for o in ops if o["op"] == "setup"), {"req": {}})
    inc = Incarnations(ops)
    finals = {o["req"]["topic"]: o["ans"]["records"] for o in ops if o["op"] == "final" and o["ok"]}
    produces = [o for o in ops if o["op"] == "produce"]
    out: dict[str, Any] = {"seed": setup["req"].get("seed")}
    out |= _storage(produces, finals, inc)
    out["refused"] = sum(1 for o in produces if o.get("status") in REFUSED_STATUSES)
    out["reread_after_commit"] = _rereads(ops, inc)
    out["double_owner"] = _double_owners(ops)
    out["commit_backwards"] = _backwards(ops)
    out["restart_failed"] = sum(1 for o in ops if o["op"] == "fault" and not o["ok"])
    out["unreadable"] = sum(1 for o in ops if o["op"] == "final" and not o["ok"])
    out["stale_authorization"] = _stale_authorizations(ops)
    worst, where = _unavailability(produces, ops, inc)
    out["worst_unavailability_s"] = None if worst is None else round(worst, 3)
    out["worst_unavailability_at"] = where
    out["ops"] = len(ops)
    out["acked"] = sum(len(o["req"]["records"]) for o in produces if o["ok"] and o["req"]["acks"] != "0")
    out["errors"] = dict(sorted(Counter(str(o.get("status")) for o in produces if not o["ok"]).items()))
    faults = Counter(o["req"]["kind"] for o in ops if o["op"] == "fault")
    faults.update(o["op"] for o in ops if o["op"] in ("delete_topic", "create_topic", "add_partitions") and o["ok"])
    out["faults"] = dict(sorted(faults.items()))
    return out


def _storage(produces: Sequence[Op], finals: dict[str, list[list[Any]]], inc: Incarnations) -> dict[str, int]:
    """lost, duplicate, misplaced, gaps and reused_offsets: the acknowledged records against the final tables."""
    counts = dict.fromkeys(("lost", "duplicate", "misplaced", "gaps", "reused_offsets"), 0)
    where: dict[str, dict[str, set[tuple[int, int]]]] = {}
    for topic, rows in finals.items():
        seen = Counter(r[2] for r in rows)
        counts["duplicate"] += sum(n - 1 for n in seen.values() if n > 1)
        where[topic] = defaultdict(set)
        for p, o, v in rows:
            where[topic][v].add((p, o))
        by_partition: dict[int, Counter[int]] = defaultdict(Counter)
        for p, o, _v in rows:
            by_partition[p][o] += 1
        for offsets in by_partition.values():
            counts["reused_offsets"] += sum(n - 1 for n in offsets.values() if n > 1)
            counts["gaps"] += max(offsets) + 1 - len(offsets)
    for op in produces:
        topic = op["req"]["topic"]
        if not op["ok"] or op["req"]["acks"] == "0" or topic not in finals:
            continue
        if inc.of(topic, op["t0"], op["t1"]) != inc.last(topic):
            continue  # an older incarnation's records are gone with it; an ambiguous one is not judged
        for record, acked in zip(op["req"]["records"], op["ans"]["offsets"], strict=False):
            stored = where[topic].get(record["value"])
            if not stored:
                counts["lost"] += 1
            elif acked["offset"] is not None and (acked["partition"], acked["offset"]) not in stored:
                counts["misplaced"] += 1
    return counts


def _rereads(ops: Sequence[Op], inc: Incarnations) -> int:
    """Records fetched by a group below an offset the group had committed before the fetch started."""
    commits: dict[tuple[str, str, int, int | None], list[tuple[float, int]]] = defaultdict(list)
    for op in ops:
        if op["op"] == "commit" and op["ok"]:
            for topic, p, offset in op["req"]["offsets"]:
                commits[(op["req"]["group"], topic, p, inc.of(topic, op["t0"], op["t1"]))].append((op["t1"], offset))
    n = 0
    for op in ops:
        if op["op"] != "fetch" or not op["ok"]:
            continue
        for topic, p, offset, _value in op["ans"]["records"]:
            key = (op["req"]["group"], topic, p, inc.of(topic, op["t0"], op["t1"]))
            if key[3] is not None and any(t1 < op["t0"] and c > offset for t1, c in commits.get(key, ())):
                n += 1
    return n


def _double_owners(ops: Sequence[Op]) -> int:
    """Pairs of members whose certain ownership of one partition of one group overlaps in time."""
    by_member: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for op in ops:
        if op["op"] in ("join", "heartbeat", "leave"):
            member = (op.get("ans") or {}).get("member_id") or op["req"].get("member_id")
            if member:
                by_member[(op["req"]["group"], member)].append(op)
    owned: dict[tuple[str, str, int], list[tuple[float, float, str]]] = defaultdict(list)
    for (group, member), seq in by_member.items():
        seq.sort(key=lambda o: o["t0"])
        for a, b in itertools.pairwise(seq):
            if a["ok"] and b["ok"] and a["op"] != "leave" and b["op"] != "leave":
                both = {tuple(x) for x in a["ans"]["assignment"]} & {tuple(x) for x in b["ans"]["assignment"]}
                for topic, p in both:
                    owned[(group, topic, p)].append((a["t1"], b["t0"], member))
    n = 0
    for spans in owned.values():
        spans.sort()
        for i, (s1, e1, m1) in enumerate(spans):
            for s2, e2, m2 in spans[i + 1 :]:
                if s2 >= e1:
                    break
                if m1 != m2 and s2 < e1 and s1 < e2:
                    n += 1
    return n


def _backwards(ops: Sequence[Op]) -> int:
    """Committed offsets seen below what a completed commit had set (by a later commit or a read of the group)."""
    done: dict[tuple[str, str, int], list[tuple[float, int]]] = defaultdict(list)
    seen: list[tuple[float, tuple[str, str, int], int]] = []
    for op in ops:
        if op["op"] == "commit" and op["ok"]:
            for topic, p, offset in op["req"]["offsets"]:
                done[(op["req"]["group"], topic, p)].append((op["t1"], offset))
                seen.append((op["t0"], (op["req"]["group"], topic, p), offset))
        elif op["op"] == "group_offsets" and op["ok"]:
            for topic, p, offset in op["ans"]["offsets"]:
                seen.append((op["t0"], (op["req"]["group"], topic, p), -1 if offset is None else offset))
    return sum(1 for t0, key, value in seen if any(t1 < t0 and c > value for t1, c in done.get(key, ())))


def _unavailability(
    produces: Sequence[Op], ops: Sequence[Op], inc: Incarnations
) -> tuple[float | None, list[Any] | None]:
    """The longest failed-attempt-to-next-acknowledged-write window of any partition, and where."""
    down = [
        (o["t0"], o["t1"])
        for o in ops
        if o["op"] == "idle" or (o["op"] == "fault" and o["req"]["kind"] == "cluster_down")
    ]
    events: list[tuple[float, int, tuple[str, int, int]]] = []  # (time, 0 = ok | 1 = failed attempt, key)
    for op in produces:
        topic = op["req"]["topic"]
        k = inc.of(topic, op["t0"], op["t1"])
        if op["req"]["acks"] == "0" or k is None:
            continue
        if op["ok"]:
            for acked in op["ans"]["offsets"]:
                events.append((op["t1"], 0, (topic, acked["partition"], k)))
        elif op.get("status") not in (401, 403, 404, *REFUSED_STATUSES):  # not allowed; missing; refused
            for p in {r["partition"] for r in op["req"]["records"] if r.get("partition") is not None}:
                events.append((op["t0"], 1, (topic, p, k)))
    events.sort()
    first_failure: dict[tuple[str, int, int], float] = {}
    worst: tuple[float, list[Any]] | None = None
    end = max((op["t1"] for op in produces), default=0.0)
    windows = []
    for t, failed, key in events:
        if failed:
            first_failure.setdefault(key, t)
        elif key in first_failure:
            windows.append((first_failure.pop(key), t, key))
    # Never recovered: until the end, or until the incarnation ended (a delete of the topic began).
    windows += [(start, inc.end_of(key[0], key[2], end), key) for key, start in first_failure.items()]
    for start, stop, key in windows:
        length = stop - start - sum(max(0.0, min(stop, d1) - max(start, d0)) for d0, d1 in down)
        if worst is None or length > worst[0]:
            worst = (length, [key[0], key[1], round(start, 3), round(stop, 3)])
    return (None, None) if worst is None else worst


def _stale_authorizations(ops: Sequence[Op]) -> int:
    """Probes answered against a change of their principal's rights that was older than the bound."""
    changes: dict[str, list[tuple[float, float, bool]]] = defaultdict(list)
    for op in ops:
        if op["op"] == "security_change" and op["ok"]:
            changes[op["req"]["principal"]].append((op["t0"], op["t1"], bool(op["req"]["allowed"])))
    n = 0
    for op in ops:
        principal = op["req"].get("principal") if op["op"] == "produce" else None
        if principal is None or op.get("status") not in (200, 401, 403):
            continue  # no answer, or one that says nothing of authorisation (421, 503, ...)
        begun = [c for c in changes.get(principal, ()) if c[0] < op["t1"]]
        if not begun:
            continue
        _t0, done, allowed = max(begun)
        if done + AUTHORIZATION_BOUND_S < op["t0"] and (op["status"] == 200) != allowed:
            n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("history", help="a history file (JSON lines) written by bench/nemesis.py")
    args = parser.parse_args(argv)
    print(json.dumps(check(load_history(args.history))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
