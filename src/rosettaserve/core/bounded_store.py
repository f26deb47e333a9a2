"""A store of at most ``capacity`` entries in memory: when it is full, the oldest one goes.

The Responses API keeps the responses it made here (``--responses-store N``), so that a later
request can name one (``previous_response_id``) or fetch and delete it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

T = TypeVar("T")


class BoundedStore(Generic[T]):
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity  # 0: nothing is kept
        self._items: OrderedDict[str, T] = OrderedDict()

    def put(self, key: str, value: T) -> None:
        if self.capacity <= 0:
            return
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def get(self, key: str) -> T | None:
        return self._items.get(key)

    def pop(self, key: str) -> T | None:
        return self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)
