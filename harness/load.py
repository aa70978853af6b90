"""Closed-loop load with the asyncio gRPC client: latency percentiles and throughput."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0..100), interpolated linearly between the closest ranks (numpy's default;
    the median at 50); nan for no values. The one definition of every benchmark and test report."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


@dataclass(frozen=True)
class LoadResult:
    concurrency: int
    attempted: int
    errors: int
    seconds: float
    latencies_ms: tuple[float, ...]  # successful requests only
    error_samples: tuple[str, ...] = ()

    @property
    def requests(self) -> int:
        return len(self.latencies_ms)

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        """percentile() of the successful latencies, in ms (nan when there are none)."""
        return percentile(self.latencies_ms, q)

    @property
    def p50(self) -> float:
        return self.percentile(50)

    @property
    def p99(self) -> float:
        return self.percentile(99)


class WrongAnswer(AssertionError):
    """Raised by a load call whose response did not match the expected numbers."""


async def closed_loop(
    call: Callable[[int], Awaitable[object]], *, concurrency: int, requests: int, max_seconds: float = 60.0
) -> LoadResult:
    """Run `requests` calls with `concurrency` workers, each awaiting its call before the next.

    `call(i)` performs request i and raises (WrongAnswer, or the client's error) when it failed; a
    failure is counted and sampled, never fatal. Stops early after `max_seconds`.
    """
    latencies: list[float] = []
    samples: list[str] = []
    errors = 0
    issued = 0
    deadline = time.perf_counter() + max_seconds

    async def worker() -> None:
        nonlocal issued, errors
        while issued < requests and time.perf_counter() < deadline:
            i = issued
            issued += 1
            start = time.perf_counter()
            try:
                await call(i)
            except Exception as exc:
                errors += 1
                if len(samples) < 5:
                    samples.append(f"request {i}: {type(exc).__name__}: {exc}")
                continue
            latencies.append((time.perf_counter() - start) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    return LoadResult(concurrency, issued, errors, elapsed, tuple(latencies), tuple(samples))


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)
