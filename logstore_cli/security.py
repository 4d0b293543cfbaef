"""``logstore keys``, ``acls`` and ``quotas``: API keys, Kafka ACLs and byte-rate quotas.

Through a server (``--server HOST:PORT``, as ``kafka-acls --bootstrap-server``): the caller's principal needs
ALTER on the cluster to change and DESCRIBE on the cluster to list; in cluster mode any node will do, as every
node shares the store. Or on the store itself, as Kafka's old ``kafka-acls --authorizer-properties
zookeeper.connect=``: the root's ``_security/`` files (``--root``), or ZooKeeper in cluster mode (the config's
``zookeeper.connect``, or ``--zookeeper HOST:PORT[/chroot]``); whoever can write it is the administrator, which is
how the first super user's key is made. Either way every change writes an audit line (on the store path, on
stderr naming the local OS user; through a server, in the server's log naming the caller).
"""

from __future__ import annotations

import argparse
import datetime

from logstore.config import LogstoreConfig
from logstore.errors import InvalidRequestError
from logstore.security import AclBinding, Operation, PatternType, Permission, Quota, ResourceType, parse_principal
from logstore.security.acl import CLUSTER_NAME
from logstore_cli._admin import admin
from logstore_cli._common import Parents, Subparsers, print_table

__all__ = ["register"]

_WHERE = "through --server (ALTER on the cluster), or on --root / --zookeeper"


def register(sub: Subparsers, parents: Parents) -> None:
    """Add ``keys``, ``acls`` and ``quotas`` and their actions."""
    zookeeper = argparse.ArgumentParser(add_help=False)
    zookeeper.add_argument(
        "--zookeeper",
        default=argparse.SUPPRESS,  # given before or after the action, as the common options
        metavar="HOST:PORT[/chroot]",
        help="manage the cluster's store in ZooKeeper directly (overrides zookeeper.connect of the config)",
    )
    common = [argparse.ArgumentParser(add_help=False, parents=[parents.server, zookeeper])]
    keys = sub.add_parser("keys", help=f"API keys: create, list, revoke ({_WHERE})", parents=common)
    ksub = keys.add_subparsers(dest="action", required=True, title="actions")
    p = ksub.add_parser("create", parents=common, help="create a key; it is printed once, on the last line")
    p.add_argument("--principal", required=True, help="who the key authenticates: TYPE:NAME, e.g. User:alice")
    p.set_defaults(func=_keys_create)
    p = ksub.add_parser("list", parents=common, help="key ids, principals and creation times (never the keys)")
    p.set_defaults(func=_keys_list)
    p = ksub.add_parser("revoke", parents=common, help="revoke every key of a principal, or one key")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--principal", help="revoke every key of this principal (TYPE:NAME)")
    which.add_argument("--key-id", help="revoke this one key (its id, as keys list shows it)")
    p.set_defaults(func=_keys_revoke)

    acls = sub.add_parser("acls", help=f"Kafka ACLs: add, remove, list ({_WHERE})", parents=common)
    asub = acls.add_subparsers(dest="action", required=True, title="actions")
    for action, func, what in (("add", _acls_add, "add ACLs"), ("remove", _acls_remove, "remove ACLs (exact ones)")):
        p = asub.add_parser(action, parents=common, help=f"{what}: one per principal and operation")
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
        resource.add_argument(
            "--transactional-id", help="a transactional id, a prefix (with prefixed) or * for every one"
        )
        resource.add_argument("--cluster", action="store_true", help="the cluster (creating topics, metrics, admin)")
        p.add_argument(
            "--resource-pattern-type",
            choices=[t.value for t in PatternType],
            default="literal",
            help="literal: the name (or *) as given; prefixed: every name that starts with it",
        )
        p.set_defaults(func=func)
    p = asub.add_parser("list", parents=common, help="every ACL, in the order they were added")
    p.set_defaults(func=_acls_list)

    quotas = sub.add_parser("quotas", help=f"client byte-rate quotas: set, remove, list ({_WHERE})", parents=common)
    qsub = quotas.add_subparsers(dest="action", required=True, title="actions")
    p = qsub.add_parser("set", parents=common, help="set a principal's (or one client id's) byte rates")
    p.add_argument("--principal", required=True, help="TYPE:NAME, e.g. User:alice")
    p.add_argument("--client-id", help="only this X-Client-Id of the principal (wins over the principal's quota)")
    p.add_argument("--producer-byte-rate", type=_byte_rate, help="produce request bytes per second")
    p.add_argument("--consumer-byte-rate", type=_byte_rate, help="fetch response bytes per second")
    p.set_defaults(func=_quotas_set)
    p = qsub.add_parser("remove", parents=common, help="remove a principal's (or one client id's) quota")
    p.add_argument("--principal", required=True, help="TYPE:NAME, e.g. User:alice")
    p.add_argument("--client-id", help="the quota of this X-Client-Id of the principal, not the principal's own")
    p.set_defaults(func=_quotas_remove)
    p = qsub.add_parser("list", parents=common, help="every quota")
    p.set_defaults(func=_quotas_list)


