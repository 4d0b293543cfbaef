"""Prometheus metrics of one ingest node (a registry per app, not a global)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """The node's metrics; ``registry`` is what ``/metrics`` renders."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.records_in = Counter("logstore_records_in", "Records accepted, per topic", ["topic"], registry=r)
        self.bytes_in = Counter(
            "logstore_bytes_in",
            "Bytes of records committed, as they were held in memory, per topic",
            ["topic"],
            registry=r,
        )
        self.produce_latency = Histogram(
            "logstore_produce_latency_seconds",
            "Produce request latency per acks level",
            ["acks"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.gc_pause = Histogram(
            "logstore_gc_pause_seconds",
            "Python garbage collections, per generation: every thread of the node waits while one runs",
            ["generation"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.gc_frozen_objects = Gauge(
            "logstore_gc_frozen_objects",
            "Objects built at start-up that collections no longer scan (gc.freeze)",
            registry=r,
        )
        self.commit_latency = Histogram(
            "logstore_commit_latency_seconds",
            "Delta commit latency per topic",
            ["topic"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.produce_stage = Histogram(
            "logstore_produce_stage_seconds",
            "Where produce requests' time goes on the server, per stage: parse (body to records), queue (accepted to "
            "taken by the committer), wal (acks=1: accepted to logged and fsynced), commit (one Delta commit, once per "
            "group), ack (committed or logged to response sent)",
            ["stage"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_records = Histogram(
            "logstore_commit_records",
            "Records per Delta commit (group commit size)",
            buckets=(1, 10, 100, 1_000, 10_000, 100_000, 1_000_000),
            registry=r,
        )
        self.high_watermark = Gauge(
            "logstore_high_watermark", "High watermark per partition", ["topic", "partition"], registry=r
        )
        self.group_lag = Gauge(
            "logstore_group_lag", "Consumer group lag per partition", ["group", "topic", "partition"], registry=r
        )
        self.buffer_bytes = Gauge("logstore_buffer_bytes", "Accepted, uncommitted bytes", registry=r)
        self.acks1_batches = Counter(
            "logstore_acks1_batches",
            "acks=1 batches per topic by how their offsets were answered: promised once logged, or after the commit",
            ["topic", "offsets"],
            registry=r,
        )
        self.wal_frames_skipped = Counter(
            "logstore_wal_frames_skipped",
            "Write-ahead log frames that could not be committed at replay and were skipped, per topic",
            ["topic"],
            registry=r,
        )
        self.zookeeper_session_timeout = Gauge(
            "logstore_zookeeper_session_timeout_seconds",
            "Cluster mode: the session timeout ZooKeeper negotiated at the last (re)connect (it bounds "
            "zookeeper.session.timeout.ms to the server's minimum and maximum)",
            registry=r,
        )
        self.acks1_lease = Gauge(
            "logstore_acks1_lease_seconds",
            "Cluster mode: how long after a ZooKeeper round trip this node may still promise acks=1 offsets "
            "(two thirds of the negotiated session timeout)",
            registry=r,
        )
        self.leadership_changes = Counter(
            "logstore_leadership_changes",
            "Partitions this node started leading (cluster mode), per topic",
            ["topic"],
            registry=r,
        )
        self.failover_seconds = Histogram(
            "logstore_failover_seconds",
            "Time to take over partitions: replay of departed nodes' acks=1 frames plus the claim",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.forwarded_requests = Counter(
            "logstore_forwarded_requests", "Produce requests (or their shares) forwarded to a leader", registry=r
        )
        self.forwarded_records = Counter(
            "logstore_forwarded_records", "Records forwarded to their partition's leader", registry=r
        )
        self.parsed_bodies = Counter(
            "logstore_parsed_bodies",
            "JSON produce bodies parsed, by where: parser (a parser process) or event_loop (small bodies, "
            "none ready, or refused: the event loop parses those again to raise their error)",
            ["where"],
            registry=r,
        )
        self.parser_restarts = Counter(
            "logstore_parser_restarts",
            "Parser processes (num.parser.processes) that ended and were replaced; their bodies were parsed "
            "on the event loop",
            registry=r,
        )
        self.transactions_open = Gauge(
            "logstore_transactions_open",
            "Transactions open on this node (Ongoing, or a commit decided and not complete yet)",
            registry=r,
        )
        self.transactions_ended = Counter(
            "logstore_transactions",
            "Transactions that ended, by outcome: committed (CompleteCommit written) or aborted (by the producer, "
            "an administrator, a timeout, a fencing init or a restart)",
            ["outcome"],
            registry=r,
        )
        self.transaction_commit_latency = Histogram(
            "logstore_transaction_commit_latency_seconds",
            "Commit calls that completed a transaction: the decision, one Delta commit per topic, the group offsets "
            "and the CompleteCommit row",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.rejected = Counter("logstore_requests_rejected", "Rejected requests per error", ["error"], registry=r)
        self.retention_files_removed = Counter(
            "logstore_retention_files_removed",
            "Data files the node's own retention removed (log.retention.check.interval.ms), per topic",
            ["topic"],
            registry=r,
        )
        self.retention_bytes_removed = Counter(
            "logstore_retention_bytes_removed",
            "Bytes of the data files retention removed, per topic",
            ["topic"],
            registry=r,
        )
        self.retention_failures = Counter(
            "logstore_retention_failures",
            "Topics a retention pass could not finish (logged with the reason)",
            registry=r,
        )
        self.retention_last_run = Gauge(
            "logstore_retention_last_run_timestamp_seconds",
            "When the node's last retention pass ended (Unix seconds; 0 before the first)",
            registry=r,
        )
