"""The /v1/stats sampler: records/s and bytes/s from high-watermark growth, lag per sample, bounded memory."""

from __future__ import annotations

import time
from collections.abc import Callable

from ingest_api.console.stats import WINDOW_S, StatsSampler
from logstore.log.reader import TopicReader
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch, TopicInfo


def _sampler(store: LogStore, interval_ms: int = 5_000) -> StatsSampler:
    return StatsSampler(
        interval_ms, store.list_topics, lambda n: TopicReader(store.catalog, n), store.offsets.committed
    )


def test_the_ring_buffers_hold_fifteen_minutes_and_no_more(store: LogStore, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=2)
    sampler = _sampler(store, interval_ms=60_000)
    assert sampler.capacity == WINDOW_S // 60
    for _ in range(sampler.capacity + 5):
        sampler.sweep()
        time.sleep(0.002)  # samples are keyed by wall-clock milliseconds: one per millisecond at most
    assert len(sampler.topic_series[topic]) == sampler.capacity
    assert len(sampler.group_series) == 0  # no committed offsets, no group


def test_an_unchanged_topic_is_not_described_again(store: LogStore, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=3)
    described: list[str] = []

    class CountingReader(TopicReader):
        def describe(self) -> TopicInfo:
            described.append(self.topic)
            return super().describe()

    sampler = StatsSampler(
        5_000, store.list_topics, lambda n: CountingReader(store.catalog, n), store.offsets.committed
    )
    sampler.sweep()
    sampler.sweep()
    assert described == [topic]
    assert len(sampler.topic_series[topic]) == 2  # the sample still counts, with the same numbers
    store.alter_topic(topic, config={"retention.ms": 1000})  # a new table version
    sampler.sweep()
    assert described == [topic, topic]


def test_each_sweep_describes_the_topic_as_a_fresh_read_does(store: LogStore, make_topic: Callable[..., str]) -> None:
    """The sampler's readers follow the log commit by commit; what they describe matches a fresh handle's view."""
    topic = make_topic(partitions=3)
    sampler = _sampler(store)
    for round_ in range(4):
        n = 10 * (round_ + 1)
        parts = [(i + round_) % 3 for i in range(n)]
        store.append(topic, [ProducerBatch(input_table(parts, [b"v%d" % i for i in range(n)]))])
        if round_ == 2:
            store.alter_topic(topic, partitions=4)
        sampler.sweep()
        fresh = store.describe_topic(topic)
        latest = sampler.topic_series[topic][-1]
        assert latest.partitions == len(fresh.partitions)
        assert (
            latest.high_watermark_sum
            == sum(p.high_watermark for p in fresh.partitions)
            == 10 * sum(range(1, round_ + 2))
        )
        assert latest.size_bytes == sum(p.size_bytes for p in fresh.partitions)
        assert sampler._hws[topic] == tuple(p.high_watermark for p in fresh.partitions)


def test_a_deleted_topic_leaves_the_series(store: LogStore, make_topic: Callable[..., str]) -> None:
    topic = make_topic()
    sampler = _sampler(store)
    sampler.sweep()
    assert topic in sampler.topic_series
    store.delete_topic(topic)
    sampler.sweep()
    assert topic not in sampler.topic_series


def test_the_sampling_loop_survives_a_failed_sweep(store: LogStore, make_topic: Callable[..., str]) -> None:
    import asyncio

    topic = make_topic(partitions=1)
    listed: list[int] = []

    def list_topics() -> list[str]:
        listed.append(1)
        if len(listed) == 1:
            raise RuntimeError("a defect in one sweep")
        return store.list_topics()

    sampler = StatsSampler(20, list_topics, lambda n: TopicReader(store.catalog, n), store.offsets.committed)

    async def sample_after_the_failure() -> None:
        task = asyncio.create_task(sampler.run())
        try:
            async with asyncio.timeout(20):
                while topic not in sampler.topic_series:
                    assert not task.done(), "the sampling loop ended"
                    await asyncio.sleep(0.02)
        finally:
            task.cancel()

    asyncio.run(sample_after_the_failure())
    assert len(listed) >= 2
