"""What a node promised and has not answered: the count a cluster node waits on before it registers again.

After a lost ZooKeeper session a node registers again only once every acks=1 batch it promised offsets is
answered (docs/cluster.md, failover): :func:`~logstore.node.broker.unanswered_promises` says per topic how many
are left, pending or taken by the committer, and names a topic whose retired pipeline is still closing.
Here the node's only committer thread is held by a task of the test, so nothing commits until it lets go.
"""

from __future__ import annotations

import dataclasses
import threading

from logstore.config import LogstoreConfig
from logstore.node.broker import Broker, unanswered_promises
from logstore.store import LogStore
from logstore.wire.json_produce import parse_produce

_ONE = parse_produce(b'{"records": [{"value": "v", "partition": 0}]}')


def test_promised_batches_count_until_their_commit_answers_them(config: LogstoreConfig) -> None:
    LogStore(config).create_topic("t", 1)
    broker = Broker(dataclasses.replace(config, num_io_threads=1))
    stalled, resume = threading.Event(), threading.Event()
    try:
        pipeline = broker.pipeline("t")

        def stall() -> None:
            stalled.set()
            resume.wait(60)

        broker.committers.task(stall, "stall").run_soon()
        assert stalled.wait(10)
        promised = [pipeline.submit(_ONE, "1") for _ in range(2)]
        assert all(s.promised is not None for s in promised)
        waits = pipeline.submit(_ONE, "all")  # not promised, so it does not count
        assert pipeline.promises_unanswered() == 2
        assert unanswered_promises(threading.Lock(), {"t": pipeline}, broker._retirements) == {"t": 2}

        resume.set()
        assert waits.committed.result(timeout=30).offsets.to_pylist() == [2]
        assert pipeline.promises_unanswered() == 0
        assert unanswered_promises(threading.Lock(), {"t": pipeline}, broker._retirements) == {}
        done = broker._retirements.begin("t")  # a retired pipeline of the topic closing: not settled
        assert unanswered_promises(threading.Lock(), {}, broker._retirements) == {"t": None}
        done()
        assert unanswered_promises(threading.Lock(), {}, broker._retirements) == {}
    finally:
        resume.set()
        broker.close()
