"""Security: API keys, Kafka's ACLs, client quotas, audit lines.

No HTTP here: ``ingest_api`` turns these decisions into statuses and headers. Keys, ACLs and quotas change
through :class:`SecurityAdmin`, whoever asks: the server's ``/v1/admin`` routes, or the ``logstore`` CLI on
their store directly (the root's files; in cluster mode ZooKeeper, :mod:`logstore.cluster.security_store`).
"""

from logstore.security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    authorize,
    parse_principal,
)
from logstore.security.admin import SecurityAdmin
from logstore.security.audit import AUDIT_LOGGER, audit, log_audit_to_stderr
from logstore.security.guard import Guard, parse_super_users
from logstore.security.keys import ApiKey, new_key
from logstore.security.principal import PrincipalMapper
from logstore.security.quotas import Quota, QuotaKind, QuotaManager
from logstore.security.store import FileSecurityStore, SecurityState, SecurityStore

__all__ = [
    "AUDIT_LOGGER",
    "CLUSTER_NAME",
    "WILDCARD",
    "AclBinding",
    "ApiKey",
    "FileSecurityStore",
    "Guard",
    "Operation",
    "PatternType",
    "Permission",
    "PrincipalMapper",
    "Quota",
    "QuotaKind",
    "QuotaManager",
    "Resource",
    "ResourceType",
    "SecurityAdmin",
    "SecurityState",
    "SecurityStore",
    "audit",
    "authorize",
    "log_audit_to_stderr",
    "new_key",
    "parse_principal",
    "parse_super_users",
]
