"""Codec benchmark: bytes on disk per record and produce/consume throughput for each ``compression.type``.

Prints one JSON document. For each codec (``uncompressed``, ``gzip``,
``snappy``, ``lz4``, ``zstd``) it creates a fresh topic with that
``compression.type``, writes ``--records`` records in commits of
``--per-commit`` through the core's writer (:func:`harness.timed_appends`: the
node's commit path, where the codec's CPU is spent) and reads them back from
the start with fetches of ``--fetch-records`` (the reader's path, where
decompression is spent). Per codec, the medians over ``--runs`` runs of:

* ``bytes_per_record``: the topic's data files on disk / records;
* ``produce_records_per_s`` and ``produce_cpu_us_per_record`` (this process's CPU, fsyncs not included);
* ``consume_records_per_s`` and ``consume_cpu_us_per_record``;
* ``encode_us_per_record`` and ``decode_us_per_record``: the codec alone — this thread's CPU to write the
  commits' records as Parquet in memory and to read them back, the fastest of ``--repeats`` passes (the
  figure least disturbed by other load on the machine);

and ``vs_uncompressed``: each figure over ``uncompressed``'s (bytes < 1 is smaller files; records/s < 1 slower).

Values (``--values``): ``json`` — event-like JSON documents of about 150
bytes with repeating field names and a few hundred distinct users, pages and
events, as application logs are; ``random`` — incompressible bytes, what every
codec can only cost. Keys are a user id (``json``) or null (``random``).
HTTP parsing costs the same whatever the codec, so it is left out.

Run: ``.venv/bin/python bench/compression.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from harness import emit, load_average, machine, median_of, open_store, records, storage, timed_appends

from logstore.log.compression import parquet_codec
from logstore.log.schema import input_table
from logstore.store import LogStore

CODECS = ("uncompressed", "gzip", "snappy", "lz4", "zstd")
_PAGES = ("/", "/cart", "/checkout", "/search", *(f"/products/{i}" for i in range(200)))
_EVENTS = ("view", "click", "add_to_cart", "purchase", "scroll", "login", "logout")


def json_values(n: int, rng: np.random.Generator) -> tuple[pa.Array, pa.Array]:
    """``n`` event-like JSON values and their keys (the user id)."""
    users = rng.integers(0, 500, n)
    pages = rng.integers(0, len(_PAGES), n)
    events = rng.integers(0, len(_EVENTS), n)
    amounts = rng.integers(0, 100_000, n)
    start = 1_700_000_000_000
    values = [
        orjson.dumps(
            {
                "user": f"user-{u}",
                "event": _EVENTS[e],
                "page": _PAGES[p],
                "ts": start + i * 7,
                "amount": int(a) / 100,
                "session": f"s-{u * 31 + i // 1000:08x}",
            }
        )
        for i, (u, p, e, a) in enumerate(
            zip(users.tolist(), pages.tolist(), events.tolist(), amounts.tolist(), strict=True)
        )
    ]
    return pa.array(values, pa.binary()), pa.array([f"user-{u}".encode() for u in users], pa.binary())


def batches(kind: str, total: int, per_commit: int) -> list[pa.Table]:
    """The commits of one run, the same for every codec (seeded)."""
    rng = np.random.default_rng(7)
    out = []
    for start in range(0, total, per_commit):
        n = min(per_commit, total - start)
        if kind == "random":
            out.append(records(n, rng=rng))
        else:
            values, keys = json_values(n, rng)
            out.append(input_table(pa.array(np.zeros(n, np.int32)), values, keys=keys))
    return out


def run(store: LogStore, codec: str, commits: list[pa.Table], fetch_records: int) -> dict[str, float]:
    """One codec's figures over a fresh topic."""
    topic = f"t-{codec}"
    store.create_topic(topic, 1, {"compression.type": codec})
    writer = store.writer(topic)
    total = sum(len(c) for c in commits)
    cpu0, t0 = time.process_time(), time.perf_counter()
    timed_appends(writer, len(commits), lambda i: commits[i])
    produce_s, produce_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    size = sum(p.size_bytes for p in store.describe_topic(topic).partitions)
    cpu0, t0 = time.process_time(), time.perf_counter()
    offset = read = 0
    while offset < total:
        got = store.fetch(topic, 0, offset, max_records=fetch_records, max_bytes=64 << 20).records
        read += got.nbytes  # touch every column: a consumer decodes what it is given
        offset = got["offset"][-1].as_py() + 1
    consume_s, consume_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {
        "bytes_per_record": size / total,
        "produce_records_per_s": total / produce_s,
        "produce_cpu_us_per_record": produce_cpu / total * 1e6,
        "consume_records_per_s": total / consume_s,
        "consume_cpu_us_per_record": consume_cpu / total * 1e6,
    }


