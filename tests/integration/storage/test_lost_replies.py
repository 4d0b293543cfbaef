"""A write to an object store (S3, Azure Blob) whose reply is lost on the way back: the object is stored, the
client retries the PUT, and the retry finds the object there (412, or 409 for a create on Azure) or no network
at all. Each writer must still learn that its own write landed — not take it for another writer's, nor report
it failed. The proxy in front of the S3 or Azure server (``lossy_root``) forwards the chosen request and then
drops its reply, or refuses connections."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logstore.config import load_config
from logstore.errors import KafkaStorageError, LogstoreError
from logstore.groups.leases import GroupLease
from logstore.log.schema import input_table
from logstore.log.wal import DirectoryLock, WriteAheadLog
from logstore.log.writer import TopicWriter
from logstore.storage import PreconditionFailed, join, storage_for
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from tests.support.lossy_proxy import LossyProxy, Rule


def test_wal_group_stored_with_its_reply_lost_is_acknowledged_once(lossy_root: tuple[str, LossyProxy]) -> None:
    root, proxy = lossy_root
    wal_dir = join(root, "_wal", "t")
    proxy.rules.append(Rule("PUT", r"\.wal$", "drop_reply"))
    wal = WriteAheadLog(wal_dir)
    number, logged = wal.append({"topic": "t"}, pa.table({"v": [1]}))
    logged.result(60)  # an acks=1 answer: a stored frame is not reported failed
    wal.committed_through(number)
    wal.close()
    assert [a for _m, _p, a in proxy.seen].count("drop_reply") == 1
    assert WriteAheadLog(wal_dir).recovered() == []  # committed and gone: nothing replayed twice


def test_commit_stored_with_its_reply_lost_then_no_network_is_not_reported_failed(
    lossy_root: tuple[str, LossyProxy],
) -> None:
    root, proxy = lossy_root
    store = LogStore(load_config(environ={}, path=None, overrides={"logstore.root": root}))
    store.create_topic("t", 1, {})
    writer = TopicWriter(store.catalog, "t")
    try:
        assert not isinstance(writer.append([ProducerBatch(input_table([0], [b"a"]), None, None)])[0], LogstoreError)
        # The next commit is stored but its reply lost; every retry of the PUT finds the connection closed.
        proxy.rules += [
            Rule("PUT", r"_delta_log/\d+\.json$", "drop_reply"),
            Rule("PUT", r"_delta_log/\d+\.json$", "refuse", 10),
        ]
        try:
            told: object = writer.append([ProducerBatch(input_table([0], [b"b"]), None, None)])[0]
        except LogstoreError as e:
            told = e
        proxy.rules.clear()
        if isinstance(told, LogstoreError):
            writer.append([ProducerBatch(input_table([0], [b"b"]), None, None)])  # a client told "failed" re-sends
    finally:
        writer.close()
    assert ("PUT", "refuse") in {(m, a) for m, _p, a in proxy.seen}
    assert _values_committed(join(root, "topics", "t")) == [b"a", b"b"]


def test_node_lock_stored_with_its_reply_lost_is_taken(lossy_root: tuple[str, LossyProxy]) -> None:
    root, proxy = lossy_root
    proxy.rules.append(Rule("PUT", r"node\.lock$", "drop_reply"))
    lock = DirectoryLock(join(root, "_wal"), "write-ahead log")
    assert orjson.loads(storage_for(lock.path).read(lock.path))["token"] == lock._token
    lock.release()
    assert not storage_for(lock.path).exists(lock.path)


def test_group_lease_stored_with_its_reply_lost_is_held(lossy_root: tuple[str, LossyProxy]) -> None:
    root, proxy = lossy_root
    proxy.rules.append(Rule("PUT", r"_groups/", "drop_reply"))
    lease = GroupLease(root, "g1", timeout_ms=60_000)
    try:
        lease.acquire(["orders"])
        assert lease.generation("orders") == 1
    finally:
        lease.release()
    assert [a for _m, _p, a in proxy.seen].count("drop_reply") == 1


def _values_committed(table: str) -> list[bytes]:
    """The values of every record the table's commits add, in commit order (read from the data files)."""
    storage = storage_for(table)
    log_dir = join(table, "_delta_log")
    values: list[bytes] = []
    for name in sorted(n for n in storage.list_names(log_dir) if n.endswith(".json")):
        for line in storage.read(join(log_dir, name)).splitlines():
            add = orjson.loads(line).get("add")
            if add:
                fs, path = storage.arrow(join(table, add["path"]))
                values += pq.read_table(path, filesystem=fs).column("value").to_pylist()
    return values


def test_commit_in_doubt_when_it_cannot_be_read_back_either_is_settled_by_the_retry(
    lossy_root: tuple[str, LossyProxy],
) -> None:
    root, proxy = lossy_root
    store = LogStore(load_config(environ={}, path=None, overrides={"logstore.root": root}))
    store.create_topic("t", 1, {})
    writer = TopicWriter(store.catalog, "t")
    try:
        writer.append([ProducerBatch(input_table([0], [b"a"]), None, None)])
        # Stored with its reply lost, then the store out of reach for the PUT's retries and for reading it back.
        refuse_all = [Rule(m, r"_delta_log/\d+\.json$", "refuse", 10) for m in ("PUT", "GET")]
        proxy.rules.append(Rule("PUT", r"_delta_log/\d+\.json$", "drop_reply", then=refuse_all))
        b = [ProducerBatch(input_table([0], [b"b"]), None, None)]
        with pytest.raises(KafkaStorageError, match="may or may not have landed"):
            writer.append(b)
        proxy.rules.clear()
        (again,) = writer.append(b)  # the same batches again: the read-back decides, nothing is written twice
        assert not isinstance(again, LogstoreError)
        assert again.offsets.to_pylist() == [1]
    finally:
        writer.close()
    assert _values_committed(join(root, "topics", "t")) == [b"a", b"b"]


def test_conditional_replace_stored_with_its_reply_lost_succeeds(lossy_root: tuple[str, LossyProxy]) -> None:
    root, proxy = lossy_root
    storage = storage_for(root)
    where = join(root, "claims", "writer")
    tag = storage.put_if_absent(where, b"epoch 1")
    proxy.rules.append(Rule("PUT", r"claims/writer$", "drop_reply"))
    new_tag = storage.replace(where, b"epoch 2", tag)
    assert storage.read_versioned(where) == (b"epoch 2", new_tag)
    with pytest.raises(PreconditionFailed):  # another writer's bytes are still a conflict
        storage.replace(where, b"epoch 3", tag)
