"""A batch the committer cannot commit, over HTTP: the node refuses it or skips it, and the topic keeps working.

A record timestamp past year 9999 fits the parser's int64 but not a Delta
TIMESTAMP's statistics; it is refused at the door (400 ``INVALID_TIMESTAMP``).
At start-up a write-ahead log frame that cannot be committed is skipped and
counted, and the frames behind it are replayed. The committer thread's own
side is in ``tests/unit/node/test_committer.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from logstore.config import load_config
from logstore.log.schema import MAX_TIMESTAMP_MS
from logstore.log.wal import WriteAheadLog
from logstore.store import LogStore
from tests.support.server import Server
from tests.support.timestamps import YEAR_10000_MS, records


def test_timestamp_past_year_9999_is_400_and_the_topic_keeps_working(server: Callable[..., Server]) -> None:
    c = server().client()
    c.post("/v1/topics", json={"name": "t", "partitions": 1})
    for acks in ("1", "all"):
        r = c.post(
            "/v1/topics/t/records",
            params={"acks": acks},
            json={"records": [{"value": "late", "timestamp": YEAR_10000_MS}]},
        )
        assert r.status_code == 400 and r.json()["error_code"] == "INVALID_TIMESTAMP", r.text
    last = {"value": "last", "timestamp": MAX_TIMESTAMP_MS}
    r = c.post("/v1/topics/t/records", params={"acks": "all"}, json={"records": [last]}, timeout=10)
    assert r.status_code == 200 and r.json()["offsets"] == [{"partition": 0, "offset": 0}]
    got = c.get("/v1/topics/t/partitions/0/records", params={"offset": 0}).json()["records"]
    assert [(x["value"], x["timestamp"]) for x in got] == [("last", MAX_TIMESTAMP_MS)]


def test_a_poisoned_wal_frame_is_skipped_and_the_others_are_replayed(
    server: Callable[..., Server], tmp_path: Path
) -> None:
    root = tmp_path / "data"
    config = load_config(environ={}, overrides={"logstore.root": str(root)})
    LogStore(config).create_topic("t", 1)
    wal = WriteAheadLog(str(root / "_wal" / "t"))
    logged = [
        wal.append({"producer_id": "p", "sequence": 0}, records(["a"]))[1],
        wal.append({"producer_id": "p", "sequence": 1}, records(["poison"], YEAR_10000_MS))[1],
        wal.append({"producer_id": "p", "sequence": 2}, records(["b"]))[1],
    ]
    for f in logged:
        f.result(timeout=10)
    wal.close()

    srv = server(root)  # starts: the poisoned frame does not stop the replay
    c = srv.client()
    got = c.get("/v1/topics/t/partitions/0/records", params={"offset": 0}).json()["records"]
    assert [x["value"] for x in got] == ["a", "b"]
    metrics = c.get("/metrics").text
    assert 'logstore_wal_frames_skipped_total{topic="t"} 1.0' in metrics
    # The producer goes on after its skipped sequence.
    r = c.post("/v1/topics/t/records", json={"records": [{"value": "c"}], "producer_id": "p", "sequence": 3})
    assert r.status_code == 200 and r.json()["offsets"] == [{"partition": 0, "offset": 2}], r.text
