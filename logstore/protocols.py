"""What every store offers, embedded or remote: the :class:`Store` protocol.

:class:`logstore.store.LogStore` (a root directory, in this process) and
:class:`logstore.client.RemoteStore` (a running server, over HTTP) both
satisfy it; code typed against :class:`Store` (the CLI's commands) works on
either. mypy checks both classes against it (the ``TYPE_CHECKING`` block at the bottom).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from logstore.structs import FetchResult, GroupOffset, GroupTopicPartition, OffsetCommit, TopicInfo

__all__ = ["Store"]


class Store(Protocol):
    """Topics, records and consumer-group offsets of one logstore."""

    def create_topic(self, name: str, partitions: int, config: Mapping[str, Any] | None = None) -> TopicInfo: ...

    def describe_topic(self, name: str) -> TopicInfo: ...

    def list_topics(self) -> list[str]: ...

    def alter_topic(
        self, name: str, *, config: Mapping[str, Any] | None = None, partitions: int | None = None
    ) -> TopicInfo: ...

    def delete_topic(self, name: str) -> None: ...

    def fetch(
        self, topic: str, partition: int, offset: int, *, max_records: int = 500, max_bytes: int = 1 << 20
    ) -> FetchResult: ...

    def committed(self, group: str, topic: str) -> dict[GroupTopicPartition, OffsetCommit]:
        """``group``'s latest commits on ``topic``."""
        ...

    def commit_offsets(
        self, group: str, topic: str, offsets: Mapping[int, int], *, metadata: str | None = None
    ) -> None: ...

    def reset_offsets(
        self, group: str, topic: str, to: str | dict[str, int], *, force: bool = False, dry_run: bool = False
    ) -> dict[int, int]: ...

    def delete_group(self, group: str) -> None: ...

    def list_groups(self) -> list[str]: ...

    def describe_group(self, group: str) -> list[GroupOffset]: ...


if TYPE_CHECKING:  # mypy checks both stores against the protocol here
    from logstore.client import RemoteStore
    from logstore.store import LogStore

    _embedded: type[Store] = LogStore
    _remote: type[Store] = RemoteStore
