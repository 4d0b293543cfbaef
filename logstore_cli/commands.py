"""The ``logstore`` command line: topics, produce, consume, groups, keys, acls, quotas, serve, maintain, zookeeper.

Every command works on a root directory directly (``--root``, default: the
config's ``logstore.root``); topics, produce, consume and groups can go through
a running server instead (``--server URL``, with ``--api-key`` /
``LOGSTORE_API_KEY`` and ``--ca-file`` when it is secured). Keys, ACLs and
quotas are managed on the root only: whoever can write the root is the
administrator. Errors print as ``ERROR_NAME: message`` on stderr with exit
status 1.
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from logstore.client import Consumer, Producer, RemoteStore
from logstore.config import LogstoreConfig, load_config
from logstore.errors import InvalidConfigError, InvalidRequestError, LogstoreError
from logstore.partitioner import Partitioner
from logstore.protocols import Store
from logstore.schema import input_table
from logstore.security import (
    AclBinding,
    FileSecurityStore,
    Operation,
    PatternType,
    Permission,
    Quota,
    ResourceType,
    audit,
    log_audit_to_stderr,
    new_key,
    parse_principal,
)
from logstore.security.acl import CLUSTER_NAME
from logstore.store import LogStore
from logstore.structs import AppendResult, GroupTopicPartition, ProducerBatch

__all__ = ["main"]

_PRODUCE_BATCH = 10_000


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI (the ``logstore`` console script, ``python -m logstore_cli``); returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        config = _config(args)
        return int(args.func(args, config) or 0)
    except LogstoreError as e:
        print(f"{e.name}: {e.message}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


def _config(args: argparse.Namespace) -> LogstoreConfig:
    overrides: dict[str, Any] = {}
    if getattr(args, "root", None):
        overrides["logstore.root"] = args.root
    return load_config(getattr(args, "config_file", None), overrides=overrides)


def _backend(args: argparse.Namespace, config: LogstoreConfig) -> Store:
    """The store itself (``--root``, embedded) or a running server (``--server URL``)."""
    server = getattr(args, "server", None)
    return RemoteStore(server, **_client_options(args)) if server else LogStore(config)


def _client_options(args: argparse.Namespace) -> dict[str, Any]:
    """``api_key`` (``--api-key``, else ``LOGSTORE_API_KEY``) and ``ca_file`` for a client of ``--server``."""
    return {
        "api_key": getattr(args, "api_key", None) or os.environ.get("LOGSTORE_API_KEY") or None,
        "ca_file": getattr(args, "ca_file", None),
    }


def _parse_kv(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidConfigError(f"--config takes key=value, got '{item}'")
        out[key.strip()] = value.strip()
    return out


# -- topics ---------------------------------------------------------------------


def _topics_create(args: argparse.Namespace, config: LogstoreConfig) -> None:
    info = _backend(args, config).create_topic(args.name, args.partitions, _parse_kv(args.config_kv))
    print(f"Created topic {info.name} with {len(info.partitions)} partitions.")


def _topics_list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    for name in _backend(args, config).list_topics():
        print(name)


def _topics_describe(args: argparse.Namespace, config: LogstoreConfig) -> None:
    info = _backend(args, config).describe_topic(args.name)
    overrides = ",".join(f"{k}={v}" for k, v in sorted(info.overrides.items()))
    print(f"Topic: {info.name}\tPartitionCount: {len(info.partitions)}\tConfigs: {overrides}")
    for p in info.partitions:
        print(
            f"\tTopic: {info.name}\tPartition: {p.partition}\tLogStartOffset: {p.log_start_offset}"
            f"\tHighWatermark: {p.high_watermark}\tSizeBytes: {p.size_bytes}\tFiles: {p.num_files}"
        )


def _topics_alter(args: argparse.Namespace, config: LogstoreConfig) -> None:
    kv: dict[str, Any] = dict(_parse_kv(args.config_kv))
    kv |= {k: None for k in args.delete_config or []}
    info = _backend(args, config).alter_topic(args.name, config=kv, partitions=args.partitions)
    print(f"Altered topic {info.name}: {len(info.partitions)} partitions.")


def _topics_delete(args: argparse.Namespace, config: LogstoreConfig) -> None:
    _backend(args, config).delete_topic(args.name)
    print(f"Deleted topic {args.name}.")


# -- produce / consume ----------------------------------------------------------


def _produce(args: argparse.Namespace, config: LogstoreConfig) -> None:
    sep = args.key_separator.encode() if args.key_separator else None

    def lines() -> Iterator[tuple[bytes | None, bytes]]:
        for raw in sys.stdin.buffer:
            line = raw.rstrip(b"\r\n")
            if sep is None:
                yield None, line
                continue
            key, found, value = line.partition(sep)
            if not found:
                raise InvalidConfigError(f"line has no key separator {args.key_separator!r}: {line[:80]!r}")
            yield key, value

    if getattr(args, "server", None):
        failures: list[LogstoreError] = []

        def delivered(error: LogstoreError | None, _meta: object) -> None:
            if error is not None:
                failures.append(error)

        with Producer(args.server, acks=args.acks, **_client_options(args)) as producer:
            for key, value in lines():
                producer.produce(args.topic, value, key=key, partition=args.partition, on_delivery=delivered)
        if failures:
            raise failures[0]
        return

    store = LogStore(config)
    count, _ = store.catalog.topic_config(args.topic)
    partitioner = Partitioner()
    keys: list[bytes | None] = []
    values: list[bytes | None] = []

    def flush() -> None:
        if not values:
            return
        parts = partitioner.assign(args.topic, keys, [args.partition] * len(values), count)
        (result,) = store.append(args.topic, [ProducerBatch(input_table(parts, values, keys))])
        if isinstance(result, LogstoreError):
            raise result
        keys.clear()
        values.clear()

    for key, value in lines():
        keys.append(key)
        values.append(value)
        if len(values) >= _PRODUCE_BATCH:
            flush()
    flush()


def _consume(args: argparse.Namespace, config: LogstoreConfig) -> None:
    if args.group and getattr(args, "server", None) and args.partition is None:
        _consume_as_member(args)
        return
    store = _backend(args, config)
    info = store.describe_topic(args.topic)
    committed = store.committed(args.group, args.topic) if args.group else {}
    positions: dict[int, int] = {}
    for p in info.partitions:
        if args.partition is not None and p.partition != args.partition:
            continue
        c = committed.get(GroupTopicPartition(args.group, args.topic, p.partition))
        if c is not None:
            positions[p.partition] = max(c.offset, p.log_start_offset)
        else:
            positions[p.partition] = p.log_start_offset if args.from_beginning else p.high_watermark
    remaining = args.max_records if args.max_records is not None else -1
    deadline = time.monotonic() + args.timeout_ms / 1000
    out = sys.stdout.buffer
    while remaining != 0:
        progressed = False
        for part in sorted(positions):
            if remaining == 0:
                break
            recs = store.fetch(
                args.topic, part, positions[part], max_records=remaining if remaining > 0 else 10_000
            ).records
            if not len(recs):
                continue
            progressed = True
            for key, value in zip(recs["key"].to_pylist(), recs["value"].to_pylist(), strict=True):
                if args.print_key:
                    out.write((key or b"null") + args.key_separator.encode())
                out.write((value if value is not None else b"null") + b"\n")
            positions[part] = recs["offset"][-1].as_py() + 1
            remaining = max(-1, remaining - len(recs)) if remaining > 0 else remaining
        out.flush()
        if args.group:
            store.commit_offsets(args.group, args.topic, positions)
        if not progressed:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        else:
            deadline = time.monotonic() + args.timeout_ms / 1000


def _consume_as_member(args: argparse.Namespace) -> None:
    """``consume --group G --server URL``: a member of G (a :class:`Consumer`), sharing the topic with the others.

    Commits after printing (no record is lost or printed twice across a rebalance); leaves the group on exit.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": args.server,
            "group.id": args.group,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
            "enable.auto.commit": False,
            "api.key": _client_options(args)["api_key"],
            "ssl.ca.location": _client_options(args)["ca_file"],
        }
    )
    out = sys.stdout.buffer
    remaining = args.max_records if args.max_records is not None else -1
    idle_s = args.timeout_ms / 1000
    try:
        consumer.subscribe([args.topic])
        while remaining != 0:
            msgs = consumer.consume(remaining if 0 < remaining < 500 else 500, timeout=max(idle_s, 0.5))
            if not msgs:
                break  # nothing for timeout-ms (at least half a second: the first assignment may still arrive)
            for m in msgs:
                if args.print_key:
                    out.write((m.key() or b"null") + args.key_separator.encode())
                value = m.value()
                out.write((value if value is not None else b"null") + b"\n")
            out.flush()
            consumer.commit(asynchronous=False)
            remaining = max(0, remaining - len(msgs)) if remaining > 0 else remaining
    finally:
        consumer.close()


