"""Config keys as text: nested TOML flattened to dotted keys, and values checked against their fields' types.

Used by :mod:`logstore.config` alone: a field's ``metadata`` carries its Kafka-style ``key``, and for
integers a ``minimum``, for strings the allowed ``choices``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from logstore.errors import InvalidConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["apply_overrides", "check_root", "flatten", "key"]

_T = TypeVar("_T", bound="DataclassInstance")


def key(name: str, doc: str, *, minimum: int | None = None, choices: tuple[str, ...] = ()) -> dict[str, Any]:
    """A config field's ``metadata``: its dotted Kafka-style ``name``, what it means, and its bounds."""
    return {"key": name, "doc": doc, "minimum": minimum, "choices": choices}


def flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A TOML document's tables as dotted keys: ``{"linger": {"ms": 5}}`` → ``{"linger.ms": 5}``."""
    out: dict[str, Any] = {}
    for k, v in doc.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, name + "."))
        else:
            out[name] = v
    return out


def apply_overrides(obj: _T, overrides: Mapping[str, Any], what: str) -> _T:
    """A copy of the frozen config ``obj`` with ``overrides`` (dotted key → text or value) checked and applied.

    Raises:
        InvalidConfigError: an unknown key (named, with the known ones) or a value of the wrong type or range.
    """
    fields = {f.metadata["key"]: f for f in dataclasses.fields(obj) if f.metadata}
    changes: dict[str, Any] = {}
    for key, raw in overrides.items():
        f = fields.get(key)
        if f is None:
            raise InvalidConfigError(f"unknown {what} key '{key}'; known keys: {', '.join(sorted(fields))}")
        changes[f.name] = _coerce(key, raw, f)
    return dataclasses.replace(obj, **changes)


def _coerce(key: str, raw: Any, f: dataclasses.Field[Any]) -> Any:
    kind = type(f.default)
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise InvalidConfigError(f"{key} must be true or false, got {raw!r}")
    if kind is int:
        if isinstance(raw, bool):
            raise InvalidConfigError(f"{key} must be an integer, got {raw!r}")
        try:
            value = int(raw) if isinstance(raw, int) else int(str(raw).strip())
        except ValueError:
            raise InvalidConfigError(f"{key} must be an integer, got {raw!r}") from None
        minimum = f.metadata["minimum"]
        if minimum is not None and value < minimum:
            raise InvalidConfigError(f"{key} must be at least {minimum}, got {value}")
        return value
    if not isinstance(raw, str):
        raise InvalidConfigError(f"{key} must be a string, got {raw!r}")
    choices = f.metadata["choices"]
    text = raw.strip().replace(" ", "") if choices else raw
    if choices and text == "delete,compact":
        text = "compact,delete"
    if choices and text not in choices:
        raise InvalidConfigError(f"{key} must be one of {', '.join(choices)}, got {raw!r}")
    return text


def check_root(root: str, *, security_enabled: bool) -> None:
    """``logstore.root`` is a path or an ``s3://bucket/prefix`` / ``az://container/prefix`` URI served with the rest.

    A URI taken for a local path would make a folder named after it (``./s3:/bucket/…``) and look like success.

    Raises:
        InvalidConfigError: naming the root and the setting that rules it out.
    """
    scheme, sep, rest = root.partition("://")
    if not (sep and scheme and scheme.replace("+", "").replace(".", "").replace("-", "").isalnum()):
        return
    if scheme not in ("s3", "az"):
        raise InvalidConfigError(
            f"logstore.root '{root}': '{scheme}://' roots are not served; give a directory "
            "path, an s3://bucket/prefix or an az://container/prefix URI (docs/object-storage.md)"
        )
    if not rest.partition("/")[0]:
        what = "a bucket (s3://bucket/prefix)" if scheme == "s3" else "a container (az://container/prefix)"
        raise InvalidConfigError(f"logstore.root '{root}': an {scheme}:// root names {what}")
    if security_enabled:
        raise InvalidConfigError(
            f"logstore.root '{root}' with security.enabled: keys, ACLs and quotas have no "
            "object-store form yet (docs/object-storage.md)"
        )


def check_cluster_wal_dir(root: str, wal_dir: str, *, cluster: bool) -> None:
    """In cluster mode a ``wal.dir`` set on an object-store root must be in an object store too.

    A new leader replays a departed node's acks=1 records from the node's write-ahead log, which it finds
    beside its own (``<wal.dir>/..``): a local directory is on one host only, so a dead node's records
    there would never be replayed, and acknowledged records would be lost.

    Raises:
        InvalidConfigError: naming ``wal.dir``.
    """
    on_object_store = root.startswith(("s3://", "az://"))
    if cluster and wal_dir and on_object_store and not wal_dir.startswith(("s3://", "az://")):
        raise InvalidConfigError(
            f"wal.dir '{wal_dir}' is a local directory, with logstore.root '{root}' on an object store and "
            "zookeeper.connect set: other nodes could not replay this node's acks=1 records after it dies; "
            "leave wal.dir unset (<root>/_wal/<node.id>) or give it an s3:// or az:// URI"
        )
