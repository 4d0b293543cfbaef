"""The partition log writer: gap-free offsets, atomic group commits, fencing, idempotence."""

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from logstore.config import load_config
from logstore.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    InvalidTimestampError,
    KafkaStorageError,
    LogstoreError,
    MessageTooLargeError,
    OutOfOrderSequenceNumberError,
    UnknownTopicOrPartitionError,
)
from logstore.log import append as _log_append
from logstore.log.catalog import Catalog
from logstore.log.producer_state import PRODUCER_WINDOW
from logstore.log.schema import input_table
from logstore.log.tables import open_table
from logstore.log.writer import TopicWriter
from logstore.store import LogStore
from logstore.structs import AppendResult, ProducerBatch
from tests.support.helpers import assert_gap_free, read_topic


def batch(parts: list[int], tag: str = "v", pid: str | None = None, seq: int | None = None) -> ProducerBatch:
    return ProducerBatch(input_table(parts, [f"{tag}{i}".encode() for i in range(len(parts))]), pid, seq)


def ok(result: object) -> AppendResult:
    assert isinstance(result, AppendResult), result
    return result


def test_offsets_start_at_zero_and_count_up_per_partition(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=3)
    w = TopicWriter(store.catalog, t)
    r1 = ok(w.append([batch([0, 1, 0, 2, 0])])[0])
    r2 = ok(w.append([batch([0, 2])])[0])
    assert r1.offsets.to_pylist() == [0, 0, 1, 0, 2]
    assert r2.offsets.to_pylist() == [3, 1]
    assert [w.high_watermark(p) for p in range(3)] == [4, 1, 2]
    assert_gap_free(store.catalog, t)


def test_many_batches_over_many_partitions_are_one_commit(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=4)
    w = TopicWriter(store.catalog, t)
    before = w.table_version
    results = w.append([batch([0, 1], "a"), batch([2, 3, 0], "b"), batch([1], "c")])
    assert w.table_version == before + 1
    assert {ok(r).table_version for r in results} == {before + 1}
    assert [ok(r).offsets.to_pylist() for r in results] == [[0, 0], [0, 0, 1], [1]]


@pytest.mark.parametrize("keyed", [False, True], ids=["requests-to-one-partition-each", "with-a-keyed-request"])
def test_a_commit_writes_each_partitions_rows_in_offset_order(
    store: LogStore, make_topic: Callable[..., str], keyed: bool
) -> None:
    # Key-less requests each go to one partition, in any order; a keyed one spreads over several.
    t = make_topic(partitions=3)
    w = TopicWriter(store.catalog, t)
    batches = [batch([2] * 3, "a"), batch([0] * 2, "b"), batch([2, 1], "c")]
    if keyed:
        batches.insert(2, batch([1, 0, 2, 0, 1], "k"))
    before = w.table_version
    results = [ok(r) for r in w.append(batches)]
    assert w.table_version == before + 1

    expected: dict[int, list[tuple[int, bytes]]] = {}
    for b, r in zip(batches, results, strict=True):
        parts, values = b.records["partition"].to_pylist(), b.records["value"].to_pylist()
        for p, o, v in zip(parts, r.offsets.to_pylist(), values, strict=True):
            expected.setdefault(p, []).append((o, v))
    dt = DeltaTable(store.catalog.topic_path(t))
    files = {int(uri.split("partition=")[1].split("/")[0]): uri for uri in dt.file_uris()}
    assert len(files) == len(dt.file_uris())
    assert sorted(files) == sorted(expected)  # one file per partition
    for p, uri in files.items():
        got = pq.read_table(uri, columns=["offset", "value"]).to_pydict()
        assert list(zip(got["offset"], got["value"], strict=True)) == expected[p]
        assert [o for o, _ in expected[p]] == list(range(len(expected[p])))


