"""Client quotas as Kafka's: byte rates per principal (and client id), enforced by delaying, never by errors.

A :class:`Quota` gives a principal — or one client id of a principal, which
then wins over the principal's own quota — a ``producer_byte_rate`` (request
bytes of produce calls per second) and a ``consumer_byte_rate`` (response
bytes of fetches per second). :class:`QuotaManager` measures each quota
entity's rate as Kafka's ``Rate`` does, over ``quota.window.num`` samples of
``quota.window.size.seconds`` (the window counts as at least ``num - 1`` full
samples, so a fresh client is not throttled for its first burst), and when a
call takes the rate over the quota returns Kafka's throttle time::

    throttle = (rate - quota) / quota * window

Delaying the response by that long brings the client back to its quota;
clients of other entities have their own sensors and are unaffected.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Quota", "QuotaKind", "QuotaManager", "RateSensor"]

QuotaKind = Literal["producer", "consumer"]


@dataclass(frozen=True)
class Quota:
    """Byte-rate limits of one entity; None = no limit of that kind.

    Attributes:
        principal: ``User:alice``.
        client_id: the ``X-Client-Id`` this quota is for; None = every client of the principal.
        producer_byte_rate: produce request bytes per second.
        consumer_byte_rate: fetch response bytes per second.
    """

    principal: str
    client_id: str | None = None
    producer_byte_rate: int | None = None
    consumer_byte_rate: int | None = None

    def rate(self, kind: QuotaKind) -> int | None:
        return self.producer_byte_rate if kind == "producer" else self.consumer_byte_rate

    def to_dict(self) -> dict[str, Any]:
        return {
            "principal": self.principal,
            "client_id": self.client_id,
            "producer_byte_rate": self.producer_byte_rate,
            "consumer_byte_rate": self.consumer_byte_rate,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Quota:
        def opt(v: Any) -> int | None:
            return None if v is None else int(v)

        return cls(
            str(d["principal"]),
            d.get("client_id"),
            opt(d.get("producer_byte_rate")),
            opt(d.get("consumer_byte_rate")),
        )


class RateSensor:
    """Bytes per second over a sliding window of samples (Kafka's ``SampledStat`` + ``Rate``). Not thread-safe."""

    def __init__(self, samples: int, sample_s: float) -> None:
        self._samples = max(2, samples)
        self._sample_s = sample_s
        self._starts: list[float] = []
        self._totals: list[float] = []

    def record(self, amount: float, now: float) -> None:
        if not self._starts or now - self._starts[-1] >= self._sample_s:
            self._starts.append(now)
            self._totals.append(0.0)
            if len(self._starts) > self._samples:
                del self._starts[0], self._totals[0]
        self._totals[-1] += amount

    def window_s(self, now: float) -> float:
        """The span the rate is measured over: at least ``samples - 1`` full samples, as Kafka counts it."""
        if not self._starts:
            return (self._samples - 1) * self._sample_s
        elapsed = now - self._starts[0]
        full = math.floor(elapsed / self._sample_s)
        if full < self._samples - 1:
            elapsed += (self._samples - 1 - full) * self._sample_s
        return elapsed

    def rate(self, now: float) -> float:
        # samples older than the whole window no longer count
        while self._starts and now - self._starts[0] > self._samples * self._sample_s:
            del self._starts[0], self._totals[0]
        return sum(self._totals) / self.window_s(now)


class QuotaManager:
    """Throttle times per quota entity; one node's view (each node enforces its own share, as Kafka brokers do).

    Thread-safe. ``window_samples`` / ``window_sample_s`` are ``quota.window.num`` /
    ``quota.window.size.seconds``.
    """

    def __init__(self, *, window_samples: int = 11, window_sample_s: float = 1.0) -> None:
        self._samples = window_samples
        self._sample_s = window_sample_s
        self._sensors: dict[tuple[QuotaKind, str, str | None], RateSensor] = {}
        self._lock = threading.Lock()

    @staticmethod
    def quota_for(quotas: dict[tuple[str, str | None], Quota], principal: str, client_id: str | None) -> Quota | None:
        """The quota of ``(principal, client_id)``: the client id's own, else the principal's."""
        if client_id is not None and (principal, client_id) in quotas:
            return quotas[(principal, client_id)]
        return quotas.get((principal, None))

    def record(self, quota: Quota, kind: QuotaKind, nbytes: int, now: float) -> float:
        """Count ``nbytes`` against ``quota``; returns the throttle time in seconds (0 when within quota)."""
        limit = quota.rate(kind)
        if limit is None:
            return 0.0
        key = (kind, quota.principal, quota.client_id)
        with self._lock:
            sensor = self._sensors.get(key)
            if sensor is None:
                sensor = self._sensors[key] = RateSensor(self._samples, self._sample_s)
            sensor.record(nbytes, now)
            rate = sensor.rate(now)
            if rate <= limit:
                return 0.0
            return (rate - limit) / max(limit, 1) * sensor.window_s(now)
