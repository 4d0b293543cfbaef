"""The nemesis's change of the security store: a probe principal gains, then loses, the right to write a topic.

With ``--security`` the nodes run with ``security.enabled`` and every client of
the workload is the super user (``bench/_nemesis_cluster.py``), so no change here
touches the workload. One change is:

1. **grant** — a new principal ``User:probe-<n>`` gets an API key and an ACL
   (ALLOW WRITE on the topic ``stable``), written to the cluster's security
   store in ZooKeeper: a ``security_change`` with ``allowed`` true, from when the
   write started to when it returned;
2. **probes** — one acks=all record with the probe's key to partition 0 through
   each node in turn, until every node has acknowledged one or the bound + 3 s
   have passed: each a ``produce`` of proc ``probe`` (an acknowledged one is
   checked like any other record: ``lost``, ``misplaced``);
3. **revoke** — the ACL removed or the key revoked (drawn from the seed): a
   ``security_change`` with ``allowed`` false;
4. **probes** again, until every node has refused one (401 or 403).

The checker's ``stale_authorization`` counts probes answered against the
change that had completed more than :data:`AUTHORIZATION_BOUND_S` before they
were sent (docs/design.md §10: a change reaches every node within 5 s).
"""

from __future__ import annotations

import random
import time
from typing import Any

import httpx
from _nemesis_cluster import NemesisCluster
from _nemesis_workload import REQUEST_TIMEOUT_S, STABLE, History

from logstore.security import AclBinding, Operation, PatternType, Permission, ResourceType, new_key

__all__ = ["AUTHORIZATION_BOUND_S", "SecurityChange"]

AUTHORIZATION_BOUND_S = 5.0
"""How long a change of keys or ACLs may take to reach every node (docs/design.md §10)."""
_PROBE_PAUSE_S = 0.2


class SecurityChange:
    """Grants and revocations of a probe principal's write on ``stable``, each followed by probes of every node."""

    def __init__(self, cluster: NemesisCluster, history: History, seed: int) -> None:
        self.cluster, self.history, self.seed = cluster, history, seed
        self._changes = 0
        self._probes = 0

    def run(self, rng: random.Random) -> dict[str, Any]:
        """One grant, its probes, one revocation, its probes; what the fault record says."""
        self._changes += 1
        principal = f"User:probe-{self._changes}"
        record, key = new_key(principal)
        acl = AclBinding(principal, ResourceType.TOPIC, STABLE, PatternType.LITERAL, Operation.WRITE, Permission.ALLOW)
        how = rng.choice(("remove_acl", "revoke_key"))
        with self.cluster.security_store() as store, httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            t0 = self.history.now()
            store.add_key(record)
            store.add_acls([acl])
            granted_req = {"principal": principal, "allowed": True}
            self.history.write("security_change", "nemesis", None, t0, granted_req, ok=True)
            granted = self._probe(client, principal, key, want_allowed=True)
            t0 = self.history.now()
            if how == "remove_acl":
                store.remove_acls([acl])
            else:
                store.revoke_keys(key_id=record.key_id)
            self.history.write(
                "security_change", "nemesis", None, t0, {"principal": principal, "allowed": False, "how": how}, ok=True
            )
            revoked = self._probe(client, principal, key, want_allowed=False)
        return {"principal": principal, "revoked_by": how, "granted_s": granted, "revoked_s": revoked}

    def _probe(self, client: httpx.Client, principal: str, key: str, *, want_allowed: bool) -> float | None:
        """Probe every node until each answered as ``want_allowed`` says; seconds that took (None: not all did)."""
        start = time.monotonic()
        deadline = start + AUTHORIZATION_BOUND_S + 3
        waiting = set(self.cluster.nodes)
        while waiting and time.monotonic() < deadline:
            for n in sorted(waiting):
                self._probes += 1
                body = {"records": [{"value": f"{self.seed}:probe:{self._probes}", "partition": 0}]}
                line = self.history.call(
                    "produce",
                    "probe",
                    n,
                    {"topic": STABLE, "acks": "all", "principal": principal, **body},
                    (client, "POST", f"{self.cluster.nodes[n].url}/v1/topics/{STABLE}/records"),
                    ok=(200,),
                    params={"acks": "all"},
                    json=body,
                    headers={"Authorization": f"Bearer {key}"},
                )
                if (line["status"] == 200) if want_allowed else (line["status"] in (401, 403)):
                    waiting.discard(n)
            time.sleep(_PROBE_PAUSE_S)
        return None if waiting else round(time.monotonic() - start, 2)
