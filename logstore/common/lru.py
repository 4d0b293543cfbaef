"""A mapping bounded by entry count that drops the least recently used entry.

For in-memory state that can be derived again from the table (an idempotent
producer's last sequence lives in the Delta log as a ``txn`` action, its recent
batches in the commit history): bounding it keeps a node's memory flat however
many producer ids clients invent, and a dropped entry costs one re-read when
its producer returns, never a wrong answer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import ItemsView, Iterator, MutableMapping, ValuesView
from typing import TypeVar

__all__ = ["LruDict"]

K = TypeVar("K")
V = TypeVar("V")


class LruDict(MutableMapping[K, V]):
    """A dict of at most ``max_entries`` entries; reads and writes make an entry the most recent.

    Inserting past the bound drops the least recently used entry. Not
    thread-safe: callers hold the lock they already hold for the plain dict.
    """

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.max_entries = max_entries
        self._data: OrderedDict[K, V] = OrderedDict()

    def __getitem__(self, key: K) -> V:
        value = self._data[key]
        self._data.move_to_end(key)
        return value

    def __setitem__(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)

    def __delitem__(self, key: K) -> None:
        del self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    # Iterating leaves the order alone (the inherited views would reorder, and break, mid-iteration).
    def items(self) -> ItemsView[K, V]:
        return self._data.items()

    def values(self) -> ValuesView[V]:
        return self._data.values()
