"""FastAPI dependencies: the node's broker and group coordinator, and the caller's identity and permissions.

Both come from app state (never built at import). Each route declares the
Kafka operation it needs next to its path, either as a decorator dependency
(``dependencies=[requires(Operation.DESCRIBE, ResourceType.TOPIC, "topic")]``,
the resource named by a path parameter; several checks in one with
:func:`checks`) or, when the resource is in the body, with
``access.require(...)`` first thing in the handler.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ingest_api.internode import ANONYMOUS, FORWARDED_PRINCIPAL, forwarded_principal, remember_caller
from ingest_api.tls import client_cert_name
from logstore.errors import SaslAuthenticationFailedError, UnknownTopicOrPartitionError
from logstore.groups.coordinator import GroupCoordinator
from logstore.node.broker import Broker
from logstore.security import Guard, Operation, QuotaKind, Resource, ResourceType, audit

__all__ = [
    "ANONYMOUS",
    "Access",
    "AccessDep",
    "BrokerDep",
    "Check",
    "CoordinatorDep",
    "allow",
    "allow_auto_create",
    "checks",
    "count_quota",
    "requires",
]


# Dependencies are ``async def`` even when they do not await: FastAPI runs a plain ``def`` dependency in its
# thread pool, a hand-off to another thread and back (and a turn of the GIL) on every request.


async def get_broker(request: Request) -> Broker:
    broker: Broker = request.app.state.broker
    return broker


BrokerDep = Annotated[Broker, Depends(get_broker)]


async def get_coordinator(request: Request) -> GroupCoordinator:
    coordinator: GroupCoordinator = request.app.state.coordinator
    return coordinator


CoordinatorDep = Annotated[GroupCoordinator, Depends(get_coordinator)]

_bearer = HTTPBearer(
    auto_error=False,
    description="An API key from `logstore keys create` (needed when security.enabled is true).",
)


@dataclass(frozen=True)
class Access:
    """Who is calling and what they may do; ``guard`` is None when security is off (everything allowed)."""

    principal: str
    guard: Guard | None

    def require(self, operation: Operation, resource: Resource, *alternatives: Resource) -> None:
        """Pass when the caller may ``operation`` ``resource`` (or one of ``alternatives``).

        Raises:
            TopicAuthorizationFailedError, GroupAuthorizationFailedError, ClusterAuthorizationFailedError: denied.
        """
        if self.guard is not None:
            self.guard.check(self.principal, operation, resource, *alternatives)

    def may(self, operation: Operation, resource: Resource) -> bool:
        """Whether the caller may ``operation`` ``resource``: for filtering what a list shows."""
        return self.guard is None or self.guard.allowed(self.principal, operation, resource)


async def get_access(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Access:
    """Authenticate the request when security is on: its API key, else its verified client certificate.

    ``Authorization: Bearer <key>`` names the principal when sent; without
    one, a client certificate the TLS handshake verified
    (``server.ssl.client.auth``) names it through ``ssl.principal.mapping.rules``
    — unless that principal is a super user (another node's certificate) and
    the request names the client it forwards in ``X-Logstore-Forwarded-Principal``
    (:mod:`ingest_api.internode`): then that client is the caller. The header
    counts on no other request.

    Raises:
        SaslAuthenticationFailedError: neither, an unknown, revoked or wrong key, or a certificate
            no mapping rule matches (401).
    """
    guard: Guard | None = request.app.state.guard
    remember_caller(None, None)
    if guard is None:
        return Access(ANONYMOUS, None)
    if credentials is None and (dn := client_cert_name(request.scope)) is not None:
        certified = guard.certificate_principal(dn)
        claimed = forwarded_principal(request.headers.get(FORWARDED_PRINCIPAL))
        if claimed and certified in guard.super_users:  # another node, acting for a client it authenticated
            request.state.principal = claimed
            return Access(claimed, guard)
        remember_caller(None, certified)
        request.state.principal = certified
        return Access(certified, guard)
    if credentials is None:
        audit("authenticate", principal=None, decision="DENIED", reason="no credentials", path=request.url.path)
        raise SaslAuthenticationFailedError("this server needs an API key: send 'Authorization: Bearer <key>'")
    key = credentials.credentials
    principal = guard.authenticate_cached(key) or await run_in_threadpool(guard.authenticate, key)
    if principal is None:
        raise SaslAuthenticationFailedError("unknown, revoked or malformed API key")
    remember_caller(request.headers.get("authorization"), None)
    request.state.principal = principal
    return Access(principal, guard)


AccessDep = Annotated[Access, Depends(get_access)]


Check = Callable[[Request, Access], Awaitable[None]]
"""One step of a route's checks (:func:`checks`): raises to refuse the request."""


def checks(*steps: Check) -> Any:
    """A route dependency that runs ``steps`` in order, for one authenticated caller.

    One dependency rather than one per step: FastAPI's own work per
    dependency and request (tens of microseconds) cost the produce route
    more than its checks did.
    """

    async def run(request: Request, access: AccessDep) -> None:
        for step in steps:
            await step(request, access)

    return Depends(run)


def requires(operation: Operation, resource_type: ResourceType, param: str | None = None) -> Any:
    """A route dependency: the caller needs ``operation`` on the resource the path parameter ``param`` names."""
    return checks(allow(operation, resource_type, param))


def allow(operation: Operation, resource_type: ResourceType, param: str | None = None) -> Check:
    """A check: the caller needs ``operation`` on the resource the path parameter ``param`` names.

    ``param`` is None for the cluster resource.
    """

    async def check(request: Request, access: Access) -> None:
        if resource_type is ResourceType.CLUSTER:
            access.require(operation, Resource.cluster())
        else:
            assert param is not None
            access.require(operation, Resource(resource_type, request.path_params[param]))

    return check


def count_quota(kind: QuotaKind) -> Check:
    """A check that refuses nothing: the route's bytes count against the caller's ``producer`` or ``consumer`` rate.

    :class:`ingest_api.quotas.QuotaMiddleware` delays the response when the caller is over its quota.
    """

    async def mark(request: Request, access: Access) -> None:
        if access.guard is not None:
            request.state.quota = (kind, access.principal, request.headers.get("x-client-id"))

    return mark


def allow_auto_create(param: str = "topic") -> Check:
    """A produce-route check: auto-creating the topic (``auto.create.topics.enable``) needs CREATE, as in Kafka.

    CREATE on the topic or on the cluster; without it a produce to a missing
    topic is UNKNOWN_TOPIC_OR_PARTITION and nothing is created.
    """

    async def check(request: Request, access: Access) -> None:
        broker: Broker = request.app.state.broker
        topic = request.path_params[param]
        if (
            access.guard is None
            or not broker.config.auto_create_topics_enable
            or broker.pipeline_if_open(topic) is not None
        ):
            return
        if await run_in_threadpool(broker.store.catalog.exists, topic):
            return
        if not (
            access.may(Operation.CREATE, Resource.topic(topic)) or access.may(Operation.CREATE, Resource.cluster())
        ):
            raise UnknownTopicOrPartitionError(
                f"topic '{topic}' does not exist and {access.principal} may not create it "
                "(auto-creation needs CREATE on the topic or the cluster)"
            )

    return check
