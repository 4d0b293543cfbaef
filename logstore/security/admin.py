"""Changing keys, ACLs and quotas, audited: what Kafka's AdminClient does for ``kafka-acls`` and ``kafka-configs``.

:class:`SecurityAdmin` is the one place a change is made and its audit line
written, whoever asks: the server's ``/v1/admin`` routes (``operator`` = the
authenticated caller) and the ``logstore keys|acls|quotas`` commands on the store
itself (``operator`` = the local OS user). It works on the shared
:class:`~logstore.security.store.SecurityStore`, so in cluster mode a change
made through one node is enforced by every node (the store's watches).

Where code runs: on the caller's thread; each change is one atomic update of one document of the store.
"""

from __future__ import annotations

from logstore.errors import InvalidRequestError
from logstore.security.acl import AclBinding, parse_principal
from logstore.security.audit import audit
from logstore.security.keys import ApiKey, new_key
from logstore.security.quotas import Quota
from logstore.security.store import SecurityStore

__all__ = ["SecurityAdmin"]


class SecurityAdmin:
    """Keys, ACLs and quotas of ``store``, changed on behalf of ``operator`` (``User:admin``, ``Local:alice``).

    Every change writes one audit line per thing it changed (``key.create``,
    ``key.revoke``, ``acl.add``, ``acl.remove``, ``quota.set``, ``quota.remove``)
    naming ``operator``. Authorization is the caller's business (the routes
    need ALTER on the cluster; the store path needs write access to the store).
    """

    def __init__(self, store: SecurityStore, operator: str) -> None:
        self.store = store
        self.operator = operator

    # -- keys -------------------------------------------------------------------------

    def list_keys(self) -> list[ApiKey]:
        """Every key record (id, principal, creation time; the secret is never stored), by principal and age."""
        return sorted(self.store.snapshot().keys.values(), key=lambda k: (k.principal, k.created_ms))

    def create_key(self, principal: str) -> tuple[ApiKey, str]:
        """A new key for ``principal``: its record and the full key, which exists only in this answer.

        Raises:
            InvalidRequestError: ``principal`` is not ``TYPE:NAME``.
        """
        record, key = new_key(parse_principal(principal))
        self.store.add_key(record)
        audit("key.create", principal=self.operator, decision="CHANGED", key_id=record.key_id, subject=principal)
        return record, key

    def revoke_keys(self, *, principal: str | None = None, key_id: str | None = None) -> list[ApiKey]:
        """Remove every key of ``principal``, or the key ``key_id`` (exactly one of them); returns those removed.

        Raises:
            InvalidRequestError: neither or both given, or ``principal`` is not ``TYPE:NAME``.
        """
        if (principal is None) == (key_id is None):
            raise InvalidRequestError("revoke takes a principal or a key id (one of them)")
        if principal is not None:
            parse_principal(principal)
        removed = self.store.revoke_keys(principal=principal, key_id=key_id)
        for k in removed:
            audit("key.revoke", principal=self.operator, decision="CHANGED", key_id=k.key_id, subject=k.principal)
        return removed

    # -- ACLs -------------------------------------------------------------------------

    def list_acls(self) -> list[AclBinding]:
        """Every ACL binding, in the order they were added."""
        return list(self.store.snapshot().acls)

    def add_acls(self, acls: list[AclBinding]) -> list[AclBinding]:
        """Add bindings (Kafka's CreateAcls); returns those that were not there yet."""
        added = self.store.add_acls(acls)
        for acl in added:
            audit("acl.add", principal=self.operator, decision="CHANGED", acl=acl.to_dict())
        return added

    def remove_acls(self, acls: list[AclBinding]) -> list[AclBinding]:
        """Remove bindings (Kafka's DeleteAcls, exact matches); returns those that were there."""
        removed = self.store.remove_acls(acls)
        for acl in removed:
            audit("acl.remove", principal=self.operator, decision="CHANGED", acl=acl.to_dict())
        return removed

    # -- quotas -----------------------------------------------------------------------

    def list_quotas(self) -> list[Quota]:
        """Every quota, by principal then client id (a principal's own quota first)."""
        quotas = self.store.snapshot().quotas
        return [quotas[k] for k in sorted(quotas, key=lambda k: (k[0], k[1] or ""))]

    def set_quota(self, quota: Quota) -> None:
        """Set (replace) the quota of ``(quota.principal, quota.client_id)`` (Kafka's AlterClientQuotas).

        Raises:
            InvalidRequestError: no rate at all (removing is :meth:`remove_quota`), or a bad principal.
        """
        parse_principal(quota.principal)
        if quota.producer_byte_rate is None and quota.consumer_byte_rate is None:
            raise InvalidRequestError(
                "a quota needs producer_byte_rate or consumer_byte_rate (or both); to remove one, use quotas remove"
            )
        self.store.set_quota(quota)
        audit("quota.set", principal=self.operator, decision="CHANGED", quota=quota.to_dict())

    def remove_quota(self, principal: str, client_id: str | None = None) -> Quota | None:
        """Remove the quota of ``(principal, client_id)``; returns it, or None when there was none."""
        parse_principal(principal)
        existing = self.store.snapshot().quotas.get((principal, client_id))
        if existing is None:
            return None
        self.store.set_quota(Quota(principal, client_id))  # no rate: the store drops the entry
        audit("quota.remove", principal=self.operator, decision="CHANGED", quota=existing.to_dict())
        return existing
