"""``compression.type`` end to end: topics made over HTTP and with the CLI write their codec into Parquet.

Each codec's topic holds column chunks of that codec; a config change reaches
the running node's writer and new files only; segment compaction rewrites with
the topic's current codec; records read back as they were sent.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq

from logstore.config import load_config
from logstore.log.catalog import Catalog
from logstore.log.files import data_files
from maintenance import run_segment_compaction
from tests.support.server import LOGSTORE, Server

# Kafka's name → the codec pyarrow reports for the column chunks (its LZ4 is Parquet's LZ4_RAW)
CODECS = {"uncompressed": "UNCOMPRESSED", "gzip": "GZIP", "snappy": "SNAPPY", "lz4": "LZ4", "zstd": "ZSTD"}


def codecs_of(root: Path, topic: str) -> list[set[str]]:
    """Per live data file, oldest first, the codecs of every column chunk of every row group."""
    catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": str(root)}))
    out = []
    for f in sorted(data_files(catalog.table(topic)), key=lambda f: f.min_offset):
        meta = pq.ParquetFile(f.path).metadata
        out.append(
            {
                meta.row_group(g).column(c).compression
                for g in range(meta.num_row_groups)
                for c in range(meta.num_columns)
            }
        )
    return out


def produce(c: httpx.Client, topic: str, values: list[str]) -> None:
    r = c.post(f"/v1/topics/{topic}/records", json={"records": [{"key": "k", "value": v} for v in values]})
    assert r.status_code == 200, r.text


def fetch_values(c: httpx.Client, topic: str) -> list[str]:
    r = c.get(f"/v1/topics/{topic}/partitions/0/records", params={"offset": 0, "max_records": 1000})
    assert r.status_code == 200, r.text
    return [rec["value"] for rec in r.json()["records"]]


def test_topics_made_over_http_write_their_codec(server: Callable[..., Server]) -> None:
    srv = server(**{"compression.type": "gzip"})  # the node's default, for topics without their own
    c = srv.client()
    values = [f"record {i} " + "x" * (i % 50) for i in range(200)]
    for name in [*CODECS, "default", "producer"]:
        config: dict[str, Any] = {} if name == "default" else {"compression.type": name}
        r = c.post("/v1/topics", json={"name": name, "partitions": 1, "config": config})
        assert r.status_code == 201, r.text
        produce(c, name, values)
        assert fetch_values(c, name) == values
    for name, codec in CODECS.items():
        assert codecs_of(srv.root, name) == [{codec}], name
    # no codec of its own, and an HTTP body carries none: the node's compression.type
    assert codecs_of(srv.root, "default") == [{"GZIP"}]
    assert codecs_of(srv.root, "producer") == [{"GZIP"}]
    topic = c.get("/v1/topics/zstd").json()
    assert topic["config"]["compression.type"] == "zstd"

    r = c.post("/v1/topics", json={"name": "bad", "partitions": 1, "config": {"compression.type": "brotli"}})
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_CONFIG", r.text
    assert "compression.type" in r.json()["message"] and "zstd" in r.json()["message"]

    # a change reaches the running writer and new files only
    r = c.patch("/v1/topics/snappy", json={"config": {"compression.type": "zstd"}})
    assert r.status_code == 200, r.text
    produce(c, "snappy", values)
    assert codecs_of(srv.root, "snappy") == [{"SNAPPY"}, {"ZSTD"}]
    r = c.patch("/v1/topics/snappy", json={"config": {"compression.type": "lz4"}})
    assert r.status_code == 200, r.text
    produce(c, "snappy", values)
    assert codecs_of(srv.root, "snappy") == [{"SNAPPY"}, {"ZSTD"}, {"LZ4"}]

    # segment compaction rewrites in the topic's current codec; every record reads back as it was
    catalog = Catalog(load_config(environ={}, path=None, overrides={"logstore.root": str(srv.root)}))
    (report,) = run_segment_compaction(catalog, "snappy", progress=lambda _: None)
    assert report.files_removed == 3 and report.files_added == 1
    assert codecs_of(srv.root, "snappy") == [{"LZ4"}]
    assert fetch_values(c, "snappy") == values * 3


def test_topics_made_with_the_cli_write_their_codec(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*LOGSTORE, "--root", str(tmp_path), *args], input=stdin, capture_output=True, text=True, env=env
        )

    r = run("topics", "create", "t", "--partitions", "1", "--config", "compression.type=brotli")
    assert r.returncode == 1 and "INVALID_CONFIG" in r.stderr and "compression.type" in r.stderr, r.stderr
    r = run("topics", "create", "t", "--partitions", "1", "--config", "compression.type=gzip")
    assert r.returncode == 0, r.stderr
    assert run("produce", "t", stdin="a\nb\n").returncode == 0
    r = run("topics", "alter", "t", "--config", "compression.type=zstd")
    assert r.returncode == 0, r.stderr
    assert "compression.type" in run("topics", "describe", "t").stdout
    assert run("produce", "t", stdin="c\n").returncode == 0
    assert codecs_of(tmp_path, "t") == [{"GZIP"}, {"ZSTD"}]
    r = run("consume", "t", "--from-beginning", "--max-messages", "3")
    assert r.stdout.split() == ["a", "b", "c"], r.stderr
