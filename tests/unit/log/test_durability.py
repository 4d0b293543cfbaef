"""What delta-rs writes is made durable, and a checkpoint torn by a power loss never makes a topic unopenable.

A test cannot cut the power, so the fsync tests record which paths the real
fsync is called on; the torn-checkpoint tests build what a power loss leaves
(an empty or cut-short checkpoint, an empty ``_last_checkpoint``) and open
the topic with logstore's reader and writer.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logstore.config import load_config
from logstore.groups.offsets import OffsetsStore
from logstore.log import _delta
from logstore.log import append as _log_append
from logstore.log.catalog import Catalog
from logstore.log.reader import TopicReader
from logstore.log.schema import input_table
from logstore.log.writer import TopicWriter
from logstore.structs import AppendResult, ProducerBatch
from tests.support.helpers import assert_gap_free


def _catalog(root: Path, **overrides: object) -> Catalog:
    return Catalog(load_config(environ={}, overrides={"logstore.root": str(root), **overrides}))


def _append(w: TopicWriter, parts: list[int], tag: str) -> AppendResult:
    (r,) = w.append([ProducerBatch(input_table(parts, [f"{tag}{i}".encode() for i in range(len(parts))]))])
    assert isinstance(r, AppendResult), r
    return r


class _Recorder:
    """Records the paths fsynced (and still fsyncs them)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.real = _delta.fsync_path

    def __call__(self, path: str) -> None:
        self.paths.append(path)
        self.real(path)


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    recorder = _Recorder()
    monkeypatch.setattr(_delta, "fsync_path", recorder)
    return recorder


@pytest.mark.parametrize("torn", ["empty checkpoint", "cut-short checkpoint", "empty pointer"])
def test_torn_newest_checkpoint_still_opens_with_every_record(tmp_path: Path, torn: str) -> None:
    catalog = _catalog(tmp_path, **{"checkpoint.interval": 5})
    catalog.create_topic("t", 2)
    w = TopicWriter(catalog, "t")
    for i in range(12):
        _append(w, [i % 2, 0], f"r{i}-")
    w.close()  # waits for the checkpoints requested at versions 5 and 10
    log_dir = os.path.join(catalog.topic_path("t"), "_delta_log")
    checkpoints = sorted(n for n in os.listdir(log_dir) if n.endswith(".checkpoint.parquet"))
    assert len(checkpoints) >= 2
    newest = os.path.join(log_dir, checkpoints[-1])
    if torn == "empty checkpoint":
        os.truncate(newest, 0)
    elif torn == "cut-short checkpoint":
        os.truncate(newest, os.path.getsize(newest) // 2)
    else:
        os.truncate(os.path.join(log_dir, "_last_checkpoint"), 0)

    reader = TopicReader(catalog, "t")
    assert len(reader.fetch(0, 0, max_records=100).records) == 18
    assert len(reader.fetch(1, 0, max_records=100).records) == 6
    again = TopicWriter(catalog, "t")
    assert [again.high_watermark(0), again.high_watermark(1)] == [18, 6]
    _append(again, [1], "after")
    values = assert_gap_free(catalog, "t")
    assert len(values[0]) == 18 and values[1][-1] == b"after0"


def test_writer_checkpoints_are_fsynced(tmp_path: Path, fsynced: _Recorder) -> None:
    catalog = _catalog(tmp_path, **{"checkpoint.interval": 5})
    catalog.create_topic("t", 1)
    w = TopicWriter(catalog, "t")
    for i in range(5):
        _append(w, [0], f"r{i}-")
    w.close()  # waits for the checkpoint requested at version 5
    log_dir = os.path.join(catalog.topic_path("t"), "_delta_log")
    (checkpoint,) = [n for n in os.listdir(log_dir) if n.endswith(".checkpoint.parquet")]
    assert os.path.join(log_dir, checkpoint) in fsynced.paths
    assert os.path.join(log_dir, "_last_checkpoint") in fsynced.paths
    assert fsynced.paths[-1] == log_dir


def test_topic_create_and_alter_commits_are_fsynced(tmp_path: Path, fsynced: _Recorder) -> None:
    catalog = _catalog(tmp_path)
    catalog.create_topic("t", 1)
    path = catalog.topic_path("t")
    log_dir = os.path.join(path, "_delta_log")
    assert set(fsynced.paths) == {
        os.path.join(log_dir, f"{0:020d}.json"),
        log_dir,
        path,
        catalog.topics_dir,
    }
    fsynced.paths.clear()
    catalog.alter_topic("t", partitions=3, config={"retention.ms": 1000})
    assert set(fsynced.paths) == {os.path.join(log_dir, f"{1:020d}.json"), log_dir}


def test_topic_commits_are_not_fsynced_when_commit_fsync_is_off(tmp_path: Path, fsynced: _Recorder) -> None:
    catalog = _catalog(tmp_path, **{"commit.fsync": False})
    catalog.create_topic("t", 1)
    catalog.alter_topic("t", partitions=2)
    assert fsynced.paths == []


def test_group_offset_commits_are_fsynced(tmp_path: Path, fsynced: _Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first commit creates the table through delta-rs; the later ones are made as topic commits are
    # (a data file, then a commit file written aside, fsynced by descriptor and linked into place).
    monkeypatch.setattr(_log_append, "fsync_path", fsynced)
    real_fsync = os.fsync

    def fsync_fd(fd: int) -> None:
        fsynced.paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_fd)
    offsets = OffsetsStore(str(tmp_path))
    for i in range(3):
        fsynced.paths.clear()
        offsets.commit("g", "t", {0: 5 + i})
        log_dir = os.path.join(offsets.path, "_delta_log")
        commit = os.path.join(log_dir, f"{i:020d}.json")
        written_aside = [p for p in fsynced.paths if os.path.basename(p).startswith(f".{i:020d}.json.")]
        assert commit in fsynced.paths or written_aside, fsynced.paths
        assert log_dir in fsynced.paths
        data = sorted({p for p in fsynced.paths if p.endswith(".parquet")})
        assert len(data) == 1 and os.path.dirname(data[0]).startswith(offsets.path)
        assert os.path.dirname(data[0]) in fsynced.paths


def test_a_partition_directory_made_by_a_commit_is_on_disk_before_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The table's directory entry of a new partition=N directory must survive a power loss like its files do.
    catalog = _catalog(tmp_path)
    catalog.create_topic("t", 2)
    w = TopicWriter(catalog, "t")
    recorder = _Recorder()
    monkeypatch.setattr(_log_append, "fsync_path", recorder)
    root = catalog.topic_path("t")
    _append(w, [0], "a")  # partition=0 is made: the table's directory holds a new entry
    assert root in recorder.paths  # was missing: only the files and partition=0 itself were fsynced
    assert os.path.join(root, "partition=0") in recorder.paths
    recorder.paths.clear()
    _append(w, [0], "b")  # no new directory: the table's is not fsynced again
    assert root not in recorder.paths
    w.close()
