"""What every command group shares: the config a command runs with, its store, its client options, ``key=value``.

The command modules (``topics``, ``records``, ``groups``, …) import these; nothing outside ``logstore_cli`` does.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TypeAlias

from logstore.client import RemoteStore
from logstore.config import LogstoreConfig, load_config
from logstore.errors import InvalidConfigError
from logstore.protocols import Store
from logstore.store import LogStore

__all__ = ["Subparsers", "backend", "client_options", "config_of", "parse_kv", "require_store"]

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What ``add_subparsers()`` returns: a command group's ``register`` adds its commands to it."""


def config_of(args: argparse.Namespace) -> LogstoreConfig:
    """The config a command runs with: ``--config FILE`` (else the default file), ``--root`` over its root."""
    overrides: dict[str, Any] = {}
    if getattr(args, "root", None):
        overrides["logstore.root"] = args.root
    return load_config(getattr(args, "config_file", None), overrides=overrides)


def backend(args: argparse.Namespace, config: LogstoreConfig, *, creates: bool = False) -> Store:
    """The store itself (``--root``, embedded) or a running server (``--server URL``).

    Raises:
        InvalidConfigError: embedded, the command reads a store (not ``creates``), and there is none at the root.
    """
    server = getattr(args, "server", None)
    if server:
        return RemoteStore(server, **client_options(args))
    if not creates:
        require_store(config)
    return LogStore(config)


def require_store(config: LogstoreConfig) -> None:
    """A command that reads a store needs one: ``logstore.root`` must be an existing directory.

    Raises:
        InvalidConfigError: it is not, naming the root and where it came from.
    """
    if not os.path.isdir(config.root):
        raise InvalidConfigError(
            f"logstore.root '{config.root}' is not a directory: there is no store there. Give the store's "
            f"directory with --root, LOGSTORE_ROOT or the config file's logstore.root "
            f"(`logstore topics create` makes a new one)"
        )


def client_options(args: argparse.Namespace) -> dict[str, Any]:
    """Options for a client of ``--server``: ``api_key`` (``--api-key``, else ``LOGSTORE_API_KEY``), TLS files.

    ``ca_file`` verifies the server; ``client_cert`` is ``(--client-cert, --client-key)``.
    """
    cert = getattr(args, "client_cert", None)
    return {
        "api_key": getattr(args, "api_key", None) or os.environ.get("LOGSTORE_API_KEY") or None,
        "ca_file": getattr(args, "ca_file", None),
        "client_cert": (cert, getattr(args, "client_key", None) or cert) if cert else None,
    }


def parse_kv(items: list[str] | None) -> dict[str, str]:
    """``--config KEY=VALUE`` arguments as a dict (later ones win); ``InvalidConfigError`` for one without ``=``."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidConfigError(f"--config takes key=value, got '{item}'")
        out[key.strip()] = value.strip()
    return out
