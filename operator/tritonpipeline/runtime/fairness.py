"""Work shared fairly between tenants (issue 54): `FairShare` runs at most `capacity` holders at once,
and at most `limit` of them for one key (a namespace); when holders queue it gives the next free place
to the waiting key that holds the fewest, the one that waited longest among those. One namespace alone
uses every place its limit allows; a namespace that arrives while another's storm queues waits for one
place to free, not for the whole storm, and with `limit` below `capacity` it finds one free at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator


class FairShare:
    def __init__(self, capacity: int, limit: int | None = None) -> None:
        self.capacity = capacity
        self.limit = capacity if limit is None else max(1, min(limit, capacity))
        self.running: Counter[str] = Counter()
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    def __len__(self) -> int:
        """Keys holding or awaiting a place (what this keeps in memory)."""
        return len(set(self.running) | set(self._waiting))

    @contextlib.asynccontextmanager
    async def of(self, key: str) -> AsyncIterator[None]:
        await self._acquire(key)
        try:
            yield
        finally:
            self._release(key)

    def _free(self) -> bool:
        return sum(self.running.values()) < self.capacity

    def _next(self) -> str | None:
        """The waiting key that may run now and holds the fewest places; among equals the one queued
        first. None when none may."""
        ready = [k for k in self._waiting if self.running[k] < self.limit]
        return min(ready, key=lambda k: self.running[k]) if ready else None

    async def _acquire(self, key: str) -> None:
        if self._free() and self.running[key] < self.limit and self._next() is None:
            self.running[key] += 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, deque()).append(turn)
        try:
            await turn  # _release counted this key as running when it resolved the future
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release(key)  # given a place while being cancelled: hand it on
            else:
                self._forget(key, turn)
            raise

    def _forget(self, key: str, turn: asyncio.Future[None]) -> None:
        queue = self._waiting.get(key)
        if queue is not None and turn in queue:
            queue.remove(turn)
            if not queue:
                del self._waiting[key]

    def _release(self, key: str) -> None:
        self.running[key] -= 1
        if self.running[key] <= 0:
            del self.running[key]
        while self._waiting and self._free():
            chosen = self._next()
            if chosen is None:
                return  # every waiting key holds its limit
            queue = self._waiting[chosen]
            turn = queue.popleft()
            if not queue:
                del self._waiting[chosen]
            else:
                self._waiting.move_to_end(chosen)  # its next waiter queues behind the other keys
            if not turn.done():
                self.running[chosen] += 1
                turn.set_result(None)
