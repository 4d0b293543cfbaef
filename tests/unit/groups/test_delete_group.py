"""Deleting a consumer group: its rows leave ``_offsets`` (also from a file shared with other groups), the others
stay, and a group a reader holds a lease of is refused with NON_EMPTY_GROUP."""

from collections.abc import Callable

import pytest
from deltalake import DeltaTable

from logstore.errors import GroupIdNotFoundError, NonEmptyGroupError
from logstore.groups.leases import GroupLease
from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch
from maintenance.offsets import run_offsets_compaction


def test_a_deleted_group_leaves_the_table_and_the_others_stay(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic(partitions=2)
    store.append(t, [ProducerBatch(input_table([0, 1], [b"a", b"b"]))])
    for group in ("g", "it's", "h"):
        store.commit_offsets(group, t, {0: 1, 1: 1})
    run_offsets_compaction(store.config.root, keep=1, progress=lambda *_: None)
    assert len(DeltaTable(store.offsets.path).file_uris()) == 1  # every group's rows in one file: a rewrite

    store.delete_group("it's")
    store.delete_group("g")
    assert store.list_groups() == ["h"]
    assert {r.partition: r.committed_offset for r in store.describe_group("h")} == {0: 1, 1: 1}
    with pytest.raises(GroupIdNotFoundError):
        store.delete_group("g")
    store.commit_offsets("g", t, {0: 0})  # the name starts over
    assert store.committed("g", t)[("g", t, 0)].offset == 0


def test_a_group_a_reader_holds_is_not_deleted(store: LogStore, make_topic: Callable[..., str]) -> None:
    t, u = make_topic(), make_topic()
    store.append(u, [ProducerBatch(input_table([0], [b"a"]))])
    store.commit_offsets("g", t, {0: 0})
    store.commit_offsets("g", u, {0: 1})
    reader = GroupLease(store.config.root, "g")
    reader.acquire({u})
    try:
        with pytest.raises(NonEmptyGroupError, match="not empty"):
            store.delete_group("g")
    finally:
        reader.release()
    assert store.list_groups() == ["g"]
    store.delete_group("g")  # the refused attempt left no lease of t behind
    assert store.list_groups() == []
