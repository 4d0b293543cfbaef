"""``logstore keys``, ``acls`` and ``quotas``: API keys, Kafka ACLs and byte-rate quotas, managed on the store itself.

The store is the one the servers read (:func:`~logstore.cluster.security_store.open_security_store`): in cluster
mode (``zookeeper.connect`` in the config, or ``--zookeeper HOST:PORT[/chroot]`` as Kafka's old
``kafka-acls --authorizer-properties zookeeper.connect=``) the znodes every node shares, else the root's
``_security/`` files. There is no ``--server`` path: whoever can write the store is the administrator. Every change
writes an audit line on stderr naming the local OS user who made it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import getpass
import sys
from collections.abc import Iterator

from logstore.cluster.security_store import open_security_store
from logstore.config import LogstoreConfig
from logstore.errors import InvalidConfigError, InvalidRequestError
from logstore.security import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    Quota,
    ResourceType,
    SecurityStore,
    audit,
    log_audit_to_stderr,
    new_key,
    parse_principal,
)
from logstore.security.acl import CLUSTER_NAME
from logstore_cli._common import Subparsers

__all__ = ["register"]


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add ``keys``, ``acls`` and ``quotas`` and their actions; ``common`` holds the options every command takes."""
    zookeeper = argparse.ArgumentParser(add_help=False)
    zookeeper.add_argument(
        "--zookeeper",
        default=argparse.SUPPRESS,  # given before or after the action, as the common options
        metavar="HOST:PORT[/chroot]",
        help="manage the cluster's store in ZooKeeper (overrides zookeeper.connect of the config)",
    )
    common = argparse.ArgumentParser(add_help=False, parents=[common, zookeeper])
    keys = sub.add_parser(
        "keys", help="API keys: create, list, revoke (root, or ZooKeeper in cluster mode)", parents=[common]
    )
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

    acls = sub.add_parser(
        "acls", help="Kafka ACLs: add, remove, list (root, or ZooKeeper in cluster mode)", parents=[common]
    )
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

    quotas = sub.add_parser(
        "quotas", help="client byte-rate quotas: set, list (root, or ZooKeeper in cluster mode)", parents=[common]
    )
    qsub = quotas.add_subparsers(dest="action", required=True)
    p = qsub.add_parser("set", parents=[common], help="set a principal's (or one client id's) byte rates")
    p.add_argument("--principal", required=True)
    p.add_argument("--client-id", help="only this X-Client-Id of the principal (wins over the principal's quota)")
    p.add_argument("--producer-byte-rate", type=_byte_rate, help="produce request bytes per second")
    p.add_argument("--consumer-byte-rate", type=_byte_rate, help="fetch response bytes per second")
    p.set_defaults(func=_quotas_set)
    p = qsub.add_parser("list", parents=[common])
    p.set_defaults(func=_quotas_list)


@contextlib.contextmanager
def _security_store(args: argparse.Namespace, config: LogstoreConfig) -> Iterator[SecurityStore]:
    """The store the servers read, closed after the command (``--zookeeper`` wins over ``zookeeper.connect``).

    Raises:
        InvalidConfigError: ``--server`` was given: these commands work on the store, and would read another.
    """
    if getattr(args, "server", None):
        raise InvalidConfigError(
            "keys, ACLs and quotas are managed on the store itself (its root, or ZooKeeper in cluster mode), "
            "not through a server: run this without --server, with --root or --zookeeper"
        )
    log_audit_to_stderr()
    if getattr(args, "zookeeper", None):
        config = dataclasses.replace(config, zookeeper_connect=args.zookeeper)
    with open_security_store(config) as store:
        yield store


def _operator() -> str:
    """Who made a change, for the audit line: the local OS user running the CLI."""
    return f"Local:{getpass.getuser()}"


def _keys_create(args: argparse.Namespace, config: LogstoreConfig) -> None:
    record, key = new_key(parse_principal(args.principal))
    with _security_store(args, config) as store:
        store.add_key(record)
    audit("key.create", principal=_operator(), decision="CHANGED", key_id=record.key_id, subject=record.principal)
    print(f"Created key {record.key_id} for {record.principal}. It is shown only now; store it safely:")
    print(key)


def _keys_list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    with _security_store(args, config) as store:
        keys = sorted(store.snapshot().keys.values(), key=lambda k: (k.principal, k.created_ms))
    print(f"{'KEY-ID':<18} {'PRINCIPAL':<30} CREATED")
    for k in keys:
        created = datetime.datetime.fromtimestamp(k.created_ms / 1000, datetime.UTC).isoformat(timespec="seconds")
        print(f"{k.key_id:<18} {k.principal:<30} {created}")


def _keys_revoke(args: argparse.Namespace, config: LogstoreConfig) -> int:
    principal = parse_principal(args.principal) if args.principal else None
    with _security_store(args, config) as store:
        removed = store.revoke_keys(principal=principal, key_id=args.key_id)
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
    with _security_store(args, config) as store:
        changed = set(store.add_acls(acls) if add else store.remove_acls(acls))
    done, unchanged = ("Added", "Already present") if add else ("Removed", "Not present")
    for acl in acls:
        if acl in changed:
            audit("acl.add" if add else "acl.remove", principal=_operator(), decision="CHANGED", acl=acl.to_dict())
        print(f"{done if acl in changed else unchanged}: {acl}")


def _acls_list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    with _security_store(args, config) as store:
        acls = store.snapshot().acls
    for acl in acls:
        print(acl)


def _quotas_set(args: argparse.Namespace, config: LogstoreConfig) -> None:
    quota = Quota(parse_principal(args.principal), args.client_id, args.producer_byte_rate, args.consumer_byte_rate)
    with _security_store(args, config) as store:
        store.set_quota(quota)
    audit("quota.set", principal=_operator(), decision="CHANGED", quota=quota.to_dict())
    print(f"Set quota {_quota_line(quota)}")


def _quotas_list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    with _security_store(args, config) as store:
        quotas = store.snapshot().quotas
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
