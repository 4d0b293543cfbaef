"""Spark's side of the benchmarks: sessions, timed reads, CPU, and end-to-end latency.

:func:`spark_session`, :func:`stream_seconds`, :func:`native_reads`,
:func:`stream_latency` and :func:`end_to_end` (the end-to-end latency of
``bench/consume.py`` and ``bench/vs_kafka.py``, measured alike on both sides).
Built on ``bench/harness.py`` (figures, servers) and ``bench/_http_load.py``
(the load that end-to-end latency is measured under).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
from _http_load import stamped_loop
from harness import TICKS_PER_S, LogstoreServer, cpu_ticks, summary_ms

# -- Spark --------------------------------------------------------------------------


def spark_session(master: str = "local[2]", **conf: str) -> Any:
    """A local Spark session with logstore's data sources, small shuffles, no UI, logging errors only."""
    from logstore.spark import session

    spark = session(
        **{
            "spark.master": master,
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.databricks.delta.snapshotPartitions": "2",
            **conf,
        }
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def phase_medians(
    progress: Sequence[Mapping[str, Any]], phases: Sequence[str] | None = None
) -> dict[str, float | None]:
    """The median of each phase Spark times (``durationMs`` of a query's progress reports), in ms.

    ``latestOffset``, ``queryPlanning``, ``walCommit`` (offset log), ``addBatch``
    (the job), ``commitOffsets`` (commit log), ``triggerExecution`` (all); every one
    any report has, unless ``phases`` names them. A report without a phase counts 0; ``None`` without reports.
    """
    names = phases if phases is not None else sorted({k for d in progress for k in d})
    return {k: float(statistics.median(d.get(k, 0) for d in progress)) if progress else None for k in names}


def stream_seconds(query: Any) -> tuple[int, float]:
    """Run a ``writeStream`` builder with ``availableNow``: rows read, seconds from start() to its end."""
    t0 = time.perf_counter()
    q = query.trigger(availableNow=True).start()
    q.awaitTermination()
    return sum(p["numInputRows"] for p in q.recentProgress), time.perf_counter() - t0


def batch_seconds(frame: Any) -> float:
    """Seconds to read ``frame`` whole into the ``noop`` sink."""
    t0 = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def logstore_stream(spark: Any, root: str, topic: str, **options: object) -> Any:
    """``readStream.format("logstore")`` of ``topic`` from earliest, with these source options."""
    reader = spark.readStream.format("logstore").option("logstore.root", root).option("subscribe", topic)
    for k, v in {"startingOffsets": "earliest", **options}.items():
        reader = reader.option(k, str(v))
    return reader.load()


def source_stream(spark: Any, root: str, topic: str, checkpoint: str, max_records: int | None = None) -> Any:
    """``topic`` from earliest through the `logstore` source into ``noop`` (a ``writeStream`` builder)."""
    options = {} if max_records is None else {"maxRecordsPerPartition": max_records}
    stream = logstore_stream(spark, root, topic, **options)
    return stream.writeStream.format("noop").option("checkpointLocation", checkpoint)


def spark_cpu_seconds(spark: Any) -> dict[str, float]:
    """CPU (user + system, seconds) used so far by Spark's JVM and by the processes it started, from /proc.

    ``jvm``: the driver's JVM, with a local master its executors too (planning, and
    the tasks' JVM side: a Python data source's Arrow batches made rows, Parquet
    decoded for Delta's reads); ``python``: the processes it started, living or
    ended — its Python workers (a data source's ``read``, a stream's planning
    worker). Only a local master's executors run on this machine.
    """
    jvm = spark.sparkContext._gateway.proc.pid
    parent: dict[int, int] = {}
    times: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):  # ended since it was listed
            parent[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            times[int(stat.parent.name)] = cpu_ticks(stat)

    def started_by_jvm(pid: int) -> bool:
        while pid in parent and pid != jvm:
            pid = parent[pid]
        return pid == jvm

    own = times[jvm]
    python = own[2] + own[3] + sum(sum(t) for pid, t in times.items() if pid != jvm and started_by_jvm(pid))
    return {"jvm": (own[0] + own[1]) / TICKS_PER_S, "python": python / TICKS_PER_S}


def measured(spark: Any, name: str, read: Callable[[], float]) -> dict[str, float]:
    """Run ``read`` (returning its seconds) → ``{name}_s``; its CPU → ``{name}_jvm_cpu_s``, ``{name}_python_cpu_s``.

    CPU is that of every process of :func:`spark_cpu_seconds` over the read, whatever else they did meanwhile.
    """
    before = spark_cpu_seconds(spark)
    seconds = read()
    after = spark_cpu_seconds(spark)
    return {
        f"{name}_s": seconds,
        f"{name}_jvm_cpu_s": round(after["jvm"] - before["jvm"], 2),
        f"{name}_python_cpu_s": round(after["python"] - before["python"], 2),
    }


def native_reads(spark: Any, root: str, topic: str, path: str, checkpoint: str) -> dict[str, float]:
    """Seconds (``{name}_s``) and CPU (:func:`measured`) of three reads of ``topic``'s table at ``path``.

    ``delta``: ``read.format("delta")`` into ``noop``, the limit; ``source_batch``:
    ``read.format("logstore")`` into ``noop``, the source's read path without a
    streaming query's start; ``delta_stream``: ``readStream.format("delta")`` with
    ``availableNow`` into ``noop``, Delta's own streaming source.
    """
    source_batch = spark.read.format("logstore").option("logstore.root", root).option("subscribe", topic).load()
    delta_stream = spark.readStream.format("delta").load(path).writeStream.format("noop")
    return {
        **measured(spark, "delta", lambda: batch_seconds(spark.read.format("delta").load(path))),
        **measured(spark, "source_batch", lambda: batch_seconds(source_batch)),
        **measured(
            spark, "delta_stream", lambda: stream_seconds(delta_stream.option("checkpointLocation", checkpoint))[1]
        ),
    }


def stream_latency(
    stream: Any,
    checkpoint: str,
    warm: Callable[[], None],
    produce: Callable[[float], int],
    *,
    trigger_ms: int,
    warmup_s: float,
) -> dict[str, Any]:
    """Latency from a record's CreateTime to ``foreachBatch`` seeing it, per record (:func:`summary_ms`).

    ``stream`` is a streaming DataFrame with a ``timestamp`` column; it runs with a
    ``trigger_ms`` processing-time trigger into ``foreachBatch``. ``warm()`` produces
    a record and the query reads it before the clock starts (its first batch starts
    what it needs: Python workers, connections). Then ``produce(start)`` produces
    (CreateTime = send time) and returns the records sent; records created in the
    first ``warmup_s`` seconds after ``start`` (``time.monotonic()``) are not counted.
    Used for both sides of ``bench/vs_kafka.py``, so both are measured alike.
    """
    seen: list[tuple[np.ndarray, float]] = []  # (CreateTime in ms, when foreachBatch saw it in ms)

    def collect(df: Any, _batch_id: int) -> None:
        ts = df.select("timestamp").toArrow().column(0).cast(pa.int64()).to_numpy()  # µs since the epoch
        seen.append((ts / 1000, time.time() * 1000))

    q = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )
    try:
        warm()
        q.processAllAvailable()
        seen.clear()
        start = time.monotonic()
        counted_from_ms = time.time() * 1000 + warmup_s * 1000
        sent = produce(start)
        q.processAllAvailable()
        progress = [p["durationMs"] for p in q.recentProgress if p["numInputRows"] > 0]
    finally:
        q.stop()
    created = np.concatenate([c for c, _ in seen])
    lat = np.concatenate([at - c for c, at in seen])[created >= counted_from_ms]
    return {
        "records_sent": sent,
        "records_seen": len(created),
        "records_counted": len(lat),
        "trigger_ms": trigger_ms,
        "warmup_s": warmup_s,
        **summary_ms(lat, digits=1),
        # The last micro-batches (Spark keeps ~100 progress reports) that read records.
        "micro_batch_p50_ms": phase_medians(progress),
    }


