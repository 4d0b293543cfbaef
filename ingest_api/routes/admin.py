"""/v1/admin: API keys, ACLs and quotas through the server, as Kafka's AdminClient manages ACLs and quotas.

Reading needs DESCRIBE on the cluster, changing needs ALTER on the cluster
(``kafka-acls --bootstrap-server`` needs the same). Every change goes to the
shared security store through :class:`~logstore.security.SecurityAdmin`, which
writes the audit line naming the caller: in cluster mode the store is
ZooKeeper's, so a change made through any node is enforced by every node. A
key's secret is in the answer that creates it and nowhere else, ever.

A node with ``security.enabled`` false uses no keys, ACLs or quotas: these
routes answer 400 ``SECURITY_DISABLED`` there, as Kafka's ACL requests do on a
broker without an authorizer.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from ingest_api.deps import Access, AccessDep, requires
from logstore.errors import SecurityDisabledError
from logstore.security import (
    AclBinding,
    ApiKey,
    Operation,
    PatternType,
    Permission,
    Quota,
    ResourceType,
    SecurityAdmin,
    parse_principal,
)

router = APIRouter(prefix="/v1/admin", tags=["admin"])

DESCRIBE = [requires(Operation.DESCRIBE, ResourceType.CLUSTER)]
ALTER = [requires(Operation.ALTER, ResourceType.CLUSTER)]
Principal = Annotated[str, Field(min_length=3, description="TYPE:NAME, e.g. User:alice (User:* = everyone)")]
ByteRate = Annotated[int, Field(ge=1, description="bytes per second")]


def _admin(access: Access) -> SecurityAdmin:
    """The store's admin, acting for the caller.

    Raises:
        SecurityDisabledError: this node has ``security.enabled`` false.
    """
    if access.guard is None:
        raise SecurityDisabledError(
            "security.enabled is false on this node: it uses no API keys, ACLs or quotas. Set security.enabled=true "
            "(and super.users) on every node first; the first super user's key is made with `logstore keys create "
            "--root DIR` (or --zookeeper in cluster mode)"
        )
    return SecurityAdmin(access.guard.store, access.principal)


# -- keys -----------------------------------------------------------------------------


class KeyOut(BaseModel):
    key_id: str = Field(description="the public part of the key")
    principal: str
    created_ms: int = Field(description="ms since the epoch")


class CreatedKey(KeyOut):
    key: str = Field(description="the full key (Authorization: Bearer <key>); shown in this answer only")


class CreateKey(BaseModel):
    model_config = ConfigDict(extra="forbid")
    principal: Principal


class KeyList(BaseModel):
    keys: list[KeyOut]


class RevokedKeys(BaseModel):
    revoked: list[KeyOut] = Field(description="the keys removed (empty: none matched)")


def _key_out(k: ApiKey) -> KeyOut:
    return KeyOut(key_id=k.key_id, principal=k.principal, created_ms=k.created_ms)


@router.get("/keys", response_model=KeyList, dependencies=DESCRIBE)
async def list_keys(access: AccessDep) -> KeyList:
    """Every key's id, principal and creation time: DESCRIBE on the cluster. Never a secret (none is stored)."""
    return KeyList(keys=[_key_out(k) for k in _admin(access).list_keys()])


@router.post("/keys", status_code=201, response_model=CreatedKey, dependencies=ALTER)
async def create_key(body: CreateKey, access: AccessDep) -> CreatedKey:
    """A new key for ``principal``: ALTER on the cluster. The full key is in this answer only."""
    record, key = await run_in_threadpool(_admin(access).create_key, body.principal)
    return CreatedKey(key_id=record.key_id, principal=record.principal, created_ms=record.created_ms, key=key)


@router.delete("/keys/{key_id}", response_model=RevokedKeys, dependencies=ALTER)
async def revoke_key(key_id: str, access: AccessDep) -> RevokedKeys:
    """Revoke one key: ALTER on the cluster. Every node refuses it from then on."""
    removed = await run_in_threadpool(lambda: _admin(access).revoke_keys(key_id=key_id))
    return RevokedKeys(revoked=[_key_out(k) for k in removed])


@router.delete("/keys", response_model=RevokedKeys, dependencies=ALTER)
async def revoke_keys(
    access: AccessDep, principal: Annotated[str, Query(description="revoke every key of this principal")]
) -> RevokedKeys:
    """Revoke every key of ``principal``: ALTER on the cluster."""
    removed = await run_in_threadpool(lambda: _admin(access).revoke_keys(principal=principal))
    return RevokedKeys(revoked=[_key_out(k) for k in removed])


# -- ACLs -----------------------------------------------------------------------------


