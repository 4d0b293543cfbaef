"""The bytes each partition of a Kafka Fetch may return: never unbounded, read at once or one by one.

A Fetch's partitions are read at once when their ``partition_max_bytes`` together fit the request's
``max_bytes``, else one after another within what is left of it (docs/kafka-protocol.md). A reader bound of 0
or less means no bound, so a partition that asks for 0 or fewer bytes is given 1: the first record whole, as
Kafka answers it.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_api.handlers import _fetch_each


@pytest.mark.parametrize(
    ("asked", "total", "given"),
    [
        ([0, 0], 50 << 20, [1, 1]),  # at once: was [0, 0], two unbounded reads
        ([-(50 << 20), 100 << 20], 50 << 20, [1, (50 << 20) - 1]),  # one by one: the sum no longer fits
        ([1 << 20, 1 << 20], 50 << 20, [1 << 20, 1 << 20]),
        ([1 << 20, 1 << 20], 1 << 20, [1 << 20, 1]),  # one by one: the first took it all
    ],
)
def test_every_partition_is_read_with_a_bound(asked: list[int], total: int, given: list[int]) -> None:
    budgets: list[int] = []
    lock = threading.Lock()

    def fetch_one(topic: str, p: Any, budget: int) -> dict[str, Any]:
        with lock:
            budgets.append(budget)
        return {"partition_index": p.partition, "records": b"x" * max(budget, 0)}

    asks = [("t", SimpleNamespace(partition=i, partition_max_bytes=b)) for i, b in enumerate(asked)]
    entries = _fetch_each(asks, total, fetch_one)
    assert [e["partition_index"] for e in entries] == list(range(len(asked)))
    assert sorted(budgets) == sorted(given)