def test_high_watermark_is_recovered_from_the_log(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    TopicWriter(store.catalog, t).append([batch([0, 0, 1])])
    w = TopicWriter(store.catalog, t)
    assert [w.high_watermark(0), w.high_watermark(1)] == [2, 1]
    ok(w.append([batch([0])])[0])
    assert_gap_free(store.catalog, t)


def test_zombie_is_fenced_and_table_unchanged(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    old = TopicWriter(store.catalog, t)
    ok(old.append([batch([0, 1])])[0])
    new = TopicWriter(store.catalog, t)
    assert new.epoch == old.epoch + 1
    version = open_table(store.catalog.topic_path(t)).version()
    with pytest.raises(FencedLeaderEpochError, match=f"epoch {old.epoch}"):
        old.append([batch([0, 1], "zombie")])
    assert open_table(store.catalog.topic_path(t)).version() == version
    ok(new.append([batch([0, 1], "new")])[0])
    values = assert_gap_free(store.catalog, t)
    assert values[0] == [b"v0", b"new0"]
    assert b"zombie0" not in values[0] + values[1]


def test_claiming_an_older_epoch_is_fenced(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    TopicWriter(store.catalog, t, epoch=5)
    with pytest.raises(FencedLeaderEpochError):
        TopicWriter(store.catalog, t, epoch=4)


def test_racing_committers_of_one_epoch_stay_gap_free(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    a = TopicWriter(store.catalog, t)
    b = TopicWriter(store.catalog, t, join=True)  # e.g. the Spark sink beside the ingest leader
    for i in range(5):
        ok(a.append([batch([0, 1], f"a{i}-")])[0])
        ok(b.append([batch([1, 0], f"b{i}-")])[0])  # b's snapshot is stale every time
    values = assert_gap_free(store.catalog, t)
    assert len(values[0]) == len(values[1]) == 10


def test_idempotent_retry_returns_original_offsets(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    w = TopicWriter(store.catalog, t)
    first = ok(w.append([batch([0, 1, 0], "x", "prod", 0)])[0])
    version = w.table_version
    again = ok(w.append([batch([0, 1, 0], "x", "prod", 0)])[0])
    assert again.duplicate and again.offsets.equals(first.offsets)
    assert w.table_version == version
    assert len(read_topic(store.catalog, t)) == 3


def test_idempotent_retry_after_restart(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=3)
    w = TopicWriter(store.catalog, t)
    results = [ok(w.append([batch([s % 3, 0], "x", "prod", s)])[0]) for s in range(PRODUCER_WINDOW + 2)]
    fresh = TopicWriter(store.catalog, t)  # a restart: no memory of the producer
    for s in range(2, PRODUCER_WINDOW + 2):
        again = ok(fresh.append([batch([s % 3, 0], "x", "prod", s)])[0])
        assert again.duplicate and again.offsets.equals(results[s].offsets)
    with pytest.raises(OutOfOrderSequenceNumberError, match="older than"):
        raise fresh.append([batch([0, 0], "x", "prod", 0)])[0]  # type: ignore[misc]
    nxt = ok(fresh.append([batch([0], "x", "prod", PRODUCER_WINDOW + 2)])[0])
    assert not nxt.duplicate
    assert_gap_free(store.catalog, t)


def test_sequence_below_the_partitions_last_is_rejected_alone(store: LogStore, make_topic: Callable[..., str]) -> None:
    # Sequences on a partition increase but need not be consecutive: the ones between went elsewhere.
    t = make_topic()
    w = TopicWriter(store.catalog, t)
    ok(w.append([batch([0], "x", "prod", 10)])[0])
    assert not ok(w.append([batch([0], "x", "prod", 12)])[0]).duplicate
    older, other = w.append([batch([0], "y", "prod", 11), batch([0], "z")])
    assert isinstance(older, OutOfOrderSequenceNumberError)
    assert "committed sequence 12" in older.message
    assert ok(other).offsets.to_pylist() == [2]


def test_retry_inside_one_group_commit(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    w = TopicWriter(store.catalog, t)
    a, b = w.append([batch([0, 0], "x", "prod", 0), batch([0, 0], "x", "prod", 0)])
    assert ok(b).duplicate and ok(b).offsets.equals(ok(a).offsets)
    assert len(read_topic(store.catalog, t)) == 2


def test_retry_with_different_records_is_rejected(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    w = TopicWriter(store.catalog, t)
    ok(w.append([batch([0, 0], "x", "prod", 0)])[0])
    (r,) = w.append([batch([0, 1], "x", "prod", 0)])
    assert isinstance(r, InvalidRequestError)


def test_bad_batches_fail_alone_and_write_nothing(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2, message_max_bytes=10)
    w = TopicWriter(store.catalog, t)
    big = ProducerBatch(input_table([0], [b"x" * 11]))
    headers = ProducerBatch(input_table([0], [b"x"], headers=[[("h", b"y" * 9)]]))
    wrong_part = batch([2])
    negative_ts = ProducerBatch(input_table([0], [b"x"], timestamps_ms=[-5]))
    good = batch([1])
    r = w.append([big, headers, wrong_part, negative_ts, good])
    assert isinstance(r[0], MessageTooLargeError) and "message.max.bytes=10" in r[0].message
    assert isinstance(r[1], MessageTooLargeError)
    assert isinstance(r[2], UnknownTopicOrPartitionError)
    assert isinstance(r[3], InvalidTimestampError)
    assert ok(r[4]).offsets.to_pylist() == [0]
    assert read_topic(store.catalog, t)["value"].to_pylist() == [b"v0"]


def test_timestamps_create_time_and_log_append_time(store: LogStore, make_topic: Callable[..., str]) -> None:
    create = make_topic()
    append = make_topic(message_timestamp_type="LogAppendTime")
    for t in (create, append):
        w = TopicWriter(store.catalog, t, clock_ms=lambda: 5_000)
        w.append([ProducerBatch(input_table([0, 0], [b"a", b"b"], timestamps_ms=[1_000, None]))])
    got = {t: store.fetch(t, 0, 0).records for t in (create, append)}
    ms = {t: got[t]["timestamp"].cast(pa.int64()).to_pylist() for t in got}
    assert ms[create] == [1_000_000, 5_000_000] and got[create]["timestamp_type"].to_pylist() == [0, 0]
    assert ms[append] == [5_000_000, 5_000_000] and got[append]["timestamp_type"].to_pylist() == [1, 1]


def test_headers_keys_and_tombstones_round_trip(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    store.append(
        t,
        [ProducerBatch(input_table([0, 0], [b"v", None], keys=[b"", None], headers=[[("h", b"1"), ("h", None)], []]))],
    )
    recs = store.fetch(t, 0, 0).records.to_pylist()
    assert [(r["key"], r["value"]) for r in recs] == [(b"", b"v"), (None, None)]
    assert recs[0]["headers"] == [{"key": "h", "value": b"1"}, {"key": "h", "value": None}]


def test_checkpoints_are_written_in_the_background(store: LogStore, tmp_path: object) -> None:
    import os

    from logstore.config import load_config
    from logstore.log.catalog import Catalog

    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": str(tmp_path), "checkpoint.interval": 5}))
    catalog.create_topic("t", 2)
    w = TopicWriter(catalog, "t")
    for i in range(12):
        ok(w.append([batch([i % 2])])[0])
    w.close()
    log = os.path.join(catalog.topic_path("t"), "_delta_log")
    assert any(n.endswith(".checkpoint.parquet") for n in os.listdir(log))
    fresh = TopicWriter(catalog, "t")  # reads from the checkpoint on
    assert [fresh.high_watermark(0), fresh.high_watermark(1)] == [6, 6]


def test_a_table_of_many_files_is_checkpointed_less_often(tmp_path: Path) -> None:
    # A checkpoint rewrites one action per data file: one of n actions waits n / 100 commits after the last,
    # so a table that gathers files between compactions does not spend ever more CPU per commit on them.
    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": str(tmp_path), "checkpoint.interval": 2}))
    catalog.create_topic("t", 60)
    w = TopicWriter(catalog, "t")
    log = Path(catalog.topic_path("t")) / "_delta_log"
    for _ in range(24):  # 60 files a commit: the checkpoint at version v holds ~60 v actions
        ok(w.append([batch(list(range(60)))])[0])
        w._appender.wait_for_checkpoints()
    w.close()
    made = sorted(int(n.name.split(".")[0]) for n in log.glob("*.checkpoint.parquet"))
    expected, last = [], None
    for v in range(2, 25, 2):  # at every interval, unless the newest checkpoint is too recent for its size
        if last is None or v - last >= (60 * last + 3) // 100:
            expected.append(v)
            last = v
    assert made == expected
    assert len(made) < 12  # every interval: versions 2, 4, ... 24
    assert TopicWriter(catalog, "t").high_watermark(59) == 24


def test_idle_writer_after_log_cleanup_commits_where_readers_look(tmp_path: Path) -> None:
    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": str(tmp_path)}))
    catalog.create_topic("t", 2)
    path = catalog.topic_path("t")
    idle = TopicWriter(catalog, "t")
    ok(idle.append([batch([0, 1], "idle-a")])[0])
    busy = TopicWriter(catalog, "t", join=True)  # e.g. the Spark sink, committing while the leader idles
    for i in range(6):
        ok(busy.append([batch([i % 2], f"busy{i}-")])[0])
    busy.close()
    # A checkpoint, then log cleanup with no retention: the JSON commits before the checkpoint go.
    dt = DeltaTable(path)
    dt.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    dt.create_checkpoint()
    dt.cleanup_metadata()
    assert not os.path.exists(os.path.join(path, "_delta_log", f"{idle.table_version + 1:020d}.json"))

    late = ok(idle.append([batch([1, 0], "idle-b")])[0])
    values = assert_gap_free(catalog, "t")
    stored = {v: (p, o) for p, vs in values.items() for o, v in enumerate(vs)}
    assert len(stored) == 2 + 6 + 2
    assert [stored[b"idle-b0"], stored[b"idle-b1"]] == list(
        zip(late.partitions.to_pylist(), late.offsets.to_pylist(), strict=True)
    )


def _racing_openers(catalog: Catalog, epoch: int | None) -> list[TopicWriter | BaseException]:
    """Two writers opened at the same moment: both read the table's epoch before either claims."""
    barrier = threading.Barrier(2)

    class Opener(TopicWriter):
        def _claim(self, **kwargs: bool) -> None:
            barrier.wait(timeout=30)
            super()._claim(**kwargs)

    out: list[TopicWriter | BaseException] = [RuntimeError("not run")] * 2

    def run(i: int) -> None:
        try:
            out[i] = Opener(catalog, "t", epoch=epoch)
        except BaseException as e:  # the thread's outcome is the test's to judge
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_writers_opened_at_once_never_share_an_epoch(tmp_path: Path) -> None:
    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": str(tmp_path)}))
    catalog.create_topic("t", 1)
    a, b = _racing_openers(catalog, None)
    assert isinstance(a, TopicWriter) and isinstance(b, TopicWriter)
    assert a.epoch != b.epoch
    old, new = sorted([a, b], key=lambda w: w.epoch)
    with pytest.raises(FencedLeaderEpochError):
        old.append([batch([0], "old")])
    ok(new.append([batch([0], "new")])[0])
    assert assert_gap_free(catalog, "t") == {0: [b"new0"]}


def test_coordinator_epoch_taken_by_a_racing_opener_is_fenced(tmp_path: Path) -> None:
    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": str(tmp_path)}))
    catalog.create_topic("t", 1)
    outcomes = _racing_openers(catalog, 7)
    leaders = [w for w in outcomes if isinstance(w, TopicWriter)]
    fenced = [e for e in outcomes if isinstance(e, FencedLeaderEpochError)]
    assert len(leaders) == 1 and len(fenced) == 1, outcomes
    ok(leaders[0].append([batch([0])])[0])


class _FlakyDirSync:
    """Makes the fsync of a table's ``_delta_log`` fail ``times`` times: the step after the commit file's link."""

    def __init__(self, log_dir: str, times: int) -> None:
        self.log_dir, self.left = log_dir, times
        self.real = _log_append.fsync_path

    def __call__(self, path: str) -> None:
        if path == self.log_dir and self.left:
            self.left -= 1
            raise OSError(5, "injected: I/O error syncing the log directory")
        self.real(path)


def test_error_after_the_link_does_not_fail_a_commit_that_landed(
    store: LogStore, make_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make_topic(partitions=2)
    w = TopicWriter(store.catalog, t)
    monkeypatch.setattr(
        _log_append, "fsync_path", _FlakyDirSync(os.path.join(store.catalog.topic_path(t), "_delta_log"), 1)
    )
    b = batch([0, 1, 0], "once")
    for _attempt in range(3):  # what the ingest committer does: retry on any LogstoreError
        try:
            (r,) = w.append([b])
            break
        except LogstoreError:
            continue
    assert ok(r).offsets.to_pylist() == [0, 0, 1]
    assert assert_gap_free(store.catalog, t) == {0: [b"once0", b"once2"], 1: [b"once1"]}


def test_commit_in_doubt_is_read_back_and_never_appended_twice(
    store: LogStore, make_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make_topic(partitions=2)
    w = TopicWriter(store.catalog, t)
    log_dir = os.path.join(store.catalog.topic_path(t), "_delta_log")
    monkeypatch.setattr(_log_append, "fsync_path", _FlakyDirSync(log_dir, 2))  # the sync and its retry fail
    b = batch([0, 1, 0], "once")
    with pytest.raises(KafkaStorageError):
        w.append([b])
    (r,) = w.append([b])  # the retry learns the first attempt landed
    assert ok(r).offsets.to_pylist() == [0, 0, 1]
    ok(w.append([batch([1], "next")])[0])
    assert assert_gap_free(store.catalog, t) == {0: [b"once0", b"once2"], 1: [b"once1", b"next0"]}


def test_losing_the_claim_race_to_a_data_commit_is_no_fencing(tmp_path: Path) -> None:
    catalog = Catalog(load_config(environ={}, overrides={"logstore.root": str(tmp_path)}))
    catalog.create_topic("t", 1)
    TopicWriter(catalog, "t", epoch=5)
    sink = TopicWriter(catalog, "t", join=True)

    class Restarted(TopicWriter):
        def _claim(self, **kwargs: bool) -> None:
            ok(sink.append([batch([0], "sink")])[0])  # takes the version this claim was about to create
            super()._claim(**kwargs)

    leader = Restarted(catalog, "t", epoch=5)  # the coordinator's epoch again, after a restart
    assert leader.epoch == 5
    ok(leader.append([batch([0], "leader")])[0])
    assert assert_gap_free(catalog, "t") == {0: [b"sink0", b"leader0"]}
