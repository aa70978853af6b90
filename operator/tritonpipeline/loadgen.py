"""Closed-loop load with the asyncio gRPC client: latency percentiles and throughput."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadResult:
    concurrency: int
    requests: int
    errors: int
    seconds: float
    latencies_ms: tuple[float, ...]

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
        return ordered[k]

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else float("nan")

    @property
    def p99(self) -> float:
        return self.percentile(99)


async def closed_loop(
    call: Callable[[int], Awaitable[bool]], *, concurrency: int, requests: int, max_seconds: float = 60.0
) -> LoadResult:
    """Run `requests` calls with `concurrency` workers, each awaiting its call before the next.

    `call(i)` performs request i and returns whether the answer was correct; an exception counts as
    an error. Stops early after `max_seconds`.
    """
    latencies: list[float] = []
    errors = 0
    next_index = 0
    deadline = time.perf_counter() + max_seconds

    async def worker() -> None:
        nonlocal next_index, errors
        while next_index < requests and time.perf_counter() < deadline:
            i = next_index
            next_index += 1
            start = time.perf_counter()
            try:
                ok = await call(i)
            except Exception:
                ok = False
            latencies.append((time.perf_counter() - start) * 1000)
            if not ok:
                errors += 1

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    return LoadResult(concurrency, len(latencies), errors, elapsed, tuple(latencies))


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)
