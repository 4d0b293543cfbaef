"""Configuration: Kafka-style dotted keys at the edges, frozen typed objects inside.

Two objects:

* :class:`LogstoreConfig` — the service's settings, read from
  ``conf/logstore.toml`` (or another TOML file), then ``LOGSTORE_*`` environment
  variables, then explicit overrides (CLI flags), each layer winning over the
  one before. Its topic-level keys (``retention.ms``, ``message.max.bytes``, …)
  are the defaults every topic falls back to, like Kafka's broker defaults.
* :class:`TopicConfig` — one topic's effective settings: the overrides stored in
  the topic table's properties as ``logstore.<key>`` over the service defaults.

Unknown keys are an :class:`~logstore.errors.InvalidConfigError` naming the key;
values of the wrong type or range likewise.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logstore._config_keys import apply_overrides, check_cluster_wal_dir, check_root, flatten
from logstore._config_keys import key as _key
from logstore._cpus import usable_cores
from logstore.errors import InvalidConfigError
from logstore.topic_config import (
    MIB,
    CleanupPolicy,
    CompressionType,
    TimestampType,
    TopicConfig,
)

__all__ = [
    "DEFAULT_IO_THREADS",
    "DEFAULT_PARSER_PROCESSES",
    "CleanupPolicy",
    "CompressionType",
    "LogstoreConfig",
    "TimestampType",
    "TopicConfig",
    "load_config",
    "usable_cores",
]

# LOGSTORE_* variables that are not config keys: the config file's path, and the clients' API key
_CLIENT_VARIABLES = ("LOGSTORE_CONFIG", "LOGSTORE_API_KEY")


DEFAULT_IO_THREADS = min(4, usable_cores())
"""``num.io.threads`` unless configured: no more committer threads than cores, and at most 4.

A committer runs Python between its file writes and fsyncs, so every one
that is running wants the interpreter lock the event loop needs too. With
more of them than cores, the lock's holder is preempted by threads that can
only wait for it, and the event loop waits longest: on 2 cores with 20 busy
topics, 4 committer threads answered a metadata request in 204 to 360 ms
(p50) and took 135k to 189k records/s; 2 threads, 17 to 23 ms and 180k to
209k records/s (``bench/ingest.py --topics 20 --io-threads N``).
"""

DEFAULT_PARSER_PROCESSES = 1 if usable_cores() >= 2 else 0
"""``num.parser.processes`` unless configured: one process parsing JSON bodies on the second core.

