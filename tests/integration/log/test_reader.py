"""A fetch reads about max_bytes, not max_records' worth: its peak memory, measured in a fresh interpreter."""

import os
import subprocess
import sys
from collections.abc import Callable

from logstore.log.schema import input_table
from logstore.store import LogStore
from logstore.structs import ProducerBatch


def test_fetch_reads_about_max_bytes_not_max_records(store: LogStore, make_topic: Callable[..., str]) -> None:
    t = make_topic()
    value = 1024 * 1024 - 100
    store.append(t, [ProducerBatch(input_table([0] * 50, [os.urandom(value) for _ in range(50)]))])
    # A fresh process, so the memory pool's peak is this fetch's alone (writing the records set ours).
    script = (
        "import sys, pyarrow as pa\n"
        "from logstore.config import load_config\n"
        "from logstore.store import LogStore\n"
        "store = LogStore(load_config(environ={}, path=None, overrides={'logstore.root': sys.argv[1]}))\n"
        "r = store.fetch(sys.argv[2], 0, 0)\n"  # defaults: max_bytes 1 MiB, max_records 500
        "print(len(r.records), pa.default_memory_pool().max_memory())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, store.config.root, t], capture_output=True, text=True, check=True
    ).stdout.split()
    records, peak = int(out[0]), int(out[1])
    assert records == 1
    assert peak < 16 * 1024 * 1024, f"one fetch of 1 record allocated {peak} bytes"  # was > 100 MiB
