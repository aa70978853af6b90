"""A memory-bounded cache of the operator's per-pipeline results (the compiled pipelines): the least
recently used entries go first once their estimated size passes a budget."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class BoundedCache:
    """key -> (tag, value, weight): a value is current while its tag (what it was computed from) is;
    the entries' weights (estimated bytes) stay within `budget`, the most recently used kept."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.weight = 0
        self._entries: OrderedDict[Hashable, tuple[str, Any, int]] = OrderedDict()

    def get(self, key: Hashable, tag: str) -> Any | None:
        """The value computed from `tag`, or None (none, or computed from another)."""
        entry = self._entries.get(key)
        if entry is None or entry[0] != tag:
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: Hashable, tag: str, value: Any, weight: int) -> None:
        """Keep `value`; drop the least recently used others while over the budget (a value heavier
        than the whole budget is not kept)."""
        self.pop(key)
        if weight > self.budget:
            return
        self._entries[key] = (tag, value, weight)
        self.weight += weight
        while self.weight > self.budget:
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self.weight -= dropped

    def pop(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.weight -= entry[2]

    def __len__(self) -> int:
        return len(self._entries)
