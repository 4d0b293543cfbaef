"""Client quotas as Kafka's: the throttle time over the window, and which quota a client falls under."""

from __future__ import annotations

from logstore.security import Quota, QuotaManager


def test_throttle_time_is_kafkas_formula_over_the_window() -> None:
    quotas = QuotaManager(window_samples=11, window_sample_s=1.0)
    quota = Quota("User:alice", producer_byte_rate=1000)
    # 20 000 bytes at once: the rate counts over at least 10 full samples, 2000 B/s, twice the quota
    assert quotas.record(quota, "producer", 20_000, now=100.0) == (2000 - 1000) / 1000 * 10
    assert quotas.record(Quota("User:bob", producer_byte_rate=1000), "producer", 5_000, now=100.0) == 0.0
    assert quotas.record(quota, "consumer", 10**9, now=100.0) == 0.0  # no consumer quota set


def test_a_client_id_quota_wins_over_the_principals() -> None:
    quotas = {
        ("User:alice", None): Quota("User:alice", producer_byte_rate=10),
        ("User:alice", "bulk"): Quota("User:alice", "bulk", producer_byte_rate=10**6),
    }
    assert QuotaManager.quota_for(quotas, "User:alice", "bulk") == quotas[("User:alice", "bulk")]
    assert QuotaManager.quota_for(quotas, "User:alice", "other") == quotas[("User:alice", None)]
    assert QuotaManager.quota_for(quotas, "User:bob", None) is None
