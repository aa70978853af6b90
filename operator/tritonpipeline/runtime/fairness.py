"""Work shared fairly between tenants (issue 54): `FairShare` runs at most `capacity` holders at once,
and when holders queue it gives the next free place to the key (a namespace) that holds the fewest,
the one that waited longest among those. One namespace alone uses every place; a namespace that
arrives while another's storm queues waits for one place to free, not for the whole storm."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator


class FairShare:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
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

    async def _acquire(self, key: str) -> None:
        if sum(self.running.values()) < self.capacity and not self._waiting:
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
        while self._waiting and sum(self.running.values()) < self.capacity:
            # the waiting key holding the fewest places; among equals the one queued first
            chosen = min(self._waiting, key=lambda k: self.running[k])
            queue = self._waiting[chosen]
            turn = queue.popleft()
            if not queue:
                del self._waiting[chosen]
            else:
                self._waiting.move_to_end(chosen)  # its next waiter queues behind the other keys
            if not turn.done():
                self.running[chosen] += 1
                turn.set_result(None)
