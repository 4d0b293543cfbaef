"""The store behind a running server or cluster: :class:`RemoteStore`, what the CLI's ``--server`` mode runs on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from logstore.client._http import assigned_partitions, json_headers
from logstore.client._routing import Nodes
from logstore.config import TopicConfig
from logstore.errors import LogstoreError
from logstore.groups.group import MemberState
from logstore.log.schema import input_table
from logstore.structs import (
    FetchResult,
    GroupOffset,
    GroupTopicPartition,
    OffsetCommit,
    PartitionInfo,
    TopicInfo,
)
from logstore.wire.json_bytes import decode_bytes

__all__ = ["RemoteStore"]


class RemoteStore:
    """Topic, record and group operations of a running server, shaped like :class:`~logstore.store.LogStore`.

    The CLI's ``--server URL`` mode runs on it. ``url`` is one server or
    several separated by commas (the bootstrap servers, as for
    :class:`Producer`): a request goes to the first node that answers, a fetch
    to the partition's leader first (by the cluster metadata). ``api_key``
    (default: ``$LOGSTORE_API_KEY``), ``ca_file`` and ``client_cert`` as for :class:`Producer`.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 60,
        api_key: str | None = None,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        self.url = url
        self._nodes = Nodes(url, timeout_s=timeout_s, api_key=api_key, ca_file=ca_file, client_cert=client_cert)

    def close(self) -> None:
        """Close its connections."""
        self._nodes.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        return self._nodes.call(method, path, **kw)

    def request(self, method: str, path: str, **kw: Any) -> Any:
        """Any other API call (the CLI's ``/v1/admin`` keys, ACLs and quotas): sent to the first node that answers.

        Returns the JSON body (None when empty). Raises the error the server answered with, or
        ``NETWORK_EXCEPTION`` when no node could be reached.
        """
        return self._call(method, path, **kw)

    def metadata(self) -> dict[str, Any]:
        """``GET /v1/metadata`` as the server answers it (docs/design.md §8), from the first node that answers."""
        body: dict[str, Any] = self._call("GET", "/v1/metadata")
        return body

    def create_topic(self, name: str, partitions: int, config: Mapping[str, Any] | None = None) -> TopicInfo:
        return _topic(
            self._call(
                "POST", "/v1/topics", json={"name": name, "partitions": partitions, "config": dict(config or {})}
            )
        )

    def list_topics(self) -> list[str]:
        return list(self._call("GET", "/v1/topics")["topics"])

    def describe_topic(self, name: str) -> TopicInfo:
        return _topic(self._call("GET", f"/v1/topics/{name}"))

    def alter_topic(
        self, name: str, *, config: Mapping[str, Any] | None = None, partitions: int | None = None
    ) -> TopicInfo:
        return _topic(
            self._call("PATCH", f"/v1/topics/{name}", json={"config": dict(config or {}), "partitions": partitions})
        )

    def delete_topic(self, name: str) -> None:
        self._call("DELETE", f"/v1/topics/{name}")

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_records: int = 500,
        max_bytes: int = 1 << 20,
        wait_ms: int = 0,
    ) -> FetchResult:
        """A slice of ``partition`` from ``offset``, as the embedded store returns it (asked of its leader first).

        With ``wait_ms`` the server waits up to that long for a record at or past ``offset`` (a long poll).
        """
        if self._nodes.refreshed_at == 0:
            self._nodes.refresh()
        view = self._nodes.view
        leader = view.leader_url(topic, partition) if view is not None else None
        urls = self._nodes.urls()
        body = self._nodes.call_at(
            [leader, *(u for u in urls if u != leader)] if leader else urls,
            "GET",
            f"/v1/topics/{topic}/partitions/{partition}/records",
            params={"offset": offset, "max_records": max_records, "max_bytes": max_bytes, "wait_ms": wait_ms},
        )
        recs = body["records"]
        table = input_table(
            [r["partition"] for r in recs],
            [decode_bytes("value", r["value"]) for r in recs],
            keys=[decode_bytes("key", r["key"]) for r in recs],
            timestamps_ms=[r["timestamp"] for r in recs],
            headers=[json_headers(r["headers"]) for r in recs],
        )
        table = table.append_column("offset", pa.array([r["offset"] for r in recs], pa.int64()))
        return FetchResult(table, body["high_watermark"], body["log_start_offset"])

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset of ``partition`` whose timestamp is at or after ``timestamp_ms`` (the HW if none is)."""
        body = self._call(
            "GET", f"/v1/topics/{topic}/partitions/{partition}/offsets", params={"timestamp": timestamp_ms}
        )
        return int(body["offset"])

    def committed(self, group: str, topic: str) -> dict[GroupTopicPartition, OffsetCommit]:
        """``group``'s latest commits on ``topic``; the API reports neither commit time (0) nor metadata (None)."""
        try:
            rows = self.describe_group(group)
        except LogstoreError as e:
            if e.name == "GROUP_ID_NOT_FOUND":
                return {}
            raise
        return {
            GroupTopicPartition(r.group, r.topic, r.partition): OffsetCommit(r.committed_offset, 0, None)
            for r in rows
            if r.topic == topic
        }

    def commit_offsets(
        self, group: str, topic: str, offsets: Mapping[int, int], *, metadata: str | None = None
    ) -> None:
        """Commit ``offsets`` (partition → next offset to read) for ``group``, with ``metadata`` if given."""
        self._call(
            "POST",
            f"/v1/groups/{group}/offsets",
            json={"topic": topic, "partitions": {str(p): o for p, o in offsets.items()}, "metadata": metadata},
        )

    def delete_group(self, group: str) -> None:
        """Kafka's DeleteGroups: the group's committed offsets; refused (``NON_EMPTY_GROUP``) while it has readers."""
        self._call("DELETE", f"/v1/groups/{group}")

    def list_groups(self) -> list[str]:
        return list(self._call("GET", "/v1/groups")["groups"])

    def describe_group(self, group: str) -> list[GroupOffset]:
        body = self._call("GET", f"/v1/groups/{group}")
        return [
            GroupOffset(group, t["topic"], p["partition"], p["committed_offset"], p["high_watermark"])
            for t in body["topics"]
            for p in t["partitions"]
        ]

    def group_members(self, group: str) -> list[MemberState]:
        """The group's live members (id, generation, assignment); empty when it has none."""
        try:
            body = self._call("GET", f"/v1/groups/{group}")
        except LogstoreError as e:
            if e.name == "GROUP_ID_NOT_FOUND":
                return []
            raise
        return [
            MemberState(m["member_id"], m["generation"], tuple(sorted(assigned_partitions(m["assignment"]))))
            for m in body.get("members", [])
        ]

    def reset_offsets(
        self, group: str, topic: str, to: str | dict[str, int], *, force: bool = False, dry_run: bool = False
    ) -> dict[int, int]:
        body = self._call(
            "POST", f"/v1/groups/{group}/reset", json={"topic": topic, "to": to, "force": force, "dry_run": dry_run}
        )
        return {
            p["partition"]: p["committed_offset"]
            for t in body["topics"]
            if t["topic"] == topic
            for p in t["partitions"]
        }


def _topic(body: dict[str, Any]) -> TopicInfo:
    parts = tuple(
        PartitionInfo(
            p["partition"],
            p["log_start_offset"],
            p["high_watermark"],
            p["size_bytes"],
            p.get("num_files", 0),
            p.get("num_records", 0),
        )
        for p in body["partitions"]
    )
    config = TopicConfig.from_overrides(body.get("config", {}))
    defaults = TopicConfig().to_dict()
    overrides = {k: str(v) for k, v in config.to_dict().items() if v != defaults[k]}
    return TopicInfo(body["name"], parts, config, overrides, topic_id=body.get("topic_id"))
