"""``logstore cluster status``: nodes, controller, leaders per partition; exit 1 when a partition is under-led."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.server import LOGSTORE, Server, free_port


def status(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")} | env
    return subprocess.run(
        [*LOGSTORE, "--root", str(tmp_path / "cli"), "cluster", "status", *args],
        capture_output=True,
        text=True,
        env=clean,
        timeout=60,
    )


def test_an_embedded_node_is_a_healthy_one_node_cluster(tmp_path: Path, server: Callable[..., Server]) -> None:
    srv = server()
    with srv.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
    dead = f"http://127.0.0.1:{free_port()}"
    r = status(tmp_path, "--server", f"{dead},{srv.url}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "Controller: 0\tControllerEpoch: 0",
        f"Node: 0\tUrl: {srv.url}\t(controller)",
        "\tTopic: t\tPartition: 0\tLeader: 0\tLeaderEpoch: 0",
        "\tTopic: t\tPartition: 1\tLeader: 0\tLeaderEpoch: 0",
        "Under-led partitions: 0",
    ]
    # without --server: the server the config describes
    r = status(tmp_path, LOGSTORE_SERVER_PORT=str(srv.port))
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "Under-led partitions: 0", r.stderr


class MetadataServer:
    """An HTTP stand-in on loopback answering ``GET /v1/metadata`` with ``body`` (a cluster after a node died).

    ``{self}`` in a node's URL is the stand-in's own, which answers ``GET /healthz`` (a live node).
    """

    def __init__(self, body: dict[str, Any]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        for node in body["nodes"]:
            node["url"] = node["url"].replace("{self}", self.url)
        self.body = body

        async def metadata(request: Request) -> JSONResponse:
            return JSONResponse(self.body)

        async def healthz(request: Request) -> JSONResponse:
            return JSONResponse({"status": "ok"})

        config = uvicorn.Config(
            Starlette(routes=[Route("/v1/metadata", metadata), Route("/healthz", healthz)]),
            port=self.port,
            log_level="warning",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)


@pytest.fixture
def degraded() -> Iterator[MetadataServer]:
    stand_in = MetadataServer(
        {
            "controller": None,
            "controller_epoch": 4,
            "nodes": [
                {"node_id": 1, "url": "{self}"},
                {"node_id": 3, "url": f"http://127.0.0.1:{free_port()}"},  # registered, but killed: nothing answers
            ],
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {"partition": 0, "leader": 1, "leader_epoch": 2},
                        {"partition": 1, "leader": 2, "leader_epoch": 5},  # its node is gone
                        {"partition": 2, "leader": -1, "leader_epoch": 3},  # no live node took it
                        {"partition": 3, "leader": 3, "leader_epoch": 1},  # its node does not answer
                        {"partition": 4, "leader": 1, "leader_epoch": 0, "handover_to": 3},
                    ],
                }
            ],
        }
    )
    stand_in.thread.start()
    while not stand_in.server.started:
        stand_in.thread.join(0.01)
    yield stand_in
    stand_in.server.should_exit = True
    stand_in.thread.join()


def test_partitions_without_a_live_leader_are_under_led_and_fail_the_status(
    tmp_path: Path, degraded: MetadataServer
) -> None:
    r = status(tmp_path, "--server", degraded.url)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Controller: none (election under way)\tControllerEpoch: 4"
    assert lines[1] == f"Node: 1\tUrl: {degraded.url}"
    assert lines[2].startswith("Node: 3\tUrl: http://127.0.0.1:") and lines[2].endswith("\tUNREACHABLE")
    assert lines[3].endswith("Leader: 1\tLeaderEpoch: 2")
    assert lines[4].endswith("Leader: 2\tLeaderEpoch: 5\tUNDER-LED (leader 2 not registered)")
    assert lines[5].endswith("Leader: -1\tLeaderEpoch: 3\tUNDER-LED (no leader)")
    assert lines[6].endswith("Leader: 3\tLeaderEpoch: 1\tUNDER-LED (leader 3 unreachable)")
    assert lines[7].endswith("Leader: 1\tLeaderEpoch: 0\tHandingOverTo: 3")
    assert lines[8] == (
        "Under-led partitions: 3: t-1 (leader 2 not registered), t-2 (no leader), t-3 (leader 3 unreachable)"
    )


def test_an_unreachable_server_is_an_error(tmp_path: Path) -> None:
    r = status(tmp_path, "--server", f"http://127.0.0.1:{free_port()}")
    assert r.returncode == 1 and r.stderr.startswith("NETWORK_EXCEPTION: cannot reach any server"), r.stderr
