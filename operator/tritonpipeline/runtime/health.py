"""Health that means something: is each watch stream of kopf still (re)connecting?

kopf reopens every watch stream at least once per `settings.watching.server_timeout` (the apiserver
closes it then) and after `inactivity_timeout` without events. So a stream that has not connected
successfully for longer than that, plus a margin, is stuck: the apiserver is unreachable, or the
watcher hangs. The numbers come from an aiohttp trace on kopf's own client session (handlers.login);
the same trace counts API errors and watch restarts (metrics.py). Liveness (kopf's /healthz, through
a probe handler) and readiness (/readyz, here) read them. A standby replica (render/peering.py) has its
resource watches closed by kopf's pause: only its peering watch counts then. Both also fail when one of
the operator's own loops is stuck (loops.py)."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

import aiohttp
import aiohttp.web

from ..render.peering import PLURALS
from . import metrics
from .loops import Loops

PEERING_PLURALS = frozenset(PLURALS.values())


class WatchHealth:
    """When each watch stream (by URL path) last connected; which ones are stale."""

    def __init__(self, stale_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stale_after = stale_after
        self.clock = clock
        self.since = clock()
        self.opened: set[str] = set()
        self.connected: dict[str, float] = {}
        self._standby = False
        # start-up steps the operator is not ready before (the admission webhook's registration: a
        # pipeline applied before it would be stored without the access review's record)
        self.waiting: set[str] = set()

    @property
    def standby(self) -> bool:
        return self._standby

    @standby.setter
    def standby(self, standby: bool) -> None:
        """A standby replica's resource watches are closed; the active one's reopen from now on."""
        if standby != self._standby:
            self._standby = standby
            self.since = self.clock()
            self.connected = {p: at for p, at in self.connected.items() if _peering(p)}

    def opening(self, path: str) -> bool:
        """A watch request starts; True when it re-opens a stream opened before."""
        again = path in self.opened
        self.opened.add(path)
        return again

    def connect(self, path: str) -> None:
        self.connected[path] = self.clock()

    def listed(self, resources: Iterable[str]) -> bool:
        """Whether a watch of each resource (by plural) has connected: kopf lists a resource before it
        watches it, so what the list held has reached the handlers (runtime/children.py's index)."""
        have = {_resource(path) for path in self.connected}
        return set(resources) <= have

    def problems(self) -> list[str]:
        """Why the watching is not alive; empty when every stream connected recently."""
        now = self.clock()
        limit = self.stale_after
        watched = {p: at for p, at in self.connected.items() if _peering(p) or not self._standby}
        if not watched:
            age = now - self.since
            return (
                [f"no watch stream has connected in {age:.0f}s (limit {limit:.0f}s)"] if age > limit else []
            )
        return [
            f"watch {path} has not reconnected for {now - at:.0f}s (limit {limit:.0f}s)"
            for path, at in sorted(watched.items())
            if now - at > limit
        ]

    def not_ready(self) -> str | None:
        """Why the operator is not ready: it is ready once its start-up steps are done (`waiting`) and its
        watches connected, none stale."""
        if self.waiting:
            return "; ".join(sorted(self.waiting))
        if not self.connected:
            return "no watch stream has connected yet"
        problems = self.problems()
        return "; ".join(problems) if problems else None


def _peering(path: str) -> bool:
    """A watch of kopf's peering objects (it stays open on a standby replica)."""
    return _resource(path) in PEERING_PLURALS


def _resource(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def trace_config(health: WatchHealth) -> aiohttp.TraceConfig:
    """Watch (re)connections, watch restarts and API errors of kopf's client session."""
    trace = aiohttp.TraceConfig()

    def watch_path(url: Any) -> str | None:
        return url.path if url.query.get("watch") == "true" else None

    async def start(_: Any, __: SimpleNamespace, params: aiohttp.TraceRequestStartParams) -> None:
        path = watch_path(params.url)
        if path is not None and health.opening(path):
            metrics.WATCH_RESTARTS.labels(_resource(path)).inc()

    async def end(_: Any, __: SimpleNamespace, params: aiohttp.TraceRequestEndParams) -> None:
        status = params.response.status
        if status >= 400:
            metrics.api_error(status)
        elif (path := watch_path(params.url)) is not None:
            health.connect(path)

    async def failed(_: Any, __: SimpleNamespace, params: aiohttp.TraceRequestExceptionParams) -> None:
        if not isinstance(params.exception, asyncio.CancelledError):
            metrics.api_error(0)

    trace.on_request_start.append(start)
    trace.on_request_end.append(end)
    trace.on_request_exception.append(failed)
    return trace


async def serve(url: str, health: WatchHealth, loops: Loops) -> aiohttp.web.AppRunner:
    """/metrics (Prometheus text) and /readyz at `url` (http://HOST:PORT) on the running loop: ready once
    the watches are (`WatchHealth.not_ready`) and every loop completed a pass within its bound."""

    async def get_metrics(_: aiohttp.web.Request) -> aiohttp.web.Response:
        body, content_type = metrics.exposition()
        return aiohttp.web.Response(body=body, headers={"Content-Type": content_type})

    async def get_ready(_: aiohttp.web.Request) -> aiohttp.web.Response:
        reason = "; ".join(filter(None, [health.not_ready(), *loops.problems()]))
        return aiohttp.web.Response(status=503 if reason else 200, text=f"{reason or 'ok'}\n")

    parts = urllib.parse.urlsplit(url)
    app = aiohttp.web.Application()
    app.add_routes([aiohttp.web.get("/metrics", get_metrics), aiohttp.web.get("/readyz", get_ready)])
    runner = aiohttp.web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, parts.hostname or "0.0.0.0", parts.port or 8081).start()
    return runner
