"""The operator outlives the apiserver going away: its loops (drift repair, status poll, leadership, webhook
certificate) survive every error with backoff and a log line, liveness fails when a loop has not completed a
pass within its bound, and a metric per loop gives its last completed pass (runtime/loops.py). Real operator
processes against a private real kube-apiserver + etcd that the tests stop, start or pause; the supervisor and
the client's error mapping also on their own (pure asyncio, and real sockets that refuse or cut a connection).
Here the pure tests; those on real components are in tests/component/test_operator_outage.py."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tritonpipeline.kube.api_client import Kube, KubeError, is_transient
from tritonpipeline.runtime.loops import Loops, backoff, retrying, supervise

# ------------------------------------------------------------------------ the client, on real sockets


@contextlib.contextmanager
def cutting_server() -> Iterator[int]:
    """A TCP port whose every connection is accepted and closed at once (a connection cut mid-request):
    real sockets, no HTTP at all."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


def client_at(port: int) -> Kube:
    from kubernetes import client as k8s

    configuration = k8s.Configuration()
    configuration.host = f"https://127.0.0.1:{port}"
    configuration.verify_ssl = False
    return Kube(k8s.ApiClient(configuration), "test", retries=1)


@pytest.mark.parametrize("where", ["refused", "cut"])
def test_a_failed_connection_is_a_transient_kube_error_on_every_call(where):
    """A refused connection (urllib3's MaxRetryError) and one cut before any answer (ProtocolError) come
    out of every call of the client as KubeError with status 0, which the loops and the reconcile retry."""
    with contextlib.ExitStack() as stack:
        port = closed_port() if where == "refused" else stack.enter_context(cutting_server())
        kube = client_at(port)
        calls = {
            "get": lambda: kube.get("v1", "Service", "ns", "a"),
            "list": lambda: kube.list("v1", "Service", "ns", ""),
            "apply": lambda: kube.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}}),
            "create_if_absent": lambda: kube.create_if_absent(
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}}
            ),
            "delete": lambda: kube.delete("v1", "Service", "ns", "a"),
            "resource_exists": lambda: kube.resource_exists("v1", "Service"),
            "request": lambda: kube.request("GET", "/version", retries=0),
        }
        for name, call in calls.items():
            with pytest.raises(KubeError) as info:
                call()
            assert info.value.status == 0 and is_transient(info.value), (name, info.value)
            assert "no answer from the API server" in info.value.message, (name, info.value.message)


# --------------------------------------------------------------------------- the supervisor, pure asyncio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_backoff_doubles_up_to_its_cap():
    assert [backoff(n, 0.5, 3.0) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_supervised_loop_outlives_every_exception_and_stops_when_cancelled(caplog):
    """A pass that raises is logged with its retry and tried again with backoff until one completes, then
    the loop goes on at its period; cancelling the task stops it (CancelledError passes through)."""
    loops = Loops(margin=10)
    loop = loops.add("drill", period=0.05)
    outcomes: list[Exception | None] = [RuntimeError("boom"), KubeError(0, "refused"), ValueError("x")]
    passes: list[float] = []

    async def one_pass() -> None:
        outcome = outcomes.pop(0) if outcomes else None
        if outcome is not None:
            raise outcome
        passes.append(time.monotonic())

    async def run() -> asyncio.Task[None]:
        task = asyncio.create_task(supervise(loops, loop, one_pass, events_logger()))
        while len(passes) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task

    caplog.set_level("DEBUG")
    task = asyncio.run(run())
    assert task.cancelled()
    failed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("drill failed")]
    assert len(failed) == 3, failed
    assert failed[0] == "drill failed (1 in a row): RuntimeError: boom; retrying in 0.05s", failed
    assert "(2 in a row): KubeError: HTTP 0: refused" in failed[1]
    assert any(r.getMessage() == "drill: passes complete again after 3 failures" for r in caplog.records)
    assert loop.failures == 0 and loop.passed is not None


def test_liveness_names_a_loop_that_has_not_completed_a_pass_within_its_bound():
    clock = Clock()
    loops = Loops(margin=10, clock=clock)
    resync = loops.add("resync", period=5, active_only=True)
    leadership = loops.add("leadership", period=3)
    assert loops.bound(resync) == 25 and loops.bound(leadership) == 19
    clock.now += 20
    assert loops.problems() == ["loop leadership has not completed a pass for 20s (limit 19s)"]
    # the gauge says the same (tritonpipeline_operator_loop_stalled, the alert's source)
    assert loops.stalled() == {"resync": False, "leadership": True}
    loops.completed(leadership)
    clock.now += 6
    assert loops.problems() == ["loop resync has not completed a pass for 26s (limit 25s)"]
    assert loops.stalled() == {"resync": True, "leadership": False}
    loops.standby = True  # a standby replica runs no resync: not a problem there
    assert loops.problems() == []
    assert loops.stalled() == {"resync": False, "leadership": False}
    clock.now += 100
    loops.completed(leadership)
    loops.standby = False  # active again: the resync's bound counts from now
    assert loops.problems() == []
    clock.now += 18
    loops.completed(leadership)
    clock.now += 8
    assert loops.problems() == ["loop resync has not completed a pass for 26s (limit 25s)"]


def test_a_standby_replica_skips_the_passes_of_active_only_loops():
    loops = Loops(margin=10)
    loops.standby = True
    loop = loops.add("resync", period=0.01, active_only=True)
    passes: list[int] = []

    async def one_pass() -> None:
        passes.append(1)

    async def run() -> None:
        task = asyncio.create_task(supervise(loops, loop, one_pass, events_logger()))
        await asyncio.sleep(0.1)
        assert passes == [] and loop.passed is None
        loops.standby = False
        await asyncio.sleep(0.1)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert passes and loop.passed is not None


def test_retrying_returns_the_first_result_and_reports_each_failure():
    reported: list[tuple[str, int, float]] = []
    attempts = iter([OSError("reset"), OSError("reset"), "done"])

    async def attempt() -> str:
        outcome = next(attempts)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def failed(exc: Exception, failures: int, delay: float) -> None:
        reported.append((str(exc), failures, delay))

    assert asyncio.run(retrying(attempt, failed, first=0.01, cap=0.015)) == "done"
    assert reported == [("reset", 1, 0.01), ("reset", 2, 0.015)]


def events_logger() -> Any:
    import logging

    return logging.getLogger("tests.loops")