def end_to_end(
    spark: Any,
    root: str,
    seconds: float,
    trigger_ms: int,
    rate: int,
    warmup_s: float,
    per_request: int = 100,
    group: str | None = None,
    partitions: int = 2,
    read_on_driver: int = 0,
) -> dict[str, Any]:
    """Produce over HTTP → row seen in foreachBatch (:func:`stream_latency`), ``rate`` records/s into topic ``e2e``
    of ``partitions`` partitions, by a ``logstore serve`` over ``root``.

    With ``group`` the query reads as that consumer group (lease and offset commit every micro-batch). With
    ``read_on_driver``, the source's ``maxRecordsReadOnDriver``: micro-batches of at most that many records are
    read while Spark plans them, not in a Python task.

    Open loop (``_http_load.stamped_loop``, in a child process): requests of ``per_request`` records
    (acks=all, CreateTime = send time) leave on a fixed schedule at ``rate`` records/s whatever the
    answers' latency, for ``warmup_s`` + ``seconds``.
    """

    srv = LogstoreServer(Path(root), **{"linger.ms": 2}).start()
    try:
        srv.create_topic("e2e", partitions)

        def warm() -> None:
            ms = int(time.time() * 1000)
            httpx.post(srv.url + "/v1/topics/e2e/records", json={"records": [{"value": "x", "timestamp": ms}]})

        acks: dict[str, Any] = {}

        def produce(start: float) -> int:
            # From a child process, as Kafka's side produces from ProducerPerformance's JVM: senders in this
            # process would share its GIL with the driver's foreachBatch, which takes the measurement.
            remaining = max(0.0, start + warmup_s + seconds - time.monotonic())
            sent = stamped_loop(srv.url, "e2e", per_request, rate, remaining)
            acks.update({k: v for k, v in sent.items() if k.endswith("_ms")}, failed=sent["failed"])
            return int(sent["records"])

        options: dict[str, object] = {"maxRecordsReadOnDriver": read_on_driver}
        stream = logstore_stream(spark, root, "e2e", **options, **({"group": group} if group else {}))
        out = stream_latency(
            stream, os.path.join(root, "_e2e_checkpoint"), warm, produce, trigger_ms=trigger_ms, warmup_s=warmup_s
        )
    finally:
        srv.stop()
    named: dict[str, Any] = {"group": group} if group else {}
    if read_on_driver:
        named["max_records_read_on_driver"] = read_on_driver
    return {
        "rate_records_per_s": rate,
        "records_per_request": per_request,
        "partitions": partitions,
        **named,
        **out,
        "produce_ack_ms": acks,  # of the requests: until committed, a record is not there to be read
    }
