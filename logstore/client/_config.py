"""The clients' configuration: confluent-kafka's dict of dotted keys, keyword arguments merged over it.

As confluent-kafka: ``Producer({"bootstrap.servers": "127.0.0.1:8080", "linger.ms": 5})``.
A keyword argument names the same key with ``_`` for ``.`` (``linger_ms=5``);
a few older keyword names are aliases of Kafka's keys. An unknown key is an
:class:`~logstore.errors.InvalidConfigError` (Kafka's ``ConfigException``)
naming it and listing the keys the client knows. Values may be given as
strings, as a properties file holds them (``"true"``, ``"5"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from logstore.errors import InvalidConfigError

__all__ = ["as_bool", "as_int", "bootstrap_servers", "client_config", "producer_config"]

_PRODUCER_DEFAULTS: dict[str, Any] = {
    "bootstrap.servers": None,
    "security.protocol": "PLAINTEXT",
    "acks": "all",
    "linger.ms": 5,
    "batch.num.messages": 1000,
    "enable.idempotence": True,
    "delivery.timeout.ms": 120_000,
    "metadata.max.age.ms": 300_000,
    "retry.backoff.max.ms": 1000,
    "api.key": None,
    "ssl.ca.location": None,
    "ssl.certificate.location": None,
    "ssl.key.location": None,
    "on_delivery": None,
    "transactional.id": None,
    "transaction.timeout.ms": 60_000,
}
_PRODUCER_ALIASES = {
    "url": "bootstrap.servers",
    "batch.records": "batch.num.messages",
    "ca.file": "ssl.ca.location",
    "on.delivery": "on_delivery",
    "message.timeout.ms": "delivery.timeout.ms",
    "queue.buffering.max.ms": "linger.ms",
    "request.required.acks": "acks",
}
_ACKS = {"all": "all", "-1": "all", "0": "0", "1": "1"}


def client_config(
    kind: str,
    defaults: Mapping[str, Any],
    config: Mapping[str, Any] | None,
    kwargs: Mapping[str, Any],
    aliases: Mapping[str, str],
) -> dict[str, Any]:
    """``config`` with ``kwargs`` over it, aliases resolved, checked against ``defaults``' keys, defaults filled in.

    ``bootstrap.servers`` comes back as URLs with their scheme (:func:`bootstrap_servers`).

    Raises:
        InvalidConfigError: an unknown key (named, with the known ones), or no ``bootstrap.servers``.
    """
    merged: dict[str, Any] = {}
    for key, value in [*(config or {}).items(), *((k.replace("_", "."), v) for k, v in kwargs.items())]:
        if not isinstance(key, str):
            raise InvalidConfigError(f"{kind} config keys are strings, got {key!r}")
        merged[aliases.get(key, key)] = value
    unknown = sorted(set(merged) - set(defaults))
    if unknown:
        raise InvalidConfigError(
            f"unknown {kind} config {', '.join(repr(k) for k in unknown)}; known keys: {', '.join(sorted(defaults))}"
        )
    conf = dict(defaults) | merged
    conf["bootstrap.servers"] = bootstrap_servers(conf["bootstrap.servers"], str(conf["security.protocol"]), kind)
    return conf


def bootstrap_servers(value: Any, protocol: str, kind: str) -> str:
    """``"a:8080, http://b:8080"`` → ``"http://a:8080,http://b:8080"``: Kafka's ``host:port`` list as URLs.

    A server without a scheme gets ``https://`` when ``security.protocol`` is
    ``SSL`` (or ``SASL_SSL``), else ``http://``.

    Raises:
        InvalidConfigError: no server, or an unknown ``security.protocol``.
    """
    scheme = {"PLAINTEXT": "http", "SASL_PLAINTEXT": "http", "SSL": "https", "SASL_SSL": "https"}.get(protocol.upper())
    if scheme is None:
        raise InvalidConfigError(
            f"{kind} config 'security.protocol' must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, got '{protocol}'"
        )
    servers = [s.strip().rstrip("/") for s in str(value or "").split(",") if s.strip()]
    if not servers:
        raise InvalidConfigError(f"{kind} config 'bootstrap.servers' is required (host:port, or a comma list)")
    return ",".join(s if "://" in s else f"{scheme}://{s}" for s in servers)


def as_bool(kind: str, key: str, value: Any) -> bool:
    """A boolean setting given as a bool or as ``"true"`` / ``"false"``.

    Raises:
        InvalidConfigError: anything else (named with its key).
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidConfigError(f"{kind} config '{key}' must be true or false, got {value!r}")


def as_int(kind: str, key: str, value: Any, minimum: int = 0) -> int:
    """An integer setting given as an int or a string of one, at least ``minimum``.

    Raises:
        InvalidConfigError: not an integer, or below ``minimum`` (named with its key).
    """
    try:
        number = int(value)
        if isinstance(value, bool) or (isinstance(value, float) and number != value):
            raise ValueError(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{kind} config '{key}' must be an integer, got {value!r}") from None
    if number < minimum:
        raise InvalidConfigError(f"{kind} config '{key}' must be at least {minimum}, got {number}")
    return number


def producer_config(config: Mapping[str, Any] | str | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The :class:`~logstore.client.Producer`'s settings, typed: confluent-kafka's dict (or a bootstrap URL), ``kwargs``
    over it (``client_cert=(cert, key)`` for the two ``ssl.*.location`` keys).

    Raises:
        InvalidConfigError: an unknown key, a value of the wrong type, or no ``bootstrap.servers``.
    """
    cert = kwargs.pop("client_cert", None)
    if isinstance(config, str):
        config = {"bootstrap.servers": config}
    conf = client_config("producer", _PRODUCER_DEFAULTS, config, kwargs, _PRODUCER_ALIASES)
    if cert is not None:
        conf["ssl.certificate.location"], conf["ssl.key.location"] = cert
    acks = _ACKS.get(str(conf["acks"]).strip().lower())
    if acks is None:
        raise InvalidConfigError(f"producer config 'acks' must be all, -1, 1 or 0, got {conf['acks']!r}")
    conf["acks"] = acks
    if conf["on_delivery"] is not None and not callable(conf["on_delivery"]):
        raise InvalidConfigError(f"producer config 'on_delivery' must be a callable, got {conf['on_delivery']!r}")
    conf["transaction.timeout.ms"] = as_int("producer", "transaction.timeout.ms", conf["transaction.timeout.ms"], 1)
    for key in ("linger.ms", "delivery.timeout.ms", "metadata.max.age.ms", "retry.backoff.max.ms"):
        conf[key] = as_int("producer", key, conf[key])
    conf["batch.num.messages"] = as_int("producer", "batch.num.messages", conf["batch.num.messages"], minimum=1)
    conf["enable.idempotence"] = as_bool("producer", "enable.idempotence", conf["enable.idempotence"])
    return conf
