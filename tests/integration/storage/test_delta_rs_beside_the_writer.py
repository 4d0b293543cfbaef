"""delta-rs and logstore's own commit path write one topic table at once, on a local and on an s3:// root.

On S3 both commit with ``If-None-Match: *`` on ``_delta_log/<version>.json``: whoever loses a version re-reads
and commits at the next one. The writer appends to partitions 0 and 1 while delta-rs appends its own records to
partition 2 (``write_deltalake``) and rewrites files (``optimize.compact``). Afterwards every record of both is
there once, and every partition's offsets are 0..n-1.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from logstore.log.schema import TOPIC_SCHEMA, input_table
from logstore.log.writer import TopicWriter
from logstore.storage import storage_for
from logstore.store import LogStore
from logstore.structs import AppendResult, ProducerBatch
from tests.support.helpers import assert_gap_free

ROUNDS = 30


def _foreign_rows(first: int, n: int) -> pa.Table:
    """``n`` records of partition 2 at offsets ``first``.., as another engine writes them."""
    now = dt.datetime.now(dt.UTC)
    return pa.table(
        {
            "partition": pa.array([2] * n, pa.int32()),
            "offset": pa.array(range(first, first + n), pa.int64()),
            "timestamp": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
            "timestamp_type": pa.array([0] * n, pa.int32()),
            "key": pa.array([None] * n, pa.binary()),
            "value": pa.array([f"rs{first + i}".encode() for i in range(n)], pa.binary()),
            "headers": pa.array([[]] * n, TOPIC_SCHEMA.field("headers").type),
        },
        schema=TOPIC_SCHEMA,
    )


def test_delta_rs_and_the_writer_commit_to_one_table_at_once(store: LogStore, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=3)
    path = store.catalog.topic_path(topic)
    options = storage_for(path).delta_options or None
    writer = TopicWriter(store.catalog, topic)
    errors: list[BaseException] = []

    def own_path() -> None:
        try:
            for i in range(ROUNDS):
                (result,) = writer.append([ProducerBatch(input_table([0, 1, 0], [b"a%d" % i, b"b%d" % i, b"c%d" % i]))])
                assert isinstance(result, AppendResult), result
        except BaseException as e:  # the thread's failure fails the test
            errors.append(e)

    def delta_rs() -> None:
        try:
            written = 0
            for i in range(ROUNDS):
                try:
                    if i % 3 == 2:
                        DeltaTable(path, storage_options=options).optimize.compact()
                    else:
                        write_deltalake(path, _foreign_rows(written, 2), mode="append", storage_options=options)
                        written += 2
                except CommitFailedError:
                    continue  # delta-rs lost a race it cannot resolve itself: nothing of it landed; go on
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=own_path), threading.Thread(target=delta_rs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    values = assert_gap_free(store.catalog, topic)
    assert values[0] == [v for i in range(ROUNDS) for v in (b"a%d" % i, b"c%d" % i)]
    assert values[1] == [b"b%d" % i for i in range(ROUNDS)]
    assert values[2] == [b"rs%d" % i for i in range(len(values[2]))] and len(values[2]) >= 2
    writer.close()
