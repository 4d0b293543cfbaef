"""The storage interface's primitives mean the same on a local directory and in an S3 bucket."""

from __future__ import annotations

import os

import boto3
import pytest

from logstore.storage import ObjectExists, PreconditionFailed, join, storage_for
from tests.support.azurite import service


def test_put_if_absent_creates_once_and_never_overwrites(root: str) -> None:
    storage = storage_for(root)
    where = join(root, "topics", "t", "_delta_log", "00000000000000000000.json")
    storage.put_if_absent(where, b"first")
    with pytest.raises(ObjectExists):
        storage.put_if_absent(where, b"second")
    assert storage.read(where) == b"first"


def test_replace_needs_the_entity_tag_it_read(root: str) -> None:
    storage = storage_for(root)
    where = join(root, "claims", "writer")
    tag = storage.put_if_absent(where, b"epoch 1")
    data, read_tag = storage.read_versioned(where)
    assert (data, read_tag) == (b"epoch 1", tag)
    new_tag = storage.replace(where, b"epoch 2", read_tag)
    with pytest.raises(PreconditionFailed):
        storage.replace(where, b"epoch 2 again", read_tag)  # a stale tag: someone replaced it since
    assert storage.read_versioned(where) == (b"epoch 2", new_tag)
    with pytest.raises(PreconditionFailed):
        storage.replace(join(root, "claims", "nobody"), b"x", new_tag)


def test_reads_lists_and_deletes(root: str) -> None:
    storage = storage_for(root)
    table = join(root, "topics", "t")
    for name in ("_topic_id", "_delta_log/00000000000000000000.json", "partition=0/part-1.parquet"):
        storage.put(join(table, name), name.encode())
    assert storage.read_range(join(table, "_topic_id"), 1, 3) == b"top"
    assert storage.list_names(table) == ["_delta_log", "_topic_id", "partition=0"]
    assert storage.list_names(join(root, "nothing")) == []
    assert storage.exists(join(table, "_delta_log")) and not storage.exists(join(table, "_offsets"))
    storage.delete(join(table, "_topic_id"))
    storage.delete(join(table, "_topic_id"))  # deleting what is gone is no error
    with pytest.raises(FileNotFoundError):
        storage.read(join(table, "_topic_id"))
    storage.delete_tree(table)
    assert storage.list_names(join(root, "topics")) == []


def _put_folder_marker(root: str, key: str) -> None:
    """An empty object named ``key`` (ending in ``/``), as Hadoop's and pyarrow's ``mkdir`` leave on object stores,
    written with the store's own SDK (logstore's locations drop a trailing slash)."""
    scheme, _, rest = root.partition("://")
    holder = rest.partition("/")[0]
    if scheme == "s3":
        boto3.client(
            "s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name=os.environ["AWS_REGION"]
        ).put_object(Bucket=holder, Key=key, Body=b"")
    else:
        service(os.environ["AZURITE_BLOB_STORAGE_URL"]).get_container_client(holder).upload_blob(key, b"")


@pytest.mark.parametrize("root", ["s3", "az"], indirect=True)
def test_deleting_a_tree_deletes_its_folder_markers(root: str) -> None:
    storage = storage_for(root)
    table = join(root, "topics", "t")
    storage.put(join(table, "partition=0/part-1.parquet"), b"rows")
    prefix = root.partition("://")[2].partition("/")[2]
    _put_folder_marker(root, f"{prefix}/topics/t/partition=0/")
    _put_folder_marker(root, f"{prefix}/topics/t/")

    storage.delete_tree(table)

    assert storage.list_names(join(root, "topics")) == [], "a folder marker outlived its deleted tree"