The node's own process is bound by one interpreter lock, which its event
loop shares with the committers; a 1,000-record JSON body costs the event loop
about 1 ms of it to parse. On one core a parser process would only take turns
with the node.
"""


@dataclass(frozen=True, kw_only=True)
class LogstoreConfig:
    """The service's settings. Build with :func:`load_config`; never mutated.

    Topic-level defaults are grouped in :attr:`topic_defaults`, set through the
    same dotted keys as topic overrides (``retention.ms`` …).
    """

    root: str = field(
        default="./data",
        metadata=_key(
            "logstore.root",
            "Directory, s3://bucket/prefix (AWS_* variables; AWS_ENDPOINT_URL for S3-compatible stores) or "
            "az://container/prefix (AZURE_STORAGE_* variables), holding "
            "topics/ and _offsets/.",
        ),
    )
    server_host: str = field(default="127.0.0.1", metadata=_key("server.host", "Address the HTTP API listens on."))
    server_port: int = field(default=8080, metadata=_key("server.port", "Port the HTTP API listens on.", minimum=0))
    listeners: str = field(
        default="PLAINTEXT://127.0.0.1:9092",
        metadata=_key(
            "listeners",
            "Where the Kafka protocol listener of `logstore serve` listens, beside the HTTP API, and how clients "
            "authenticate: PLAINTEXT://host:port, SASL_PLAINTEXT://… or SASL_SSL://… (SASL/PLAIN: username = "
            "principal, password = an API key; needs security.enabled); empty = off. When this default port is "
            "taken the node warns and serves HTTP without it; a configured listener that cannot bind stops the start.",
        ),
    )
    advertised_listeners: str = field(
        default="",
        metadata=_key(
            "advertised.listeners",
            "The PROTOCOL://host:port Kafka clients are told to connect to (Metadata, FindCoordinator; in "
            "cluster mode registered in ZooKeeper for the other nodes' Metadata); empty = the bound listener.",
        ),
    )
    socket_request_max_bytes: int = field(
        default=100 * MIB,
        metadata=_key(
            "socket.request.max.bytes",
            "Largest Kafka protocol request frame in bytes; a larger one closes its connection unread.",
            minimum=1024,
        ),
    )
    group_initial_rebalance_delay_ms: int = field(
        default=3_000,
        metadata=_key(
            "group.initial.rebalance.delay.ms",
            "How long (ms) the first rebalance of an empty Kafka-protocol group waits for more members, "
            "extended by each join up to the members' rebalance.timeout.ms (as Kafka's).",
            minimum=0,
        ),
    )
    group_min_session_timeout_ms: int = field(
        default=6_000,
        metadata=_key(
            "group.min.session.timeout.ms", "Least session.timeout.ms (ms) a Kafka member may ask.", minimum=1
        ),
    )
    group_max_session_timeout_ms: int = field(
        default=1_800_000,
        metadata=_key(
            "group.max.session.timeout.ms", "Most session.timeout.ms (ms) a Kafka member may ask.", minimum=1
        ),
    )
    server_ssl_certfile: str = field(
        default="",
        metadata=_key(
            "server.ssl.certfile", "PEM certificate (chain) the HTTP API serves TLS with; empty = plain HTTP."
        ),
    )
    server_ssl_keyfile: str = field(
        default="", metadata=_key("server.ssl.keyfile", "PEM private key of server.ssl.certfile.")
    )
    server_ssl_cafile: str = field(
        default="",
        metadata=_key("server.ssl.cafile", "PEM CA bundle client certificates are verified against (mTLS)."),
    )
    server_ssl_client_auth: str = field(
        default="none",
        metadata=_key(
            "server.ssl.client.auth",
            "none | requested | required: whether a TLS client is asked for a certificate signed by "
            "server.ssl.cafile (requested: may present one; required: must). A verified certificate names the "
            "principal of a request that sends no API key (ssl.principal.mapping.rules).",
            choices=("none", "requested", "required"),
        ),
    )
    inter_node_ssl_ca_location: str = field(
        default="",
        metadata=_key(
            "inter.node.ssl.ca.location",
            "PEM CA bundle a node verifies another node's HTTPS certificate with when it forwards a request "
            "(cluster mode); empty = server.ssl.cafile when set, else the system's CAs.",
        ),
    )
    inter_node_ssl_certificate_location: str = field(
        default="",
        metadata=_key(
            "inter.node.ssl.certificate.location",
            "PEM client certificate a node presents to the node it forwards a request to; empty = "
            "server.ssl.certfile (which then needs the clientAuth usage too). Its principal, in super.users, lets "
            "the other node act for a client this node authenticated by its certificate.",
        ),
    )
    inter_node_ssl_key_location: str = field(
        default="",
        metadata=_key(
            "inter.node.ssl.key.location",
            "PEM private key of inter.node.ssl.certificate.location; empty = server.ssl.keyfile.",
        ),
    )
    ssl_principal_mapping_rules: str = field(
        default="DEFAULT",
        metadata=_key(
            "ssl.principal.mapping.rules",
            "How a client certificate's subject (RFC 2253 DN) becomes a principal, as in Kafka: "
            "RULE:pattern/replacement/[L|U] rules and DEFAULT (the DN itself), first match wins.",
        ),
    )
    security_enabled: bool = field(
        default=False,
        metadata=_key(
            "security.enabled",
            "Authentication (API keys), ACLs and quotas on the HTTP API; false leaves it open, "
            "which serve allows only on loopback unless --insecure.",
        ),
    )
    super_users: str = field(
        default="",
        metadata=_key(
            "super.users", "Principals allowed everything, separated by ';' (User:admin;User:ops), as in Kafka."
        ),
    )
    quota_window_num: int = field(
        default=11,
        metadata=_key(
            "quota.window.num", "Samples a client's byte rate is measured over (Kafka's default).", minimum=2
        ),
    )
    quota_window_size_seconds: int = field(
        default=1,
        metadata=_key("quota.window.size.seconds", "Length of one quota sample, in seconds.", minimum=1),
    )
    linger_ms: int = field(
        default=5,
        metadata=_key(
            "linger.ms", "How long a partition batch waits for more records before it commits, in ms.", minimum=0
        ),
    )
    batch_size: int = field(
        default=1 * MIB,
        metadata=_key(
            "batch.size", "Bytes of pending records that trigger a commit without waiting for linger.ms.", minimum=1
        ),
    )
    num_io_threads: int = field(
        default=DEFAULT_IO_THREADS,
        metadata=_key(
            "num.io.threads",
            "Threads that commit the ingest node's topics to Delta, shared by every topic "
            "(a topic commits on one of them at a time, and costs none while idle). "
            "Default: the CPU cores this process may run on (its affinity mask, at most its cgroup's CPU quota: a "
            "container's CPU limit), at most 4.",
            minimum=1,
        ),
    )
    num_parser_processes: int = field(
        default=DEFAULT_PARSER_PROCESSES,
        metadata=_key(
            "num.parser.processes",
            "Processes beside the ingest node that parse JSON produce bodies into Arrow, so the node's "
            "event loop does not (0: it parses them itself). Default: 1 when this process may run on 2 or more "
            "CPU cores, else 0.",
            minimum=0,
        ),
    )
    buffer_memory: int = field(
        default=256 * MIB,
        metadata=_key("buffer.memory", "Bytes of accepted, uncommitted records before producers get 429.", minimum=1),
    )
    max_request_size: int = field(
        default=16 * MIB, metadata=_key("max.request.size", "Largest produce request body in bytes.", minimum=1)
    )
    fetch_max_bytes: int = field(
        default=55 * MIB,
        metadata=_key(
            "fetch.max.bytes",
            "Most bytes of keys and values one fetch returns, whatever max_bytes it asks for (Kafka: 55 MiB); "
            "the first record is returned whole regardless.",
            minimum=1024,
        ),
    )
    request_timeout_ms: int = field(
        default=30_000,
        metadata=_key(
            "request.timeout.ms",
            "How long, in ms, a request body (HTTP) or frame (Kafka listener) may take to arrive in full, and a "
            "produce may wait for its commit (acks=all; acks=1 without promised offsets); else REQUEST_TIMED_OUT. "
            "A produce that timed out stays queued and may still be committed (as in Kafka).",
            minimum=1,
        ),
    )
    producer_state_max_entries: int = field(
        default=10_000,
        metadata=_key(
            "producer.state.max.entries",
            "Idempotent producers per topic whose sequence state a node keeps in memory (their sequences per "
            "partition and recent batches); the least recently used beyond this are dropped and re-read from the "
            "topic's Delta log when they send again.",
            minimum=1,
        ),
    )
    num_partitions: int = field(
        default=1, metadata=_key("num.partitions", "Partitions of an auto-created topic.", minimum=1)
    )
    auto_create_topics_enable: bool = field(
        default=False, metadata=_key("auto.create.topics.enable", "Create unknown topics on first produce.")
    )
    zookeeper_connect: str = field(
        default="", metadata=_key("zookeeper.connect", "host:port[,host:port][/chroot]; empty = embedded, one node.")
    )
    node_id: int = field(
        default=-1,
        metadata=_key(
            "node.id",
            "This node's id in a cluster (unique, >= 0); required with zookeeper.connect, unused when embedded.",
            minimum=-1,
        ),
    )
    zookeeper_session_timeout_ms: int = field(
        default=18_000,
        metadata=_key(
            "zookeeper.session.timeout.ms",
            "A node silent this long (ms) is dead and its partitions move. The ZooKeeper server bounds it to its "
            "[minSessionTimeout, maxSessionTimeout] (2 and 20 ticks by default); the timeout it grants is the "
            "one that counts, acks=1 leases included (two thirds of it).",
            minimum=1_000,
        ),
    )
    leader_placement: str = field(
        default="partition",
        metadata=_key(
            "leader.placement",
            "partition: spread every topic's partition leaders over the nodes; topic: one node leads a whole topic.",
            choices=("partition", "topic"),
        ),
    )
    auto_leader_rebalance_enable: bool = field(
        default=True,
        metadata=_key(
            "auto.leader.rebalance.enable",
            "Cluster: every leader.imbalance.check.interval.seconds the controller gives partitions back to their "
            "preferred leader (a balanced placement over the live nodes) on each node whose imbalance is over "
            "leader.imbalance.per.broker.percentage; the leader hands each over after committing what it accepted.",
        ),
    )
    leader_imbalance_check_interval_seconds: int = field(
        default=300,
        metadata=_key(
            "leader.imbalance.check.interval.seconds",
            "Cluster: how often (seconds) the controller checks the leader imbalance (auto.leader.rebalance.enable).",
            minimum=1,
        ),
    )
    leader_imbalance_per_broker_percentage: int = field(
        default=10,
        metadata=_key(
            "leader.imbalance.per.broker.percentage",
            "Cluster: a node's imbalance allowed (%, of the partitions it is the preferred leader of, those it does "
            "not lead) before the controller gives them back to it.",
            minimum=0,
        ),
    )
    advertised_url: str = field(
        default="",
        metadata=_key(
            "advertised.url",
            "Base URL other nodes and clients reach this node at; empty = http(s)://<server.host>:<server.port>.",
        ),
    )
    wal_dir: str = field(
        default="",
        metadata=_key(
            "wal.dir",
            "Write-ahead log of acks=1 records; empty = <logstore.root>/_wal, or <logstore.root>/_wal/<node.id> "
            "in a cluster (shared storage, so a new leader can replay a dead node's records); on an object-store root "
            "in the bucket, an acks=1 answer waiting until its object is stored.",
        ),
    )
    commit_fsync: bool = field(
        default=True,
        metadata=_key(
            "commit.fsync",
            "fsync data and commit files before a commit counts (power-loss durability); "
            "false relies on the page cache like Kafka's default (survives process crashes only).",
        ),
    )
    checkpoint_interval: int = field(
        default=100,
        metadata=_key(
            "checkpoint.interval",
            "Delta commits between checkpoints of a topic table (at least: a checkpoint of n actions, one per "
            "data file, is followed by the next one no sooner than n/100 commits later).",
            minimum=1,
        ),
    )
    offsets_history_commits: int = field(
        default=10,
        metadata=_key(
            "offsets.history.commits",
            "Commits kept per (group, topic, partition) when maintenance compacts _offsets (the latest included).",
            minimum=1,
        ),
    )
    transaction_max_timeout_ms: int = field(
        default=900_000,
        metadata=_key(
            "transaction.max.timeout.ms",
            "Longest transaction_timeout_ms a transactional producer may ask for at init (ms); longer is refused "
            "with INVALID_TRANSACTION_TIMEOUT.",
            minimum=1,
        ),
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = field(
        default=10_000,
        metadata=_key(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "How often (ms) the transaction coordinator aborts transactions open past their timeout (bumping "
            "their epoch, so the late producer is fenced).",
            minimum=1,
        ),
    )
    stats_sample_ms: int = field(
        default=5_000,
        metadata=_key(
            "stats.sample.ms",
            "How often the ingest node samples topic sizes and group lag for /v1/stats and the console's charts "
            "(15 minutes of samples are kept in memory).",
            minimum=100,
        ),
    )
    log_retention_check_interval_ms: int = field(
        default=300_000,
        metadata=_key(
            "log.retention.check.interval.ms",
            "How often the ingest node applies retention by itself (Kafka's key): it drops whole data files past "
            "retention.ms or over retention.bytes in the partitions it leads of every topic whose cleanup.policy "
            "contains delete, without Spark.",
            minimum=1,
        ),
    )
    spark_jars_dir: str = field(
        default="",
        metadata=_key("spark.jars.dir", "Folder with Delta's jars; empty = the project's .cache/jars, else Maven."),
    )
    topic_defaults: TopicConfig = field(default_factory=TopicConfig)

    def __post_init__(self) -> None:
        check_root(self.root, security_enabled=self.security_enabled)
        check_cluster_wal_dir(self.root, self.wal_dir, cluster=bool(self.zookeeper_connect))

    @classmethod
    def known_keys(cls) -> tuple[str, ...]:
        """Every dotted key the service accepts (its own and the topic defaults)."""
        own = tuple(f.metadata["key"] for f in dataclasses.fields(cls) if f.metadata)
        return own + TopicConfig.known_keys()

    def with_overrides(self, overrides: Mapping[str, Any]) -> LogstoreConfig:
        """A copy with dotted-key ``overrides`` applied (strings or typed values).

        Raises:
            InvalidConfigError: an unknown key or an invalid value.
        """
        topic_keys = set(TopicConfig.known_keys())
        unknown = sorted(set(overrides) - set(self.known_keys()))
        if unknown:
            raise InvalidConfigError(
                f"unknown config key '{unknown[0]}'; known keys: {', '.join(sorted(self.known_keys()))}"
            )
        topic = {k: v for k, v in overrides.items() if k in topic_keys}
        own = {k: v for k, v in overrides.items() if k not in topic_keys}
        cfg = apply_overrides(self, own, "config")
        if topic:
            cfg = dataclasses.replace(cfg, topic_defaults=apply_overrides(cfg.topic_defaults, topic, "config"))
        return cfg

    def to_dict(self) -> dict[str, Any]:
        """Every dotted key → effective value."""
        own = {f.metadata["key"]: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata}
        return own | self.topic_defaults.to_dict()


def env_name(key: str) -> str:
    """The environment variable that overrides ``key``: ``linger.ms`` → ``LOGSTORE_LINGER_MS``."""
    return "LOGSTORE_" + key.removeprefix("logstore.").upper().replace(".", "_")


def load_config(
    path: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> LogstoreConfig:
    """Read the configuration: TOML file, then ``LOGSTORE_*`` variables, then ``overrides``.

    Args:
        path: a TOML file of dotted keys (``"linger.ms" = 5`` or nested tables);
            ``None`` reads ``conf/logstore.toml`` when it exists, else defaults.
            ``LOGSTORE_CONFIG`` names another file.
        overrides: dotted keys from the command line; they win over everything.
        environ: the environment to read (default ``os.environ``).

    Raises:
        InvalidConfigError: an unknown key in any layer (named, with where it
            came from), or a value of the wrong type or out of range.
    """
    env = os.environ if environ is None else environ
    if path is None:
        path = env.get("LOGSTORE_CONFIG") or None
    if path is None and Path("conf/logstore.toml").is_file():
        path = Path("conf/logstore.toml")
    cfg = LogstoreConfig()
    if path is not None:
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise InvalidConfigError(f"cannot read config file {path}: {e}") from e
        cfg = cfg.with_overrides(flatten(doc))
    by_env = {env_name(k): k for k in LogstoreConfig.known_keys()}
    from_env: dict[str, str] = {}
    for var, value in env.items():
        if not var.startswith("LOGSTORE_") or var in _CLIENT_VARIABLES:
            continue
        if var not in by_env:
            raise InvalidConfigError(
                f"unknown environment variable {var}: LOGSTORE_* variables override config keys "
                f"({', '.join(sorted(by_env))})"
            )
        from_env[by_env[var]] = value
    cfg = cfg.with_overrides(from_env)
    return cfg.with_overrides(overrides or {})
