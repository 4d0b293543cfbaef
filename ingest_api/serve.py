"""Running the HTTP API under uvicorn (``logstore serve``): exposure guard, TLS options, the server loop."""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from logstore.common.logs import configure_logging
from logstore.config import LogstoreConfig
from logstore.errors import InvalidConfigError
from logstore.security import log_audit_to_stderr
from logstore.security.principal import PrincipalMapper

if TYPE_CHECKING:
    from ingest_api.app import Door

__all__ = ["check_exposure", "is_loopback", "serve", "tls_options"]


def serve(config: LogstoreConfig, *, insecure: bool = False, doors: Sequence[Door] = ()) -> None:
    """Run the HTTP API on ``server.host``:``server.port`` until SIGTERM/SIGINT; shutdown commits everything pending.

    ``doors``: other front ends served by the same node (see :func:`~ingest_api.app.create_app`).

    Raises:
        InvalidConfigError: ``server.host`` is not a loopback address while ``security.enabled``
            is false and ``insecure`` is not set; or TLS settings are incomplete.
        KafkaStorageError: another live process holds this node's WAL directory.
    """
    configure_logging()
    check_exposure(config, insecure=insecure)
    tls = tls_options(config)
    from logstore.wire.json_produce import without_pandas

    without_pandas()
    import uvicorn

    from ingest_api.app import create_app
    from ingest_api.tls import ClientCertProtocol
    from logstore.log.wal import DirectoryLock
    from logstore.node.broker import wal_dir_of

    # Refuse early, with the holder's name, when another node runs on this WAL directory
    # (the node takes the lock for good when it starts; this only makes the message plain).
    wal_dir = wal_dir_of(config)
    DirectoryLock(wal_dir, "the write-ahead log directory").release()

    if config.zookeeper_connect:
        from logstore.node.membership import check_node_id_free

        check_node_id_free(config)

    log_audit_to_stderr()
    scheme = "https" if tls else "http"
    # The port is bound now (a taken one stops the start here) and listened on only once the app has started:
    # until then a client's connection is refused, so it tries another node, rather than accepted and held
    # for as long as the start takes (in cluster mode, its previous run's frames replayed under their topics'
    # failover locks). Requests forwarded to it between its registration and then are refused the same way,
    # and their nodes answer NOT_LEADER_OR_FOLLOWER: retriable.
    sock = _bind(config.server_host, config.server_port)
    print(f"logstore serving {config.root} on {scheme}://{config.server_host}:{config.server_port}", flush=True)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config, doors),
            log_level="warning",
            log_config=None,  # uvicorn's lines go through the process's handler: timestamped like the others
            loop="uvloop",
            http=ClientCertProtocol if tls else "httptools",
            timeout_graceful_shutdown=30,
            **tls,
        )
    )
    server.run(sockets=[sock])
    if not server.started:
        raise SystemExit(3)  # start-up failed (uvicorn logged why), as uvicorn.run exits


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))  # uvicorn's server listens on it when it starts serving
    sock.set_inheritable(True)
    return sock


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.0/8``, ``::1``) or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name may resolve to anything: treat it as exposed


def check_exposure(config: LogstoreConfig, *, insecure: bool) -> None:
    """Refuse to listen beyond loopback with security off, unless the operator says ``--insecure``."""
    if config.security_enabled or insecure or is_loopback(config.server_host):
        return
    raise InvalidConfigError(
        f"refusing to serve on {config.server_host} with security.enabled=false: anyone who can reach it could "
        "create, delete, produce to and read every topic. Set security.enabled=true (and create keys with "
        "'logstore keys create'), listen on 127.0.0.1, or pass --insecure to serve it open anyway."
    )


def tls_options(config: LogstoreConfig) -> dict[str, Any]:
    """uvicorn's TLS arguments from ``server.ssl.*``; empty when no certificate is configured.

    Raises:
        InvalidConfigError: incomplete settings, or ``ssl.principal.mapping.rules`` that do not parse.
    """
    PrincipalMapper(config.ssl_principal_mapping_rules)  # refuse bad rules at start, not on the first client
    if not config.server_ssl_certfile:
        if config.server_ssl_keyfile or config.server_ssl_client_auth != "none":
            raise InvalidConfigError("server.ssl.keyfile and server.ssl.client.auth need server.ssl.certfile")
        return {}
    options: dict[str, Any] = {
        "ssl_certfile": config.server_ssl_certfile,
        "ssl_keyfile": config.server_ssl_keyfile or None,
    }
    if config.server_ssl_cafile:
        options["ssl_ca_certs"] = config.server_ssl_cafile
    if config.server_ssl_client_auth != "none":
        if not config.server_ssl_cafile:
            raise InvalidConfigError(
                f"server.ssl.client.auth={config.server_ssl_client_auth} needs server.ssl.cafile to verify clients with"
            )
        required = config.server_ssl_client_auth == "required"
        options["ssl_cert_reqs"] = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
    return options
