"""Where ``logstore keys|acls|quotas`` make their changes: a server's ``/v1/admin`` routes, or the store itself.

Both sides offer the same :class:`Admin` operations, so each command is written once. Through a server
(``--server``) the caller's principal needs ALTER on the cluster (DESCRIBE to list), and the server writes the
audit line; on the store (``--root``, ``--zookeeper``) whoever can write it is the administrator, and the audit
line names the local OS user.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
from collections.abc import Iterator
from typing import NamedTuple, Protocol
from urllib.parse import quote

from logstore.client import RemoteStore
from logstore.cluster.security_store import open_security_store
from logstore.config import LogstoreConfig
from logstore.errors import InvalidConfigError
from logstore.security import AclBinding, ApiKey, Quota, SecurityAdmin, log_audit_to_stderr
from logstore_cli._common import remote

__all__ = ["Admin", "KeyRow", "admin"]


class KeyRow(NamedTuple):
    """What is shown of a key: never its secret."""

    key_id: str
    principal: str
    created_ms: int
    """Creation time, ms since the epoch."""


class Admin(Protocol):
    """Keys, ACLs and quotas, read and changed (see :class:`~logstore.security.SecurityAdmin` for the meanings)."""

    def list_keys(self) -> list[KeyRow]: ...

    def create_key(self, principal: str) -> tuple[KeyRow, str]: ...

    def revoke_keys(self, *, principal: str | None = None, key_id: str | None = None) -> list[KeyRow]: ...

    def list_acls(self) -> list[AclBinding]: ...

    def add_acls(self, acls: list[AclBinding]) -> list[AclBinding]: ...

    def remove_acls(self, acls: list[AclBinding]) -> list[AclBinding]: ...

    def list_quotas(self) -> list[Quota]: ...

    def set_quota(self, quota: Quota) -> None: ...

    def remove_quota(self, principal: str, client_id: str | None = None) -> Quota | None: ...


@contextlib.contextmanager
def admin(args: argparse.Namespace, config: LogstoreConfig) -> Iterator[Admin]:
    """Through ``--server`` when given, else on the store the servers read (``--zookeeper`` over the config's
    ``zookeeper.connect``, else the root's files), closed after the command.

    Raises:
        InvalidConfigError: both ``--server`` and ``--zookeeper``: two different places to make the change.
    """
    if getattr(args, "server", None):
        if getattr(args, "zookeeper", None):
            raise InvalidConfigError(
                "give --server (through a server: ALTER on the cluster) or --zookeeper (on the store), not both"
            )
        yield _ServerAdmin(remote(args))
        return
    log_audit_to_stderr()
    if getattr(args, "zookeeper", None):
        config = dataclasses.replace(config, zookeeper_connect=args.zookeeper)
    with open_security_store(config) as store:
        yield _StoreAdmin(SecurityAdmin(store, f"Local:{getpass.getuser()}"))


def _row(k: ApiKey) -> KeyRow:
    return KeyRow(k.key_id, k.principal, k.created_ms)


class _StoreAdmin:
    """:class:`Admin` on the store itself; the audit lines name the local OS user."""

    def __init__(self, admin: SecurityAdmin) -> None:
        self._admin = admin

    def list_keys(self) -> list[KeyRow]:
        return [_row(k) for k in self._admin.list_keys()]

    def create_key(self, principal: str) -> tuple[KeyRow, str]:
        record, key = self._admin.create_key(principal)
        return _row(record), key

    def revoke_keys(self, *, principal: str | None = None, key_id: str | None = None) -> list[KeyRow]:
        return [_row(k) for k in self._admin.revoke_keys(principal=principal, key_id=key_id)]

    def list_acls(self) -> list[AclBinding]:
        return self._admin.list_acls()

    def add_acls(self, acls: list[AclBinding]) -> list[AclBinding]:
        return self._admin.add_acls(acls)

    def remove_acls(self, acls: list[AclBinding]) -> list[AclBinding]:
        return self._admin.remove_acls(acls)

    def list_quotas(self) -> list[Quota]:
        return self._admin.list_quotas()

    def set_quota(self, quota: Quota) -> None:
        self._admin.set_quota(quota)

    def remove_quota(self, principal: str, client_id: str | None = None) -> Quota | None:
        return self._admin.remove_quota(principal, client_id)


class _ServerAdmin:
    """:class:`Admin` through a server's ``/v1/admin`` routes (docs/http-api.md); the server audits."""

    def __init__(self, server: RemoteStore) -> None:
        self._server = server

    def list_keys(self) -> list[KeyRow]:
        return [KeyRow(**k) for k in self._server.request("GET", "/v1/admin/keys")["keys"]]

    def create_key(self, principal: str) -> tuple[KeyRow, str]:
        body = self._server.request("POST", "/v1/admin/keys", json={"principal": principal})
        key = body.pop("key")
        return KeyRow(**body), key

    def revoke_keys(self, *, principal: str | None = None, key_id: str | None = None) -> list[KeyRow]:
        if key_id is not None:
            body = self._server.request("DELETE", f"/v1/admin/keys/{quote(key_id, safe='')}")
        else:
            body = self._server.request("DELETE", "/v1/admin/keys", params={"principal": principal})
        return [KeyRow(**k) for k in body["revoked"]]

    def list_acls(self) -> list[AclBinding]:
        return [AclBinding.from_dict(a) for a in self._server.request("GET", "/v1/admin/acls")["acls"]]

    def add_acls(self, acls: list[AclBinding]) -> list[AclBinding]:
        body = self._server.request("POST", "/v1/admin/acls", json={"acls": [a.to_dict() for a in acls]})
        return [AclBinding.from_dict(a) for a in body["added"]]

    def remove_acls(self, acls: list[AclBinding]) -> list[AclBinding]:
        body = self._server.request("DELETE", "/v1/admin/acls", json={"acls": [a.to_dict() for a in acls]})
        return [AclBinding.from_dict(a) for a in body["removed"]]

    def list_quotas(self) -> list[Quota]:
        return [Quota.from_dict(q) for q in self._server.request("GET", "/v1/admin/quotas")["quotas"]]

    def set_quota(self, quota: Quota) -> None:
        self._server.request("PUT", "/v1/admin/quotas", json=quota.to_dict())

    def remove_quota(self, principal: str, client_id: str | None = None) -> Quota | None:
        params = {"principal": principal} | ({"client_id": client_id} if client_id is not None else {})
        removed = self._server.request("DELETE", "/v1/admin/quotas", params=params)["removed"]
        return None if removed is None else Quota.from_dict(removed)
