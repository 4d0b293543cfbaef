"""``logstore cluster elect-leaders``: Kafka's summary of a preferred-leader election; exit 1 when one fails.

On an embedded server one node leads everything, so no election is ever needed; the cluster case (a node
killed, restarted and given its partitions back) is ``tests/system/cluster/test_cluster_preferred_leaders.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.support.cli import cli
from tests.support.server import Server


def test_an_embedded_node_needs_no_election_and_an_unknown_partition_fails_it(
    tmp_path: Path, server: Callable[..., Server]
) -> None:
    srv = server()
    with srv.client() as c:
        assert c.post("/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
    r = cli(tmp_path / "cli", "cluster", "elect-leaders", "--server", srv.url)
    assert (r.returncode, r.stdout) == (0, "Valid replica already elected for partitions t-0, t-1\n"), r.stderr

    r = cli(tmp_path / "cli", "cluster", "elect-leaders", "--server", srv.url, "--topic", "t", "--partition", "5")
    assert r.returncode == 1
    assert r.stdout == (
        "Error completing leader election (PREFERRED) for partition t-5: UNKNOWN_TOPIC_OR_PARTITION "
        "(leader -1, preferred -1)\n"
    )

    r = cli(tmp_path / "cli", "cluster", "elect-leaders", "--server", srv.url, "--partition", "0")
    assert r.returncode == 1 and r.stderr.startswith("INVALID_REQUEST: --partition needs --topic"), r.stderr
