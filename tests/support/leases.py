"""Racing for a group lease, from threads of one process or from many processes."""

from __future__ import annotations

import threading

from logstore.errors import GroupSubscribedToTopicError
from logstore.groups.leases import GroupLease


def race_for_lease(root: str, topic: str, start: threading.Event | None, now_ms: int) -> GroupLease | None:
    """Try to take ``topic``'s lease of group ``g`` at ``now_ms`` (after ``start`` is set); the lease if granted."""
    lease = GroupLease(root, "g", timeout_ms=5_000, clock_ms=lambda: now_ms)
    if start is not None:
        start.wait()
    try:
        lease.acquire({topic})
    except GroupSubscribedToTopicError:
        return None
    return lease
