"""Consumer groups on the Spark source, the stream reader alone: a query that lost its lease cannot move the
group's offsets back (queries on the session are in ``tests/integration/spark/test_spark_groups.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from logstore.errors import GroupSubscribedToTopicError
from logstore.groups.leases import GroupLease
from logstore.store import LogStore
from spark_source._options import SourceOptions
from spark_source._planner import split_ids
from spark_source.source import LogstoreStreamReader
from tests.support.spark_helpers import committed, produce


def test_a_query_that_lost_its_lease_cannot_move_the_group_back(
    store: LogStore, make_topic: Callable[..., str]
) -> None:
    t = make_topic(partitions=1)
    produce(store, t, [0] * 5)
    options = {"subscribe": t, "group": "g", "startingOffsets": "earliest", "logstore.root": store.config.root}
    stale = LogstoreStreamReader(SourceOptions.parse(options, streaming=True))
    assert split_ids(stale.initialOffset())[0] == {t: {"0": 0}}  # holds the lease now
    # It stalls past its lease's expiry; another query of the group takes over and reads on.
    later = GroupLease(store.config.root, "g", clock_ms=lambda: time.time_ns() // 1_000_000 + 3_600_000)
    later.acquire({t})
    later.release()  # stops its heartbeat; the topic is free again, but no longer the stale query's
    store.commit_offsets("g", t, {0: 5})
    with pytest.raises(GroupSubscribedToTopicError, match=f"lost topic '{t}'"):
        stale.commit({t: {"0": 2}})
    with pytest.raises(GroupSubscribedToTopicError):
        stale.latestOffset({t: {"0": 3}}, ReadAllAvailable())
    assert committed(store, "g", t) == {0: 5}
    stale.stop()