def _keys_create(args: argparse.Namespace, config: LogstoreConfig) -> None:
    with admin(args, config) as a:
        row, key = a.create_key(args.principal)
    print(f"Created key {row.key_id} for {row.principal}. It is shown only now; store it safely:")
    print(key)


def _keys_list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    with admin(args, config) as a:
        rows = a.list_keys()
    print_table(["KEY-ID", "PRINCIPAL", "CREATED"], [[k.key_id, k.principal, _iso(k.created_ms)] for k in rows])


def _keys_revoke(args: argparse.Namespace, config: LogstoreConfig) -> int:
    with admin(args, config) as a:
        removed = a.revoke_keys(principal=args.principal, key_id=args.key_id)
    for k in removed:
        print(f"Revoked key {k.key_id} of {k.principal}.")
    if not removed:
        which = f"--principal {args.principal}" if args.principal else f"--key-id {args.key_id}"
        raise InvalidRequestError(f"no key matches {which} (keys list shows them)")
    return 0


def _acl_bindings(args: argparse.Namespace) -> list[AclBinding]:
    if args.cluster:
        rtype, name = ResourceType.CLUSTER, CLUSTER_NAME
    elif args.topic is not None:
        rtype, name = ResourceType.TOPIC, args.topic
    elif args.transactional_id is not None:
        rtype, name = ResourceType.TRANSACTIONAL_ID, args.transactional_id
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
    acls = _acl_bindings(args)
    with admin(args, config) as a:
        added = set(a.add_acls(acls))
    _print_acls([("Added" if acl in added else "Already present", acl) for acl in acls], "RESULT")


def _acls_remove(args: argparse.Namespace, config: LogstoreConfig) -> None:
    acls = _acl_bindings(args)
    with admin(args, config) as a:
        removed = set(a.remove_acls(acls))
    _print_acls([("Removed" if acl in removed else "Not present", acl) for acl in acls], "RESULT")


def _acls_list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    with admin(args, config) as a:
        acls = a.list_acls()
    _print_acls([(None, acl) for acl in acls])


def _print_acls(rows: list[tuple[str | None, AclBinding]], first: str | None = None) -> None:
    """One ACL a line: PRINCIPAL PERMISSION OPERATION RESOURCE-TYPE PATTERN-TYPE RESOURCE-NAME, after ``first``."""
    headers = ["PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE-TYPE", "PATTERN-TYPE", "RESOURCE-NAME"]
    table = [
        ([result] if first else [])
        + [a.principal, a.permission.value, a.operation.value, a.resource_type.value, a.pattern_type.value]
        + [a.resource_name]
        for result, a in rows
    ]
    print_table(([first] if first else []) + headers, table)


def _quotas_set(args: argparse.Namespace, config: LogstoreConfig) -> None:
    if args.producer_byte_rate is None and args.consumer_byte_rate is None:
        raise InvalidRequestError(
            "quotas set needs --producer-byte-rate or --consumer-byte-rate (or both); to remove a quota, use "
            "quotas remove"
        )
    quota = Quota(parse_principal(args.principal), args.client_id, args.producer_byte_rate, args.consumer_byte_rate)
    with admin(args, config) as a:
        a.set_quota(quota)
    print(f"Set quota of {_entity(quota.principal, quota.client_id)}.")
    _print_quotas([quota])


def _quotas_remove(args: argparse.Namespace, config: LogstoreConfig) -> None:
    with admin(args, config) as a:
        removed = a.remove_quota(parse_principal(args.principal), args.client_id)
    if removed is None:
        raise InvalidRequestError(f"{_entity(args.principal, args.client_id)} has no quota (quotas list shows them)")
    print(f"Removed quota of {_entity(removed.principal, removed.client_id)}.")


def _quotas_list(args: argparse.Namespace, config: LogstoreConfig) -> None:
    with admin(args, config) as a:
        _print_quotas(a.list_quotas())


def _print_quotas(quotas: list[Quota]) -> None:
    print_table(
        ["PRINCIPAL", "CLIENT-ID", "PRODUCER-BYTE-RATE", "CONSUMER-BYTE-RATE"],
        [[q.principal, q.client_id, q.producer_byte_rate, q.consumer_byte_rate] for q in quotas],
    )


def _entity(principal: str, client_id: str | None) -> str:
    return principal if client_id is None else f"{principal} client-id {client_id}"


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="seconds")


def _byte_rate(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a byte rate is a positive number of bytes per second, got '{text}'")
    return value
