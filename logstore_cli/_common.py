"""What every command group shares: the option sets commands take, the config and store a command runs with, the
``--server`` client and its options, ``key=value`` and tables with headers.

The command modules (``topics``, ``records``, ``groups``, …) import these; nothing outside ``logstore_cli`` does.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from logstore.client import RemoteStore
from logstore.config import LogstoreConfig, load_config
from logstore.errors import InvalidConfigError
from logstore.protocols import Store
from logstore.store import LogStore

__all__ = [
    "CONNECTION_OPTIONS",
    "Parents",
    "Subparsers",
    "backend",
    "build_parents",
    "client_options",
    "config_of",
    "parse_kv",
    "print_table",
    "reachable",
    "remote",
    "require_store",
    "server_urls",
]

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What ``add_subparsers()`` returns: a command group's ``register`` adds its commands to it."""

CONNECTION_OPTIONS = ("server", "api_key", "ca_file", "client_cert", "client_key")
"""The destinations of the options for talking to a server (:func:`connection_options`)."""


@dataclass(frozen=True)
class Parents:
    """The option sets a command takes, as ``parents=[…]`` of its parser (and of every parser above it).

    Options given before or after the command's name both count (``default=SUPPRESS``: a later parser's absent
    default never erases an earlier value).
    """

    store: argparse.ArgumentParser
    """``--root``: for commands that work on the store (or run a server or ZooKeeper) only."""
    server: argparse.ArgumentParser
    """``--root`` and the connection options (``--server``, ``--api-key``, TLS): for commands that may go through a
    running server. A parser with these has ``connects`` set; :func:`logstore_cli.cli.main` refuses connection
    options given to one without."""


def build_parents() -> Parents:
    """The option sets, each declared once here."""
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument(
        "--root", default=argparse.SUPPRESS, help="store directory (default: the config's logstore.root)"
    )
    server = argparse.ArgumentParser(add_help=False, parents=[store, connection_options()])
    server.set_defaults(connects=True)
    return Parents(store, server)


def connection_options() -> argparse.ArgumentParser:
    """``--server``, ``--api-key``, ``--ca-file``, ``--client-cert``, ``--client-key``: how to reach a server."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--server",
        "--bootstrap-server",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT[,…]",
        help="work through a running server (a cluster: any of its nodes, comma-separated) instead of --root; "
        "http:// is assumed without a scheme (https:// with --ca-file or --client-cert)",
    )
    p.add_argument(
        "--api-key", default=argparse.SUPPRESS, help="with --server: the API key (default: $LOGSTORE_API_KEY)"
    )
    p.add_argument(
        "--ca-file",
        default=argparse.SUPPRESS,
        metavar="PEM",
        help="with --server: verify the server's TLS certificate with this CA bundle",
    )
    p.add_argument(
        "--client-cert",
        default=argparse.SUPPRESS,
        metavar="PEM",
        help="with --server: a TLS client certificate to present (names the principal when no API key is sent)",
    )
    p.add_argument("--client-key", default=argparse.SUPPRESS, metavar="PEM", help="the private key of --client-cert")
    return p


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
    if getattr(args, "server", None):
        return remote(args)
    if not creates:
        require_store(config)
    return LogStore(config)


def require_store(config: LogstoreConfig) -> None:
    """A command that reads a store needs one: ``logstore.root`` must be an existing directory (or an ``s3://`` URI,
    whose bucket :class:`~logstore.store.LogStore` checks).

    Raises:
        InvalidConfigError: it is not, naming the root and where it came from.
    """
    if not config.root.startswith("s3://") and not os.path.isdir(config.root):
        raise InvalidConfigError(
            f"logstore.root '{config.root}' is not a directory: there is no store there. Give the store's "
            f"directory with --root, LOGSTORE_ROOT or the config file's logstore.root "
            f"(`logstore topics create` makes a new one)"
        )


def remote(args: argparse.Namespace, server: str | None = None) -> RemoteStore:
    """A client of ``--server`` (or of ``server``, scheme added as :func:`server_urls` does) with its options."""
    return RemoteStore(server_urls(args, server), **client_options(args))


def reachable(args: argparse.Namespace) -> str:
    """``--server`` as URLs (:func:`server_urls`), once one of them answered ``GET /healthz``.

    For the commands that hand the servers to a client that retries (a producer keeps retrying until
    ``delivery.timeout.ms``): a server nobody can reach is named at once instead.

    Raises:
        NetworkExceptionError: no server answered, each URL with the reason.
    """
    urls = server_urls(args)
    remote(args, urls).request("GET", "/healthz")
    return urls


def server_urls(args: argparse.Namespace, server: str | None = None) -> str:
    """``--server`` (or ``server``) as URLs: ``host:port`` gets ``http://``, or ``https://`` when TLS files are
    given (``--ca-file``, ``--client-cert``); a URL with a scheme is kept. Comma-separated, in order.

    Raises:
        InvalidConfigError: no server named at all.
    """
    text = server if server is not None else getattr(args, "server", None) or ""
    scheme = "https" if getattr(args, "ca_file", None) or getattr(args, "client_cert", None) else "http"
    urls = [u.strip() for u in text.split(",") if u.strip()]
    if not urls:
        raise InvalidConfigError(f"--server takes HOST:PORT or a URL (comma-separated for a cluster), got '{text}'")
    return ",".join(u if "://" in u else f"{scheme}://{u}" for u in urls)


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


def parse_kv(items: list[str] | None, *, option: str = "--config") -> dict[str, str]:
    """``KEY=VALUE`` arguments of ``option`` as a dict (later ones win); ``InvalidConfigError`` for one without ``=``.

    Keys are stripped of spaces; values are kept as given (a separator may be a space).
    """
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidConfigError(f"{option} takes key=value, got '{item}'")
        out[key.strip()] = value
    return out


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Rows under a header line, columns left-aligned and as wide as their widest cell (None prints as ``-``).

    The header is printed even with no rows, so a reader sees the query ran and found nothing.
    """
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
