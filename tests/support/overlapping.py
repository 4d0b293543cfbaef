"""Files whose offset ranges overlap, as Delta's OPTIMIZE leaves them: the layout, built and checked.

A one-partition topic of ``FILES`` commits of ``PER_FILE`` records; :func:`optimize_like` rewrites the
``MERGED`` files into one with a commit shaped exactly like OPTIMIZE's (remove actions and one add of the
rewritten file, all ``dataChange=false``). No Spark here: the unit tier imports it too.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from logstore.log import file_changes, tables
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import ProducerBatch

HOUR_MS = 3600 * 1000
NOW_MS = 1_800_000_000_000
FILES = 10
PER_FILE = 10
N = FILES * PER_FILE
MERGED = [0, 2, 5]
"""The files OPTIMIZE rewrites into one: offsets [0, 9], [20, 29] and [50, 59] (non-adjacent)."""


def key_of(offset: int) -> bytes:
    return f"k{offset % 45}".encode()  # offsets 0..54 are superseded by offset + 45


def value_of(offset: int) -> bytes:
    return f"v{offset}".encode()


def write_files(store: LogStore, topic: str, ts_ms: Callable[[int], int]) -> None:
    """``FILES`` commits of ``PER_FILE`` records on partition 0; record ``o`` is stamped ``ts_ms(o)``."""
    w = TopicWriter(store.catalog, topic)
    for f in range(FILES):
        offsets = range(f * PER_FILE, (f + 1) * PER_FILE)
        batch = input_table(
            [0] * PER_FILE,
            [value_of(o) for o in offsets],
            keys=[key_of(o) for o in offsets],
            timestamps_ms=[ts_ms(o) for o in offsets],
        )
        w.append([ProducerBatch(batch)])


def optimize_like(store: LogStore, topic: str, picks: list[int]) -> None:
    """Commit what OPTIMIZE commits when it bins the (offset-ordered) files ``picks`` of partition 0 together."""
    dt = store.catalog.table(topic)
    files = file_changes.live_files(dt)[0]
    chosen = [files[i] for i in picks]
    data = pa.concat_tables([pq.read_table(f.path, schema=file_changes.FILE_SCHEMA) for f in chosen])
    merged = file_changes.write_segment(tables.table_path(dt), 0, data)
    file_changes.commit(dt, chosen, [merged], data_change=False, operation="OPTIMIZE")
    assert_interleaved(store, topic)


def layout(store: LogStore, topic: str) -> list[tuple[int, int]]:
    """Partition 0's live files as (min, max) offsets, by min offset."""
    return [(f.min_offset, f.max_offset) for f in file_changes.live_files(store.catalog.table(topic)).get(0, [])]


def overlapping(ranges: list[tuple[int, int]]) -> bool:
    """Whether some file holds an offset inside another file's [min, max] range."""
    return any(a_hi >= b_lo for (_, a_hi), (b_lo, _) in itertools.pairwise(sorted(ranges)))


def assert_interleaved(store: LogStore, topic: str) -> None:
    assert overlapping(layout(store, topic)), layout(store, topic)


def assert_disjoint(store: LogStore, topic: str) -> None:
    assert not overlapping(layout(store, topic)), layout(store, topic)


def fetch_all(store: LogStore, topic: str, start: int) -> list[int]:
    """Offsets a consumer reads from ``start`` to the high watermark, fetch by fetch."""
    got: list[int] = []
    pos = start
    while True:
        recs = store.fetch(topic, 0, pos, max_records=7).records
        if not len(recs):
            return got
        got += recs["offset"].to_pylist()
        assert recs["value"].to_pylist() == [value_of(o) for o in recs["offset"].to_pylist()]
        pos = got[-1] + 1
