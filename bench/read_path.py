"""Read-path benchmark: what a reader pays to catch up with a topic that moved, beside delta-rs's own refresh.

A streaming query's ``latestOffset`` and every HTTP fetch first bring the
reader's snapshot to the table's newest version. This writes ``--new`` commits
of ``--records`` records (the core writer, 4 partitions) between two looks and
times, per look (median and max of ``--looks``, in ms):

* ``reader``: ``TopicReader.refresh()`` plus every partition view — what logstore
  does (it reads only the new commit files);
* ``delta_rs``: ``DeltaTable.update_incremental()`` of a handle kept warm the same
  way — the delta-rs refresh the reader used before, which replays every commit
  since the last checkpoint (``--checkpoint-interval``).

Prints one JSON document with both and their ratio per ``--new`` count.

Run: ``.venv/bin/python bench/read_path.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from deltalake import DeltaTable
from harness import emit, open_store, records, summary_ms

from logstore.log.reader import TopicReader
from logstore.log.writer import TopicWriter
from logstore.structs import ProducerBatch

PARTITIONS = 4


def measure(root: str, new: int, looks: int, records_per_commit: int, checkpoint_interval: int) -> dict[str, object]:
    store = open_store(os.path.join(root, str(new)), {"checkpoint.interval": checkpoint_interval})
    store.create_topic("t", PARTITIONS)
    writer = TopicWriter(store.catalog, "t")
    batch = [ProducerBatch(records(records_per_commit, partitions=PARTITIONS))]
    reader = TopicReader(store.catalog, "t")
    handle = DeltaTable(store.catalog.topic_path("t"))
    ours, theirs = [], []
    for _ in range(looks):
        for _ in range(new):
            writer.append(batch)
        started = time.perf_counter()
        reader.refresh()
        for p in range(PARTITIONS):
            reader.partition_view(p)
        ours.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        handle.update_incremental()
        theirs.append((time.perf_counter() - started) * 1000)
    writer.close()
    return {
        "new_commits_per_look": new,
        "looks": looks,
        "table_version_at_end": handle.version(),
        "reader": summary_ms(ours, percentiles=(50,)),
        "delta_rs_update": summary_ms(theirs, percentiles=(50,)),
        "reader_over_delta_rs": round(statistics.median(ours) / statistics.median(theirs), 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--new", default="1,10,50", help="commits between two looks, comma-separated")
    p.add_argument("--looks", type=int, default=40)
    p.add_argument("--records", type=int, default=100, help="records per commit")
    p.add_argument("--checkpoint-interval", type=int, default=100, help="checkpoint.interval of the topic")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-read-path-") as root:
        runs = [measure(root, int(n), args.looks, args.records, args.checkpoint_interval) for n in args.new.split(",")]
    emit({"records_per_commit": args.records, "partitions": PARTITIONS, "runs": runs})


if __name__ == "__main__":
    main()
