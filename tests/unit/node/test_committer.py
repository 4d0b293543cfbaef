"""A topic keeps working whatever one batch does: timestamp limits, unexpected commit errors, a failed skip.

A record timestamp past year 9999 fits the parser's int64 but not a Delta
TIMESTAMP's statistics; ``TopicWriter.check_records`` refuses it (as the HTTP
door does, with 400 ``INVALID_TIMESTAMP``). Should a batch still make the
writer raise, only that batch fails and the committer thread goes on. The HTTP
side and the replay of a poisoned WAL frame are in
``tests/integration/ingest_api/test_committer.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from logstore.config import LogstoreConfig
from logstore.errors import InvalidTimestampError, UnknownServerError
from logstore.log.writer import TopicWriter
from logstore.node.broker import Broker
from logstore.store import LogStore
from logstore.structs import AppendResult, ProducerBatch
from logstore.wire.json_produce import ParsedRecords, parse_produce
from tests.support.helpers import assert_gap_free
from tests.support.timestamps import YEAR_10000_MS, records


def test_check_records_refuses_timestamps_a_delta_timestamp_cannot_hold(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    writer = TopicWriter(store.catalog, make_topic())
    with pytest.raises(InvalidTimestampError, match="year 9999"):
        writer.check_records(records(["x"], YEAR_10000_MS))
    # Not validated in advance (a non-HTTP caller): the bad batch fails alone, the other lands.
    bad, good = writer.append([ProducerBatch(records(["x"], YEAR_10000_MS)), ProducerBatch(records(["y"]))])
    assert isinstance(bad, InvalidTimestampError) and isinstance(good, AppendResult)


def test_committer_survives_a_batch_that_makes_the_writer_raise(config: LogstoreConfig) -> None:
    store = LogStore(config)
    store.create_topic("t", 1)
    broker = Broker(config)
    try:
        pipeline = broker.pipeline("t")
        good = parse_produce(b'{"records": [{"value": "good"}]}')
        # Past the door's checks (as a bug could let it through): the statistics cannot be built.
        poisoned = records(["poison"], YEAR_10000_MS)
        counts = np.array([1], np.int64)
        broker.buffer.reserve(100)  # as submit() does before it queues
        subs = [
            pipeline.submit(good, "all"),
            pipeline._enqueue(poisoned, good, "all", 100, counts, poisoned["partition"].combine_chunks()),
            pipeline.submit(good, "all"),
        ]
        assert subs[0].committed.result(timeout=30).offsets.to_pylist() == [0]
        with pytest.raises(UnknownServerError, match="could not be committed"):
            subs[1].committed.result(timeout=30)
        assert subs[2].committed.result(timeout=30).offsets.to_pylist() == [1]
        later = pipeline.submit(good, "1")  # the thread still commits, acks=1 too
        assert later.committed.result(timeout=30).offsets.to_pylist() == [2]
        assert broker.buffer.used == 0  # the failed batch's bytes were released
    finally:
        broker.close()
    assert assert_gap_free(store.catalog, "t") == {0: [b"good", b"good", b"good"]}


def test_an_idempotent_producer_may_skip_sequences_at_a_node_and_is_still_promised_offsets(
    config: LogstoreConfig,
) -> None:
    # One sequence per request, increasing per topic: the ones a node does not see went to other partitions
    # or other leaders. The node takes the gap; a retry waits for the writer, which answers the original offsets.
    store = LogStore(config)
    store.create_topic("t", 2)
    broker = Broker(config)

    def request(seq: int) -> ParsedRecords:
        return parse_produce(
            b'{"records": [{"key": "k", "value": "v%d"}], "producer_id": "p", "sequence": %d}' % (seq, seq)
        )

    try:
        pipeline = broker.pipeline("t")
        first = pipeline.submit(request(0), "1")
        assert first.promised is None  # new to this node on its partition: the writer decides
        at = first.committed.result(timeout=30).offsets.to_pylist()
        skipped = pipeline.submit(request(3), "1")
        assert skipped.promised is not None and skipped.promised.tolist() == [at[0] + 1]
        assert skipped.committed.result(timeout=30).offsets.to_pylist() == [at[0] + 1]
        retry = pipeline.submit(request(0), "1")
        assert retry.promised is None
        again = retry.committed.result(timeout=30)
        assert again.duplicate and again.offsets.to_pylist() == at
    finally:
        broker.close()
    assert sum(len(v) for v in assert_gap_free(store.catalog, "t").values()) == 2
