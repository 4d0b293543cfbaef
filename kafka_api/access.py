"""Who a Kafka connection acts as, and what it may do: SASL/PLAIN, the node's ACLs, quotas.

Each connection has one :class:`Session`, set as the context of every
request task it starts (a :class:`contextvars.ContextVar`, which
``asyncio`` tasks and ``asyncio.to_thread`` carry along), so handlers ask
:func:`allowed` / :func:`denial` without it being passed through them.

Principals, as Kafka's listeners name them:

* ``SASL_PLAINTEXT`` / ``SASL_SSL``: the SASL/PLAIN username, as a principal
  (``alice`` is ``User:alice``; ``User:alice`` is taken as written), once its
  password — an API key of that principal (``logstore keys create``) — checks out;
* ``PLAINTEXT`` with ``security.enabled=true``: ``User:ANONYMOUS``, which the
  ACLs govern like any principal (no ACL naming it → denied), as in Kafka;
* ``security.enabled=false``: no checks at all.

The checks are the HTTP API's (:class:`~logstore.security.Guard`), so one set
of ACLs and quotas covers both doors.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import typing
import uuid
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta, i64Timedelta

from kafka_api.protocol import response_class
from logstore.errors import LogstoreError, SaslAuthenticationFailedError
from logstore.security import Guard, Operation, Resource

__all__ = ["ANONYMOUS", "Session", "allowed", "denial", "error_response", "parse_plain", "session", "use_session"]

ANONYMOUS = "User:ANONYMOUS"
"""The principal of a client of a ``PLAINTEXT`` listener while security is on (Kafka's name for it)."""


@dataclass
class Session:
    """One connection's identity.

    Attributes:
        guard: the node's security decisions; None when ``security.enabled`` is false (everything allowed).
        principal: who the connection acts as (:data:`ANONYMOUS` until SASL says otherwise).
        authenticated: whether requests other than ApiVersions and the SASL ones are served yet
            (a ``SASL_*`` listener: only after SaslAuthenticate succeeded).
    """

    guard: Guard | None
    principal: str = ANONYMOUS
    authenticated: bool = True


_SESSION: contextvars.ContextVar[Session | None] = contextvars.ContextVar("kafka_session", default=None)
_OPEN = Session(None)
"""The session outside any connection: security off."""


def use_session(current: Session) -> None:
    """Make ``current`` the session of this task (and of what it starts from now on)."""
    _SESSION.set(current)


def session() -> Session:
    """The session of the connection this code serves."""
    return _SESSION.get() or _OPEN


def allowed(operation: Operation, resource: Resource) -> bool:
    """Whether this connection's principal may ``operation`` ``resource`` (no audit line: for filtering)."""
    s = session()
    return s.guard is None or s.guard.allowed(s.principal, operation, resource)


def denial(operation: Operation, resource: Resource, *alternatives: Resource) -> LogstoreError | None:
    """None when the principal may ``operation`` ``resource`` (or one of ``alternatives``); else the error to
    answer with (``TOPIC_``/``GROUP_``/``CLUSTER_AUTHORIZATION_FAILED`` after ``resource``'s type), audited."""
    s = session()
    if s.guard is None:
        return None
    try:
        s.guard.check(s.principal, operation, resource, *alternatives)
    except LogstoreError as e:
        return e
    return None


def parse_plain(token: bytes) -> tuple[str, str]:
    """A SASL/PLAIN message (RFC 4616: ``authzid NUL authcid NUL passwd``) → (principal, password).

    Raises:
        SaslAuthenticationFailedError: not three NUL-separated parts, an empty username or password, or an
            authorization id other than the username (as Kafka's ``PlainSaslServer``).
    """
    parts = token.split(b"\0")
    if len(parts) != 3:
        raise SaslAuthenticationFailedError("Authentication failed: a SASL/PLAIN message is authzid NUL user NUL pass")
    authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
    if not user or not password:
        raise SaslAuthenticationFailedError("Authentication failed: username or password not specified")
    if authzid and authzid != user:
        raise SaslAuthenticationFailedError(
            "Authentication failed: Client requested an authorization id that is different from username"
        )
    return (user if ":" in user else f"User:{user}"), password


def error_response(api_key: int, version: int, code: int, message: str | None = None) -> Any:
    """A response of any API and version that fails as a whole with ``code``: its error fields set, every other
    field empty (zero, empty string or list, null where allowed)."""
    cls = response_class(api_key, version)
    values: dict[str, Any] = {"error_code": ErrorCode(code)}
    if message is not None:
        values["error_message"] = message
    return _empty(cls, values)


def _empty(cls: type, values: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in values and f.name in hints:
            kwargs[f.name] = values[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = _zero(hints[f.name])
    return cls(**kwargs)


def _zero(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is tuple:
        return ()
    if origin is not None and type(None) in args:
        return None
    if hint is ErrorCode:
        return ErrorCode(0)
    if hint in (i32Timedelta, i64Timedelta):
        return datetime.timedelta(0)
    if hint is uuid.UUID:
        return uuid.UUID(int=0)
    if isinstance(hint, type) and issubclass(hint, datetime.datetime):
        return datetime.datetime.fromtimestamp(0, datetime.UTC)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _empty(hint, {})
    if isinstance(hint, type) and issubclass(hint, bool):
        return False
    if isinstance(hint, type) and issubclass(hint, int):
        return hint(0)
    if isinstance(hint, type) and issubclass(hint, bytes):
        return hint(b"")
    if isinstance(hint, type) and issubclass(hint, str):
        return hint("")
    return None