# -- groups ---------------------------------------------------------------------


def _groups_list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    for g in _backend(args, config).list_groups():
        print(g)


def _groups_describe(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """Committed offsets with lag; through a server, also each partition's live owner and its generation."""
    backend = _backend(args, config)
    members = backend.group_members(args.group) if isinstance(backend, RemoteStore) else []
    rows = backend.describe_group(args.group)
    owners = {(tp.topic, tp.partition): m for m in members for tp in m.assignment}
    tail = f"  {'CONSUMER-ID':<39} {'GENERATION':>10}" if members else ""
    print(
        f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':>9} {'CURRENT-OFFSET':>14} {'LOG-END-OFFSET':>14} {'LAG':>8}{tail}"
    )
    for r in rows:
        owner = owners.pop((r.topic, r.partition), None)
        tail = f"  {owner.member_id if owner else '-':<39} {owner.generation if owner else '-':>10}" if members else ""
        print(
            f"{r.group:<20} {r.topic:<20} {r.partition:>9} {r.committed_offset:>14} {r.high_watermark:>14} {r.lag:>8}"
            + tail
        )
    dash = "-"
    for (topic, partition), owner in sorted(owners.items()):  # assigned, nothing committed yet
        print(
            f"{args.group:<20} {topic:<20} {partition:>9} {dash:>14} {dash:>14} {dash:>8}"
            f"  {owner.member_id:<39} {owner.generation:>10}"
        )
    for m in members:
        if not m.assignment:
            print(
                f"{args.group:<20} {dash:<20} {dash:>9} {dash:>14} {dash:>14} {dash:>8}"
                f"  {m.member_id:<39} {m.generation:>10}"
            )


def _groups_reset(args: argparse.Namespace, config: LogstoreConfig) -> None:
    to: str | dict[str, int]
    if args.to in ("earliest", "latest"):
        to = args.to
    elif args.to.lstrip("-").isdigit():
        to = {"offset": int(args.to)}
    else:
        try:
            when = datetime.datetime.fromisoformat(args.to)
        except ValueError:
            raise InvalidRequestError(
                f"--to takes earliest, latest, an offset or an ISO date-time, got '{args.to}'"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        to = {"timestamp": int(when.timestamp() * 1000)}
    new = _backend(args, config).reset_offsets(args.group, args.topic, to)
    for p, o in sorted(new.items()):
        print(f"{args.group} {args.topic} {p} {o}")


# -- keys, acls, quotas ---------------------------------------------------------


def _security_store(config: LogstoreConfig) -> FileSecurityStore:
    log_audit_to_stderr()
    return FileSecurityStore(config.root)


def _operator() -> str:
    """Who made a change, for the audit line: the local OS user running the CLI."""
    return f"Local:{getpass.getuser()}"


def _keys_create(args: argparse.Namespace, config: LogstoreConfig) -> None:
    store = _security_store(config)
    record, key = new_key(parse_principal(args.principal))
    store.add_key(record)
    audit("key.create", principal=_operator(), decision="CHANGED", key_id=record.key_id, subject=record.principal)
    print(f"Created key {record.key_id} for {record.principal}. It is shown only now; store it safely:")
    print(key)


def _keys_list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    keys = sorted(_security_store(config).snapshot().keys.values(), key=lambda k: (k.principal, k.created_ms))
    print(f"{'KEY-ID':<18} {'PRINCIPAL':<30} CREATED")
    for k in keys:
        created = datetime.datetime.fromtimestamp(k.created_ms / 1000, datetime.UTC).isoformat(timespec="seconds")
        print(f"{k.key_id:<18} {k.principal:<30} {created}")


def _keys_revoke(args: argparse.Namespace, config: LogstoreConfig) -> int:
    principal = parse_principal(args.principal) if args.principal else None
    removed = _security_store(config).revoke_keys(principal=principal, key_id=args.key_id)
    for k in removed:
        audit("key.revoke", principal=_operator(), decision="CHANGED", key_id=k.key_id, subject=k.principal)
        print(f"Revoked key {k.key_id} of {k.principal}.")
    if not removed:
        print("No matching key.", file=sys.stderr)
        return 1
    return 0


def _acl_bindings(args: argparse.Namespace) -> list[AclBinding]:
    if args.cluster:
        rtype, name = ResourceType.CLUSTER, CLUSTER_NAME
    elif args.topic is not None:
        rtype, name = ResourceType.TOPIC, args.topic
    else:
        rtype, name = ResourceType.GROUP, args.group
    pattern = PatternType(args.resource_pattern_type)
    principals = [(p, Permission.ALLOW) for p in args.allow_principal or []]
    principals += [(p, Permission.DENY) for p in args.deny_principal or []]
    if not principals:
        raise InvalidRequestError("give --allow-principal or --deny-principal (TYPE:NAME, e.g. User:alice)")
    return [
        AclBinding(parse_principal(p), rtype, name, pattern, Operation(op.upper()), perm)
        for p, perm in principals
        for op in args.operation
    ]


def _acls_add(args: argparse.Namespace, config: LogstoreConfig) -> None:
    _change_acls(args, config, add=True)


def _acls_remove(args: argparse.Namespace, config: LogstoreConfig) -> None:
    _change_acls(args, config, add=False)


def _change_acls(args: argparse.Namespace, config: LogstoreConfig, *, add: bool) -> None:
    """Add or remove the ACLs the arguments name; one line each, and an audit line per ACL that changed."""
    acls = _acl_bindings(args)
    store = _security_store(config)
    changed = set(store.add_acls(acls) if add else store.remove_acls(acls))
    done, unchanged = ("Added", "Already present") if add else ("Removed", "Not present")
    for acl in acls:
        if acl in changed:
            audit("acl.add" if add else "acl.remove", principal=_operator(), decision="CHANGED", acl=acl.to_dict())
        print(f"{done if acl in changed else unchanged}: {acl}")


def _acls_list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    for acl in _security_store(config).snapshot().acls:
        print(acl)


def _quotas_set(args: argparse.Namespace, config: LogstoreConfig) -> None:
    quota = Quota(parse_principal(args.principal), args.client_id, args.producer_byte_rate, args.consumer_byte_rate)
    _security_store(config).set_quota(quota)
    audit("quota.set", principal=_operator(), decision="CHANGED", quota=quota.to_dict())
    print(f"Set quota {_quota_line(quota)}")


def _quotas_list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    quotas = _security_store(config).snapshot().quotas
    for key in sorted(quotas, key=lambda k: (k[0], k[1] or "")):
        print(_quota_line(quotas[key]))


def _quota_line(q: Quota) -> str:
    client = f" client-id={q.client_id}" if q.client_id is not None else ""
    return (
        f"principal={q.principal}{client} producer_byte_rate={q.producer_byte_rate or '-'} "
        f"consumer_byte_rate={q.consumer_byte_rate or '-'}"
    )


def _byte_rate(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("a byte rate is a positive number of bytes per second")
    return value


# -- zookeeper ------------------------------------------------------------------


def _zookeeper(args: argparse.Namespace, config: LogstoreConfig) -> int:
    """Run a standalone ZooKeeper server (or one ensemble member) in the foreground."""
    import os

    from logstore.cluster.zkserver import ZooKeeperServer

    peers: tuple[tuple[int, str, int, int], ...] = ()
    for i, spec in enumerate(args.peer or [], start=1):
        host, _, ports = spec.rpartition(":")
        host, _, quorum = host.rpartition(":")
        if not (host and quorum.isdigit() and ports.isdigit()):
            raise InvalidConfigError(f"--peer takes HOST:QUORUM_PORT:ELECTION_PORT, got '{spec}'")
        peers += ((i, host, int(quorum), int(ports)),)
    server = ZooKeeperServer(
        args.data_dir or os.path.join(config.root, "_zookeeper"),
        port=args.port,
        host=args.host,
        server_id=args.id if peers else None,
        peers=peers,
    )
    print(f"ZooKeeper on {server.connect}, data in {server.data_dir}", flush=True)
    server.exec()
    return 0


# -- cluster --------------------------------------------------------------------


def _cluster_status(args: argparse.Namespace, config: LogstoreConfig) -> int:
    """Nodes, controller and each partition's leader from ``GET /v1/metadata``; exit 1 if a partition is under-led.

    Under-led: the partition's leader is none (-1) or not a live node. Without
    ``--server`` it asks the server this config describes (``server.host``,
    ``server.port``).
    """
    server = getattr(args, "server", None)
    if not server:
        scheme = "https" if config.server_ssl_certfile else "http"
        host = "127.0.0.1" if config.server_host in ("", "0.0.0.0", "::") else config.server_host
        server = f"{scheme}://{host}:{config.server_port}"
    md = RemoteStore(server, **_client_options(args)).metadata()
    live = {n["node_id"] for n in md["nodes"]}
    controller = md["controller"]
    shown = "none (election under way)" if controller is None else controller
    print(f"Controller: {shown}\tControllerEpoch: {md['controller_epoch']}")
    for n in md["nodes"]:
        role = "\t(controller)" if n["node_id"] == controller else ""
        print(f"Node: {n['node_id']}\tUrl: {n['url']}{role}")
    under = []
    for t in md["topics"]:
        for p in t["partitions"]:
            led = p["leader"] in live
            if not led:
                under.append(f"{t['name']}-{p['partition']}")
            flag = "" if led else "\tUNDER-LED"
            print(
                f"\tTopic: {t['name']}\tPartition: {p['partition']}\tLeader: {p['leader']}"
                f"\tLeaderEpoch: {p['leader_epoch']}{flag}"
            )
    print(f"Under-led partitions: {len(under)}{': ' + ', '.join(under) if under else ''}")
    return 1 if under else 0


# -- serve ----------------------------------------------------------------------


def _serve(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """Run the HTTP API (``ingest_api``) until SIGTERM/SIGINT, with ``--host``/``--port``/``--insecure`` applied."""
    from ingest_api.serve import serve

    overrides: dict[str, Any] = {}
    if args.host:
        overrides["server.host"] = args.host
    if args.port is not None:
        overrides["server.port"] = args.port
    serve(config.with_overrides(overrides), insecure=args.insecure)


# -- maintain -------------------------------------------------------------------


def _maintain(args: argparse.Namespace, config: LogstoreConfig) -> int:
    """Retention, compaction, key compaction, vacuum, ``_offsets`` compaction: ``maintenance`` runs them."""
    import logging

    from logstore.catalog import Catalog
    from maintenance.job import SPARK_JOBS, run_job
    from maintenance.scheduler import Scheduler, parse_duration

    catalog = Catalog(config)
    spark = None
    if not args.no_spark and (args.job == "run" or args.job in SPARK_JOBS):
        from logstore.spark import session

        spark = session(**{"spark.app.name": "logstore-maintenance"})
    if args.job == "run":
        try:
            every = parse_duration(args.every)
        except ValueError:
            raise InvalidRequestError(f"--every takes a duration like 30s, 5m or 1h, got '{args.every}'") from None
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        scheduler = Scheduler(catalog, spark=spark, every_s=every)
        try:
            scheduler.run_forever(cycles=args.cycles)
        except KeyboardInterrupt:
            scheduler.stop()
        return 0
    report = run_job(
        args.job,
        catalog,
        topics=[args.topic] if args.topic else None,
        spark=spark,
        vacuum_retention_hours=args.vacuum_retention_hours,
    )
    if args.json:
        print(report.to_json())
    return 1 if report.errors else 0


# -- demo -----------------------------------------------------------------------


def _demo(args: argparse.Namespace, config: LogstoreConfig) -> None:
    """Create a topic, produce, consume with a group, describe: the store end to end."""
    store = LogStore(config)
    name = "demo"
    if name not in store.list_topics():
        store.create_topic(name, 3)
    partitioner = Partitioner()
    keys: list[bytes | None] = [f"user-{i % 5}".encode() for i in range(30)]
    values: list[bytes | None] = [f"event {i}".encode() for i in range(30)]
    parts = partitioner.assign(name, keys, [None] * 30, 3)
    (result,) = store.append(name, [ProducerBatch(input_table(parts, values, keys))])
    assert isinstance(result, AppendResult)
    print(f"produced 30 records to '{name}' in Delta version {result.table_version}")
    _topics_describe(argparse.Namespace(name=name), config)
    info = store.describe_topic(name)
    for p in info.partitions:
        recs = store.fetch(name, p.partition, max(p.log_start_offset, p.high_watermark - 3)).records
        for off, key, value in zip(
            recs["offset"].to_pylist(), recs["key"].to_pylist(), recs["value"].to_pylist(), strict=True
        ):
            print(f"  partition {p.partition} offset {off}: {key!r} -> {value!r}")
    store.commit_offsets("demo-group", name, {p.partition: p.high_watermark for p in info.partitions})
    _groups_describe(argparse.Namespace(group="demo-group"), config)
    print(f"topic table: {store.catalog.topic_path(name)} (a Delta table: query it with Spark SQL)")


# -- parser ---------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--root", default=argparse.SUPPRESS, help="store directory (default: the config's logstore.root)"
    )
    common.add_argument(
        "--server",
        default=argparse.SUPPRESS,
        metavar="URL[,URL…]",
        help="work through a running server (or a cluster: any of its nodes, comma-separated) instead of --root",
    )
    common.add_argument(
        "--api-key", default=argparse.SUPPRESS, help="with --server: the API key (default: $LOGSTORE_API_KEY)"
    )
    common.add_argument(
        "--ca-file", default=argparse.SUPPRESS, help="with --server https://…: CA bundle to verify the server with"
    )

    parser = argparse.ArgumentParser(prog="logstore", description=__doc__, parents=[common])
    parser.add_argument(
        "--config", dest="config_file", help="TOML config file (default: $LOGSTORE_CONFIG, else conf/logstore.toml)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    topics = sub.add_parser("topics", help="create, list, describe, alter, delete topics", parents=[common])
    tsub = topics.add_subparsers(dest="action", required=True)
    p = tsub.add_parser("create", parents=[common])
    p.add_argument("name")
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--config", dest="config_kv", action="append", metavar="KEY=VALUE", help="topic config override")
    p.set_defaults(func=_topics_create)
    p = tsub.add_parser("list", parents=[common])
    p.set_defaults(func=_topics_list)
    p = tsub.add_parser("describe", parents=[common])
    p.add_argument("name")
    p.set_defaults(func=_topics_describe)
    p = tsub.add_parser("alter", parents=[common])
    p.add_argument("name")
    p.add_argument("--partitions", type=int)
    p.add_argument("--config", dest="config_kv", action="append", metavar="KEY=VALUE")
    p.add_argument("--delete-config", action="append", metavar="KEY")
    p.set_defaults(func=_topics_alter)
    p = tsub.add_parser("delete", parents=[common])
    p.add_argument("name")
    p.set_defaults(func=_topics_delete)

    p = sub.add_parser("produce", help="produce lines from stdin", parents=[common])
    p.add_argument("topic")
    p.add_argument("--key-separator", help="split each line into key and value at the first separator")
    p.add_argument("--partition", type=int)
    p.add_argument(
        "--acks", choices=["0", "1", "all"], default="all", help="with --server; embedded writes are acks=all"
    )
    p.set_defaults(func=_produce)

    p = sub.add_parser("consume", help="print records to stdout", parents=[common])
    p.add_argument("topic")
    p.add_argument("--group")
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--max-records", type=int)
    p.add_argument("--partition", type=int)
    p.add_argument("--print-key", action="store_true")
    p.add_argument("--key-separator", default=":")
    p.add_argument("--timeout-ms", type=int, default=0, help="wait this long for new records before exiting")
    p.set_defaults(func=_consume)

    groups = sub.add_parser("groups", help="consumer groups", parents=[common])
    gsub = groups.add_subparsers(dest="action", required=True)
    p = gsub.add_parser("list", parents=[common])
    p.set_defaults(func=_groups_list)
    p = gsub.add_parser("describe", parents=[common])
    p.add_argument("group")
    p.set_defaults(func=_groups_describe)

    p = gsub.add_parser("reset", parents=[common], help="move a group's offsets on a topic")
    p.add_argument("group")
    p.add_argument("--topic", required=True)
    p.add_argument("--to", required=True, help="earliest | latest | OFFSET | DATETIME (ISO 8601, UTC if no zone)")
    p.set_defaults(func=_groups_reset)

    p = sub.add_parser("serve", help="run the HTTP API", parents=[common])
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument(
        "--insecure",
        action="store_true",
        help="serve on a non-loopback address with security.enabled=false (anyone reachable gets full access)",
    )
    p.set_defaults(func=_serve)

    keys = sub.add_parser("keys", help="API keys: create, list, revoke (on the root)", parents=[common])
    ksub = keys.add_subparsers(dest="action", required=True)
    p = ksub.add_parser("create", parents=[common], help="create a key; it is printed once, on the last line")
    p.add_argument("--principal", required=True, help="TYPE:NAME, e.g. User:alice")
    p.set_defaults(func=_keys_create)
    p = ksub.add_parser("list", parents=[common], help="key ids and principals (never the keys)")
    p.set_defaults(func=_keys_list)
    p = ksub.add_parser("revoke", parents=[common], help="revoke every key of a principal, or one key")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--principal")
    which.add_argument("--key-id")
    p.set_defaults(func=_keys_revoke)

    acls = sub.add_parser("acls", help="Kafka ACLs: add, remove, list (on the root)", parents=[common])
    asub = acls.add_subparsers(dest="action", required=True)
    for action, func in (("add", _acls_add), ("remove", _acls_remove)):
        p = asub.add_parser(action, parents=[common])
        p.add_argument("--allow-principal", action="append", metavar="P", help="TYPE:NAME; User:* for everyone")
        p.add_argument("--deny-principal", action="append", metavar="P", help="TYPE:NAME; User:* for everyone")
        p.add_argument(
            "--operation",
            action="append",
            required=True,
            type=str.upper,
            choices=[o.value for o in Operation],
            help="READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE or ALL (repeatable)",
        )
        resource = p.add_mutually_exclusive_group(required=True)
        resource.add_argument("--topic", help="a topic name, a prefix (with prefixed) or * for every topic")
        resource.add_argument("--group", help="a group name, a prefix (with prefixed) or * for every group")
        resource.add_argument("--cluster", action="store_true", help="the cluster (creating topics, metrics)")
        p.add_argument("--resource-pattern-type", choices=[t.value for t in PatternType], default="literal")
        p.set_defaults(func=func)
    p = asub.add_parser("list", parents=[common])
    p.set_defaults(func=_acls_list)

    quotas = sub.add_parser("quotas", help="client byte-rate quotas: set, list (on the root)", parents=[common])
    qsub = quotas.add_subparsers(dest="action", required=True)
    p = qsub.add_parser("set", parents=[common], help="set a principal's (or one client id's) byte rates")
    p.add_argument("--principal", required=True)
    p.add_argument("--client-id", help="only this X-Client-Id of the principal (wins over the principal's quota)")
    p.add_argument("--producer-byte-rate", type=_byte_rate, help="produce request bytes per second")
    p.add_argument("--consumer-byte-rate", type=_byte_rate, help="fetch response bytes per second")
    p.set_defaults(func=_quotas_set)
    p = qsub.add_parser("list", parents=[common])
    p.set_defaults(func=_quotas_list)

    zk = sub.add_parser("zookeeper", help="run Apache ZooKeeper, the cluster's coordinator", parents=[common])
    zsub = zk.add_subparsers(dest="action", required=True)
    p = zsub.add_parser("start", parents=[common], help="run a ZooKeeper server in the foreground")
    p.add_argument("--port", type=int, default=2181, help="client port")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--data-dir", help="snapshots and logs (default: <root>/_zookeeper)")
    p.add_argument("--id", type=int, default=1, help="this server's id in the ensemble (with --peer)")
    p.add_argument(
        "--peer",
        action="append",
        metavar="HOST:QUORUM_PORT:ELECTION_PORT",
        help="an ensemble member, in id order (1, 2, …), this server included; none = standalone",
    )
    p.set_defaults(func=_zookeeper)

    cluster = sub.add_parser("cluster", help="nodes, controller and partition leaders of a cluster", parents=[common])
    csub = cluster.add_subparsers(dest="action", required=True)
    p = csub.add_parser("status", parents=[common], help="exit status 1 when a partition has no live leader")
    p.set_defaults(func=_cluster_status)

    p = sub.add_parser(
        "maintain",
        help="retention | compact (segments) | clean (keys) | vacuum | offsets (compact _offsets) | run (scheduler)",
        parents=[common],
    )
    p.add_argument("job", choices=["retention", "compact", "clean", "vacuum", "offsets", "run"])
    p.add_argument("--topic", help="only this topic (default: every topic)")
    p.add_argument("--every", default="5m", help="run: time between cycles (30s, 5m, 1h)")
    p.add_argument("--cycles", type=int, help="run: stop after this many cycles (default: run until stopped)")
    p.add_argument("--vacuum-retention-hours", type=int, default=168, help="vacuum: keep removed files this long")
    p.add_argument("--no-spark", action="store_true", help="no SparkSession: compact in-process, skip clean")
    p.add_argument("--json", action="store_true", help="print the run's report as JSON")
    p.set_defaults(func=_maintain)

    p = sub.add_parser("demo", help="create a topic, produce, consume, describe", parents=[common])
    p.set_defaults(func=_demo)
    return parser


if __name__ == "__main__":
    sys.exit(main())