class Acl(BaseModel):
    """One ACL binding, as Kafka's AclBinding: a resource pattern and an access control entry."""

    model_config = ConfigDict(extra="forbid")
    principal: Principal
    resource_type: Literal["topic", "group", "transactional_id", "cluster"]
    resource_name: str = Field(min_length=1, description="a name, a prefix (prefixed) or * (every resource)")
    pattern_type: Literal["literal", "prefixed"] = "literal"
    operation: Literal["READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "ALL"]
    permission: Literal["ALLOW", "DENY"] = "ALLOW"

    def binding(self) -> AclBinding:
        return AclBinding(
            parse_principal(self.principal),
            ResourceType(self.resource_type),
            self.resource_name,
            PatternType(self.pattern_type),
            Operation(self.operation),
            Permission(self.permission),
        )


class AclList(BaseModel):
    acls: list[Acl]


class AclsAdded(BaseModel):
    added: list[Acl] = Field(description="bindings that were not there before")
    already_present: list[Acl]


class AclsRemoved(BaseModel):
    removed: list[Acl] = Field(description="bindings that were there")
    not_present: list[Acl]


def _acls(bindings: list[AclBinding]) -> list[Acl]:
    return [Acl.model_validate(b.to_dict()) for b in bindings]


@router.get("/acls", response_model=AclList, dependencies=DESCRIBE)
async def list_acls(access: AccessDep) -> AclList:
    """Kafka's DescribeAcls: every binding, in the order they were added; DESCRIBE on the cluster."""
    return AclList(acls=_acls(_admin(access).list_acls()))


@router.post("/acls", response_model=AclsAdded, dependencies=ALTER)
async def add_acls(body: AclList, access: AccessDep) -> AclsAdded:
    """Kafka's CreateAcls: ALTER on the cluster. Adding a binding that exists changes nothing."""
    wanted = [a.binding() for a in body.acls]
    added = set(await run_in_threadpool(_admin(access).add_acls, wanted))
    return AclsAdded(
        added=_acls([a for a in wanted if a in added]), already_present=_acls([a for a in wanted if a not in added])
    )


@router.delete("/acls", response_model=AclsRemoved, dependencies=ALTER)
async def remove_acls(body: AclList, access: AccessDep) -> AclsRemoved:
    """Kafka's DeleteAcls for exact bindings (the body names them): ALTER on the cluster."""
    wanted = [a.binding() for a in body.acls]
    removed = set(await run_in_threadpool(_admin(access).remove_acls, wanted))
    return AclsRemoved(
        removed=_acls([a for a in wanted if a in removed]), not_present=_acls([a for a in wanted if a not in removed])
    )


# -- quotas ---------------------------------------------------------------------------


class QuotaIn(BaseModel):
    """A client quota, as Kafka's ``user`` (and ``client-id``) entity with ``producer_byte_rate`` /
    ``consumer_byte_rate``; at least one rate."""

    model_config = ConfigDict(extra="forbid")
    principal: Principal
    client_id: str | None = Field(None, description="only this X-Client-Id of the principal; null = all its clients")
    producer_byte_rate: ByteRate | None = None
    consumer_byte_rate: ByteRate | None = None


class QuotaList(BaseModel):
    quotas: list[QuotaIn]


class QuotaRemoved(BaseModel):
    removed: QuotaIn | None = Field(description="the quota removed; null when there was none")


@router.get("/quotas", response_model=QuotaList, dependencies=DESCRIBE)
async def list_quotas(access: AccessDep) -> QuotaList:
    """Kafka's DescribeClientQuotas: every quota; DESCRIBE on the cluster."""
    return QuotaList(quotas=[QuotaIn.model_validate(q.to_dict()) for q in _admin(access).list_quotas()])


@router.put("/quotas", response_model=QuotaIn, dependencies=ALTER)
async def set_quota(body: QuotaIn, access: AccessDep) -> QuotaIn:
    """Kafka's AlterClientQuotas: set (replace) the quota of (principal, client id); ALTER on the cluster.

    A rate left out is no limit of that kind; leaving out both is 400 INVALID_REQUEST (remove it with DELETE).
    """
    quota = Quota(body.principal, body.client_id, body.producer_byte_rate, body.consumer_byte_rate)
    await run_in_threadpool(_admin(access).set_quota, quota)
    return body


@router.delete("/quotas", response_model=QuotaRemoved, dependencies=ALTER)
async def remove_quota(
    access: AccessDep,
    principal: Annotated[str, Query(description="TYPE:NAME")],
    client_id: Annotated[str | None, Query(description="the client id's quota, not the principal's")] = None,
) -> QuotaRemoved:
    """Remove the quota of (principal, client id): ALTER on the cluster."""
    removed = await run_in_threadpool(_admin(access).remove_quota, principal, client_id)
    return QuotaRemoved(removed=QuotaIn.model_validate(removed.to_dict()) if removed else None)
