"""Property-based: many committers, epoch changes and injected failures never break the log.

Hypothesis drives a random schedule over one topic: several writers (leaders
that claim new epochs, cooperative writers that join the current one) append
random batches over random partitions, each holding a snapshot that other
writers' commits make stale. Commits fail by injection — before the write (an
I/O error), after it (the acknowledgement is lost) or right after the commit
file's link (the outcome is in doubt until read back) — and idempotent
producers retry. Afterwards every partition holds exactly offsets 0..n-1, no
record twice, and every acknowledged record where its acknowledgement said.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logstore.config import load_config
from logstore.errors import FencedLeaderEpochError, KafkaStorageError
from logstore.log.catalog import Catalog
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.structs import AppendResult, ProducerBatch
from tests.support.helpers import assert_gap_free

PARTITIONS = 4


class FaultyWriter(TopicWriter):
    """A real writer whose commits can be made to fail before or after the Delta commit."""

    fault: str | None = None

    def _commit(self, planned):  # type: ignore[no-untyped-def]
        fault, self.fault = self.fault, None
        if fault == "before":
            raise OSError("injected: disk went away before the commit")
        if fault == "in-doubt":
            self._fail_after_link(2)  # the sync after the link, and the read-back's, fail
        result = super()._commit(planned)
        if fault == "after":
            raise OSError("injected: acknowledgement lost after the commit")
        return result

    def _fail_after_link(self, times: int) -> None:
        appender = self._appender
        left = [times]

        def failing() -> None:
            left[0] -= 1
            if not left[0]:
                del appender._after_link  # type: ignore[method-assign]
            raise OSError(5, "injected: I/O error after the commit file was linked")

        appender._after_link = failing  # type: ignore[method-assign]


step = st.one_of(
    st.tuples(
        st.just("append"),
        st.integers(0, 3),
        st.lists(st.integers(0, PARTITIONS - 1), min_size=1, max_size=6),
        st.sampled_from([None, "before", "after", "in-doubt"]),
    ),
    st.tuples(st.just("claim"), st.integers(0, 3)),
    st.tuples(st.just("join"), st.integers(0, 3)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=30))
def test_random_schedules_keep_every_partition_gap_free(schedule: list[tuple]) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as tmp:
        catalog = Catalog(load_config(environ={}, overrides={"logstore.root": tmp}))
        catalog.create_topic("t", PARTITIONS)
        writers: dict[int, FaultyWriter] = {0: FaultyWriter(catalog, "t")}
        fenced: set[int] = set()
        acked: dict[bytes, tuple[int, int]] = {}
        next_seq: dict[str, int] = {}
        ids = itertools.count()

        def produce(slot: int, parts: list[int], fault: str | None) -> None:
            w = writers[slot]
            pid = f"producer-{slot}"
            seq = next_seq.get(pid, 0)
            values = [f"r{next(ids)}".encode() for _ in parts]
            b = ProducerBatch(input_table(parts, values), pid, seq)
            w.fault = fault
            for _attempt in range(3):  # an idempotent producer retries until it hears back
                try:
                    (res,) = w.append([b])
                except KafkaStorageError:
                    continue
                except FencedLeaderEpochError:
                    fenced.add(slot)
                    return
                assert isinstance(res, AppendResult), res
                for v, p, o in zip(values, res.partitions.to_pylist(), res.offsets.to_pylist(), strict=True):
                    acked[v] = (p, o)
                next_seq[pid] = seq + 1
                return

        for op in schedule:
            if op[0] == "append":
                _, slot, parts, fault = op
                if slot in writers and slot not in fenced:
                    produce(slot, parts, fault)
            elif op[0] == "claim":
                # a new leader: every earlier leader becomes a zombie
                writers[op[1]] = FaultyWriter(catalog, "t")
                fenced.discard(op[1])
            else:
                writers[op[1]] = FaultyWriter(catalog, "t", join=True)
                fenced.discard(op[1])

        values = assert_gap_free(catalog, "t")
        stored = {v: (p, i) for p, vs in values.items() for i, v in enumerate(vs)}
        assert len(stored) == sum(len(vs) for vs in values.values()), "a record was written twice"
        for v, where in acked.items():
            assert stored.get(v) == where, f"acknowledged {v!r} at {where}, stored at {stored.get(v)}"


def test_threads_committing_at_once_stay_gap_free(tmp_path: object) -> None:
    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": str(tmp_path)}))
    catalog.create_topic("t", PARTITIONS)
    writers = [TopicWriter(catalog, "t", join=i > 0) for i in range(3)]
    acked: list[tuple[bytes, int, int]] = []
    lock = threading.Lock()
    rng = np.random.default_rng(7)
    plans = [[rng.integers(0, PARTITIONS, size=rng.integers(1, 50)).tolist() for _ in range(15)] for _ in writers]

    def run(i: int, w: TopicWriter, plan: list[list[int]], out: Callable[[list[tuple[bytes, int, int]]], None]) -> None:
        for j, parts in enumerate(plan):
            values = [f"w{i}-{j}-{k}".encode() for k in range(len(parts))]
            (res,) = w.append([ProducerBatch(input_table(pa.array(parts, pa.int32()), values))])
            assert isinstance(res, AppendResult)
            out(list(zip(values, res.partitions.to_pylist(), res.offsets.to_pylist(), strict=True)))

    def collect(rows: list[tuple[bytes, int, int]]) -> None:
        with lock:
            acked.extend(rows)

    threads = [threading.Thread(target=run, args=(i, w, plans[i], collect)) for i, w in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    values = assert_gap_free(catalog, "t")
    stored = {v: (p, i) for p, vs in values.items() for i, v in enumerate(vs)}
    assert len(acked) == sum(len(p) for plan in plans for p in plan) == len(stored)
    for v, p, o in acked:
        assert stored[v] == (p, o)
