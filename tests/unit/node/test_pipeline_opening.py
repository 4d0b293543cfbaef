"""Opening a topic's pipeline: one topic's open never waits for another's, and a failed open leaks nothing.

A cluster node opens the cluster's topics ahead of leadership on a thread of its own; while it opened one,
the cluster watch — which also renews the acks=1 lease — waited for it before it could open a topic it had
just been given. And an open that failed once its writer-lock files were open left them open, at every retry.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from logstore.config import LogstoreConfig
from logstore.errors import LogstoreError
from logstore.log.writer import TopicWriter
from logstore.node import pipeline as pipeline_module
from logstore.node.broker import Broker
from logstore.store import LogStore


def test_a_topic_opens_while_another_topics_open_is_still_under_way(
    config: LogstoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LogStore(config)
    store.create_topic("slow", 1)
    store.create_topic("given", 1)
    real = pipeline_module.TopicPipeline.__init__
    opening, release = threading.Event(), threading.Event()

    def init(self: pipeline_module.TopicPipeline, broker: Broker, topic: str) -> None:
        if topic == "slow":
            opening.set()
            release.wait(30)
        real(self, broker, topic)

    monkeypatch.setattr(pipeline_module.TopicPipeline, "__init__", init)
    broker = Broker(config)
    try:
        slow = threading.Thread(target=broker.pipeline, args=("slow",))
        slow.start()
        assert opening.wait(30)
        started = time.monotonic()
        broker.pipeline("given")  # waited for "slow" to open: the whole broker was locked during an open
        took = time.monotonic() - started
        release.set()
        slow.join(30)
        assert took < 5, f"opening 'given' waited {took:.1f} s for 'slow'"
        assert broker.pipeline_if_open("slow") is not None
    finally:
        release.set()
        broker.close()


def test_an_open_that_fails_after_the_writer_lock_files_opened_closes_them(
    config: LogstoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LogStore(config)
    broker = Broker(config)
    real = TopicWriter.catch_up

    def catch_up_after_delete(self: TopicWriter) -> None:  # the topic deleted between the writer's open and its look
        store.delete_topic(self.topic)
        real(self)

    monkeypatch.setattr(TopicWriter, "catch_up", catch_up_after_delete)
    try:
        store.create_topic("t-warm", 1)  # the first open loads what every later one shares
        with pytest.raises((LogstoreError, FileNotFoundError)):
            broker.pipeline("t-warm")
        before = len(os.listdir("/proc/self/fd"))
        for i in range(10):
            store.create_topic(f"t{i}", 1)
            with pytest.raises((LogstoreError, FileNotFoundError)):
                broker.pipeline(f"t{i}")
        assert len(os.listdir("/proc/self/fd")) <= before + 2
    finally:
        broker.close()