def codec_alone(codec: str, commits: list[pa.Table], repeats: int) -> dict[str, float]:
    """CPU (this thread) per record to encode ``commits`` as Parquet files in memory and decode them: the best pass."""
    compression = parquet_codec(codec, "producer")  # type: ignore[arg-type]
    tables = [c.drop_columns(["partition"]) for c in commits]
    total = sum(len(t) for t in tables)
    encode, decode = [], []
    for _ in range(repeats):
        t0 = time.thread_time()
        files = []
        for t in tables:
            buf = io.BytesIO()
            pq.write_table(t, buf, compression=compression)
            files.append(buf.getvalue())
        t1 = time.thread_time()
        for f in files:
            pq.read_table(pa.BufferReader(f), use_threads=False)
        encode.append(t1 - t0)
        decode.append(time.thread_time() - t1)
    return {"encode_us_per_record": min(encode) / total * 1e6, "decode_us_per_record": min(decode) / total * 1e6}


def ratios(figures: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each codec's figures over ``uncompressed``'s."""
    base = figures["uncompressed"]
    return {c: {k: round(v / base[k], 3) for k, v in f.items()} for c, f in figures.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each codec (medians)")
    ap.add_argument("--records", type=int, default=500_000, help="records per run")
    ap.add_argument("--per-commit", type=int, default=1_000, help="records per commit (one produce request's)")
    ap.add_argument("--fetch-records", type=int, default=10_000, help="records per fetch when reading back")
    ap.add_argument("--values", choices=["json", "random"], default="json")
    ap.add_argument("--codecs", default=",".join(CODECS), help="comma list (uncompressed is always run)")
    ap.add_argument("--no-fsync", action="store_true", help="commit.fsync=false: the codec's cost stands out")
    ap.add_argument("--repeats", type=int, default=5, help="passes of the codec-alone figures (the fastest counts)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.records = 1, 50_000
    codecs = ["uncompressed", *(c for c in args.codecs.split(",") if c and c != "uncompressed")]
    commits = batches(args.values, args.records, args.per_commit)
    value_bytes = sum(c["value"].nbytes for c in commits) / args.records
    out: dict[str, object] = {
        "machine": machine(),
        "storage": storage(tempfile.gettempdir()),
        "records": args.records,
        "per_commit": args.per_commit,
        "values": args.values,
        "value_bytes_mean": round(value_bytes, 1),
        "commit_fsync": not args.no_fsync,
        "runs": args.runs,
    }
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in codecs}
    with tempfile.TemporaryDirectory() as d:  # a warm-up, not counted: imports, first reader, page cache
        run(open_store(d, {"commit.fsync": not args.no_fsync}), "snappy", commits[:50], args.fetch_records)
    for _ in range(args.runs):
        for codec in codecs:  # interleaved, so drift over the run touches every codec alike
            with tempfile.TemporaryDirectory() as d:
                store = open_store(d, {"commit.fsync": not args.no_fsync})
                runs[codec].append(run(store, codec, commits, args.fetch_records))
    figures: dict[str, dict[str, float]] = {c: median_of(r) for c, r in runs.items()}
    for codec in codecs:
        alone = codec_alone(codec, commits, args.repeats)
        figures[codec] |= {k: round(v, 3) for k, v in alone.items()}
    out["codecs"] = {c: {k: round(v) if k.endswith("_per_s") else v for k, v in f.items()} for c, f in figures.items()}
    out["vs_uncompressed"] = ratios(figures)
    out["load_average_end"] = load_average()
    out["storage_end"] = storage(tempfile.gettempdir())
    emit(out)


if __name__ == "__main__":
    main()
