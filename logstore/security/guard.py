"""The security decisions of one node: who a key is, what a principal may do, how long to throttle.

:class:`Guard` ties the shared :class:`~logstore.security.store.SecurityStore`
to the node's configuration (``super.users``, quota windows). It knows nothing
of HTTP: the API layer turns its answers into statuses and headers.
"""

from __future__ import annotations

import time

from logstore.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    LogstoreError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from logstore.security.acl import Operation, Resource, ResourceType, authorize
from logstore.security.audit import audit
from logstore.security.keys import ApiKey, KeyVerifier, split_key
from logstore.security.principal import PrincipalMapper
from logstore.security.quotas import QuotaKind, QuotaManager
from logstore.security.store import SecurityStore

__all__ = ["Guard", "parse_super_users"]

_DENIED: dict[ResourceType, type[LogstoreError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailedError,
    ResourceType.GROUP: GroupAuthorizationFailedError,
    ResourceType.CLUSTER: ClusterAuthorizationFailedError,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailedError,
}


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users`` as Kafka writes it: principals separated by ``;`` (``User:admin;User:ops``)."""
    return frozenset(p.strip() for p in text.split(";") if p.strip())


class Guard:
    """Authentication, authorization and quotas over a shared store. Thread-safe.

    Args:
        store: where keys, ACLs and quotas live.
        super_users: principals allowed everything (``super.users``).
        quota_window_samples: ``quota.window.num``.
        quota_window_sample_s: ``quota.window.size.seconds``.
        principal_mapper: how a verified client certificate names its principal
            (``ssl.principal.mapping.rules``); Kafka's ``DEFAULT`` when not given.
    """

    def __init__(
        self,
        store: SecurityStore,
        *,
        super_users: frozenset[str] = frozenset(),
        quota_window_samples: int = 11,
        quota_window_sample_s: float = 1.0,
        principal_mapper: PrincipalMapper | None = None,
    ) -> None:
        self.store = store
        self._mapper = principal_mapper or PrincipalMapper()
        self.super_users = super_users
        self._verifier = KeyVerifier()
        self._quotas = QuotaManager(window_samples=quota_window_samples, window_sample_s=quota_window_sample_s)

    # -- authentication -------------------------------------------------------------

    def _lookup(self, key: str) -> tuple[ApiKey, str] | None:
        parts = split_key(key)
        if parts is None:
            return None
        record = self.store.snapshot().keys.get(parts[0])
        return None if record is None else (record, parts[1])

    def authenticate_cached(self, key: str) -> str | None:
        """The principal of ``key`` when it was accepted before (no KDF); None when :meth:`authenticate` must say."""
        found = self._lookup(key)
        if found is None or not self._verifier.cached(*found):
            return None
        return found[0].principal

    def authenticate(self, key: str) -> str | None:
        """The principal ``key`` authenticates, or None (unknown, revoked or wrong); may run scrypt (tens of ms)."""
        found = self._lookup(key)
        if found is None or not self._verifier.verify(*found):
            audit("authenticate", principal=None, decision="DENIED", key_id=found[0].key_id if found else None)
            return None
        return found[0].principal

    def certificate_principal(self, dn: str) -> str:
        """The principal a verified client certificate with subject ``dn`` (RFC 2253) authenticates.

        Raises:
            SaslAuthenticationFailedError: no ``ssl.principal.mapping.rules`` rule matches.
        """
        try:
            return self._mapper.principal(dn)
        except SaslAuthenticationFailedError:
            audit("authenticate", principal=None, decision="DENIED", certificate=dn)
            raise

    # -- authorization ----------------------------------------------------------------

    def allowed(self, principal: str, operation: Operation, resource: Resource) -> bool:
        """Whether ``principal`` may ``operation`` ``resource`` (no audit line: for filtering lists)."""
        return authorize(self.store.snapshot().acls, principal, operation, resource, super_users=self.super_users)

    def check(self, principal: str, operation: Operation, resource: Resource, *alternatives: Resource) -> None:
        """Pass when ``principal`` may ``operation`` ``resource`` or any of ``alternatives``; audit a denial.

        Raises:
            TopicAuthorizationFailedError, GroupAuthorizationFailedError, ClusterAuthorizationFailedError:
                denied; the class follows ``resource``'s type.
        """
        for r in (resource, *alternatives):
            if self.allowed(principal, operation, r):
                return
        audit(
            "authorize",
            principal=principal,
            decision="DENIED",
            operation=operation.value,
            resource_type=resource.type.value,
            resource_name=resource.name,
        )
        raise _DENIED[resource.type](
            f"{principal} is not allowed {operation.value} on {resource.type.value} '{resource.name}'"
            " (logstore acls add --allow-principal …)"
        )

    # -- quotas ------------------------------------------------------------------------

    def throttle_s(self, principal: str, client_id: str | None, kind: QuotaKind, nbytes: int) -> float:
        """Count ``nbytes`` against the principal's (or client id's) quota; the delay it earns, in seconds."""
        quota = QuotaManager.quota_for(self.store.snapshot().quotas, principal, client_id)
        if quota is None:
            return 0.0
        return self._quotas.record(quota, kind, nbytes, time.monotonic())
