"""The operator's long-running loops (drift repair, status poll, API discovery, leadership, the webhook's
certificate), supervised alike: every loop runs through `supervise`, so a loop added later gets the same.

A pass that raises anything (an API error, a connection that failed, a bug) is logged with what failed
and when it is tried again (LOOP_FAILED), and tried again with exponential backoff, from FIRST_RETRY_SECONDS
and never later than the loop's period; the loop goes on at its period once a pass completes
(LOOP_RECOVERED after failures). Cancelling the task stops the loop: CancelledError passes through.

Each loop's last completed pass is a metric (tritonpipeline_operator_loop_last_pass_timestamp_seconds), and
liveness (kopf's /healthz) and readiness (/readyz) fail when a loop has not completed a pass within its
bound: LOOP_STALE_PERIODS (settings.py) of its periods plus TRITONPIPELINE_LOOP_STALE_MARGIN_SECONDS (a loop
that hangs, or whose every pass fails). On a standby replica (render/peering.py) the loops of the active one
(resync, status poll, discovery) make no passes and are not counted; their bound starts again when the
replica becomes active."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from ..settings import LOOP_STALE_PERIODS
from . import log_events as events
from . import metrics

T = TypeVar("T")

FIRST_RETRY_SECONDS = 1.0  # a failed pass is first tried again after this long (or the period, if shorter)
# the loops by name (the `loop` label of their metrics, the first word of their log lines)
RESYNC = "resync"
STATUS_POLL = "status-poll"
DISCOVERY = "discovery"
LEADERSHIP = "leadership"
WEBHOOK_CERTIFICATE = "webhook-certificate"

Failed = Callable[[Exception, int, float], None]  # (the error, failures in a row, seconds to the retry)


def backoff(failures: int, first: float, cap: float) -> float:
    """Seconds before the next attempt after `failures` failures in a row: doubling from `first`, at most
    `cap`."""
    return min(first * 2 ** (failures - 1), cap)


def describe(exc: BaseException) -> str:
    """An error for a log line: its type and message."""
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


async def retrying(attempt: Callable[[], Awaitable[T]], failed: Failed, *, first: float, cap: float) -> T:
    """`attempt()` until it returns, its result; after each exception (CancelledError passes through)
    `failed(exc, failures, delay)` is called, inside the handler, and the next attempt waits `delay`
    (`backoff`)."""
    failures = 0
    while True:
        try:
            return await attempt()
        except Exception as exc:  # everything: what it was goes to `failed`
            failures += 1
            delay = backoff(failures, first, cap)
            failed(exc, failures, delay)
        await asyncio.sleep(delay)


@dataclass
class Loop:
    """One loop: its name, its period, and when it last completed a pass (monotonic seconds)."""

    name: str
    period: float
    active_only: bool  # makes passes on the active replica only (resync, status poll)
    since: float  # when it started, or the replica became active: its bound counts from here
    passed: float | None = None
    failures: int = 0  # failed passes in a row


class Loops:
    """The loops of this process and their health: which ones have not completed a pass within their
    bound."""

    def __init__(self, margin: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.margin = margin
        self.clock = clock
        self.loops: dict[str, Loop] = {}
        self._standby = False

    def add(self, name: str, period: float, active_only: bool = False) -> Loop:
        """A loop that starts now (it replaces one of the same name: the webhook server restarted)."""
        loop = Loop(name, period, active_only, self.clock())
        self.loops[name] = loop
        metrics.LOOP_FAILURES.labels(name)  # a series from the start (rate() sees the first failure)
        return loop

    def discard(self, loop: Loop) -> None:
        """A loop that stopped (cancelled) is no longer counted."""
        if self.loops.get(loop.name) is loop:
            del self.loops[loop.name]

    @property
    def standby(self) -> bool:
        return self._standby

    @standby.setter
    def standby(self, standby: bool) -> None:
        """A standby replica makes no passes of the active-only loops; once active, their bound counts
        from now."""
        if standby != self._standby:
            self._standby = standby
            now = self.clock()
            for loop in self.loops.values():
                if loop.active_only:
                    loop.since = now

    def runs(self, loop: Loop) -> bool:
        """Whether `loop` makes passes on this replica now."""
        return not (loop.active_only and self._standby)

    def bound(self, loop: Loop) -> float:
        """Seconds without a completed pass after which `loop` counts as stuck."""
        return LOOP_STALE_PERIODS * loop.period + self.margin

    def completed(self, loop: Loop) -> None:
        loop.passed = self.clock()
        metrics.LOOP_LAST_PASS.labels(loop.name).set(time.time())

    def _silent(self, loop: Loop, now: float) -> float | None:
        """Seconds `loop` has gone without a completed pass when that is past its bound, else None (a
        loop that makes no passes on this replica is never past it)."""
        silent = now - max(loop.since, loop.passed or loop.since)
        return silent if self.runs(loop) and silent > self.bound(loop) else None

    def problems(self) -> list[str]:
        """Why the loops are not alive: each loop (that runs here) with no completed pass within its
        bound."""
        now = self.clock()
        found = []
        for loop in self.loops.values():
            silent = self._silent(loop, now)
            if silent is not None:
                found.append(
                    f"loop {loop.name} has not completed a pass for {silent:.0f}s "
                    f"(limit {self.bound(loop):.0f}s)"
                )
        return found

    def stalled(self) -> dict[str, bool]:
        """Each loop of this process by name: whether it is past its bound (what `problems` reports and
        liveness fails on), for tritonpipeline_operator_loop_stalled."""
        now = self.clock()
        return {name: self._silent(loop, now) is not None for name, loop in self.loops.items()}


async def supervise(
    loops: Loops,
    loop: Loop,
    one_pass: Callable[[], Awaitable[None]],
    logger: events.Logger,
    *,
    wait_first: bool = False,
) -> NoReturn:
    """Run `one_pass` every `loop.period` seconds (the first one at once, or after a period with
    `wait_first`), for ever: a pass that raises is logged and tried again with backoff (`retrying`), never
    later than a period. Cancelling the task stops it."""

    def failed(exc: Exception, failures: int, delay: float) -> None:
        loop.failures = failures
        metrics.LOOP_FAILURES.labels(loop.name).inc()
        kind = type(exc).__name__
        events.LOOP_FAILED.log(
            logger, loop=loop.name, failures=failures, error_type=kind, error=exc, retry=delay
        )
        events.LOOP_FAILED_DETAILS.log(logger, loop=loop.name)

    try:
        if wait_first:
            await asyncio.sleep(loop.period)
        while True:
            if loops.runs(loop):
                await retrying(one_pass, failed, first=min(FIRST_RETRY_SECONDS, loop.period), cap=loop.period)
                if loop.failures:
                    events.LOOP_RECOVERED.log(logger, loop=loop.name, failures=loop.failures)
                    loop.failures = 0
                loops.completed(loop)
            await asyncio.sleep(loop.period)
    finally:
        loops.discard(loop)
