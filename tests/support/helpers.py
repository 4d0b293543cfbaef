"""Assertions shared by the writer, crash and interop tests."""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa

from logstore.client.message import Message
from logstore.log.catalog import Catalog
from logstore.log.files import data_files, read_parquet


def read_topic(catalog: Catalog, topic: str) -> pa.Table:
    """Every live record of ``topic`` at its newest version, sorted by (partition, offset)."""
    dt = catalog.table(topic)
    tables = []
    for f in data_files(dt):
        t = read_parquet(f.path, columns=["offset", "value"])
        t = t.append_column("partition", pa.repeat(pa.scalar(f.partition, pa.int32()), len(t)))
        tables.append(t.select(["partition", "offset", "value"]))
    if not tables:
        return pa.table({"partition": pa.array([], pa.int32()), "offset": pa.array([], pa.int64()), "value": []})
    return pa.concat_tables(tables, promote_options="permissive").sort_by(
        [("partition", "ascending"), ("offset", "ascending")]
    )


def assert_gap_free(catalog: Catalog, topic: str) -> dict[int, list[bytes]]:
    """Every partition holds exactly offsets 0..n-1; returns partition → values in offset order."""
    data = read_topic(catalog, topic)
    out: dict[int, list[bytes]] = {}
    for p in sorted(set(data["partition"].to_pylist())):
        rows = data.filter(pa.compute.equal(data["partition"], p))
        offsets = rows["offset"].to_pylist()
        assert offsets == list(range(len(offsets))), f"partition {p} offsets are not 0..n-1: {offsets[:20]}…"
        out[p] = rows["value"].to_pylist()
    return out


class Landed(NamedTuple):
    """Where a delivery report says a record landed (topic, partition, offset): comparable in assertions."""

    topic: str
    partition: int
    offset: int


def landed(msg: Message) -> Landed | None:
    """A producer delivery report's message as :class:`Landed`; None for a record that failed."""
    return None if msg.error() is not None else Landed(msg.topic(), msg.partition(), msg.offset())
