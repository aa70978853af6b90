"""runtime/compiling.py: compiles in worker processes (issue 54 point 3). Real processes of this
package, no cluster: a pipeline's verdict and compile come back the same as in-process, a compile past
the timeout ends its worker and refuses the pipeline, a worker killed mid-compile is replaced, and a
storm of the same review compiles once."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from bench.controlplane.workload import cluster_doc, large_doc
from tritonpipeline.errors import SpecError
from tritonpipeline.render import reach as rc
from tritonpipeline.runtime import compiling
from tritonpipeline.runtime.compiling import CompileStopped, Workers, compile_cr, verdict
from tritonpipeline.settings import GROUP, Settings


def _workers(**settings: Any) -> Workers:
    workers = Workers()
    workers.configure(Settings(**{"compile_workers": 2, **settings}))
    return workers


def _pids(workers: Workers) -> set[int]:
    return {w.process.pid for w in workers._idle[False]}


def _counted(workers: Workers) -> list[int]:
    """The number of worker runs `workers` makes from now on (the list's one item, counted up)."""
    calls = [0]
    run = workers.run

    async def counted(*args: Any) -> Any:
        calls[0] += 1
        return await run(*args)

    workers.run = counted  # type: ignore[method-assign]
    return calls


def test_a_worker_gives_what_the_operator_process_would() -> None:
    doc = cluster_doc("fanout", "team-b")
    bad = cluster_doc("fanout", "team-b")
    bad["spec"]["models"][0]["maxBatchSize"] = -1

    async def scenario() -> None:
        workers = _workers()
        try:
            workers.start()
            assert await workers.verdict(bad, None) == verdict(bad)
            assert not (await workers.verdict(bad, None)).allowed
            tp, generated, children, newer = await workers.run(compile_cr, doc, Settings())
            here = compile_cr(doc, Settings())
            assert (generated, children, newer) == here[1:] and tp == here[0]
            with pytest.raises(SpecError) as refused:
                await workers.run(compile_cr, bad, Settings())
            assert not isinstance(refused.value, CompileStopped)
            assert refused.value.problems == verdict(bad).problems
        finally:
            workers.close()

    asyncio.run(scenario())


def test_a_compile_past_the_timeout_ends_its_worker_and_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    huge = large_doc("huge", "team-a", models=256, pipelines=16, steps=128, tensors=8)

    async def scenario() -> None:
        workers = _workers(compile_timeout_seconds=0.05)
        try:
            workers.start()
            before = _pids(workers)
            started = time.monotonic()
            result = await workers.verdict(huge, None)
            assert time.monotonic() - started < 5  # the compile alone takes about a second here
            (problem,) = result.problems
            assert problem.path == "spec"
            assert problem.message == compiling.COMPILE_TOO_LONG.format(seconds=0.05)
            assert len(workers.verdicts) == 0  # not kept: a quieter moment may let it through
            ended = before - _pids(workers)
            assert len(ended) == 1
            (pid,) = ended
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)  # ended and reaped
            small = await workers.verdict(cluster_doc("fanout", "team-b"), None)
            assert small.allowed  # the others go on, in a new worker
        finally:
            workers.close()

    asyncio.run(scenario())
    assert "compile of team-a/huge stopped: took longer than 0.05s" in caplog.text


def test_a_worker_killed_mid_compile_is_replaced_and_the_compile_tried_again() -> None:
    doc = large_doc("big", "team-a")

    async def scenario() -> None:
        workers = _workers(compile_workers=1)
        try:
            workers.start()
            (victim,) = workers._idle[False]
            pid = victim.process.pid
            await workers.run(compile_cr, cluster_doc("fanout", "team-a"), Settings())  # loaded
            pending = asyncio.create_task(workers.run(compile_cr, doc, Settings()))
            await asyncio.sleep(0.1)  # compiling (this spec takes about 0.3 s)
            os.kill(pid, signal.SIGKILL)  # what the kernel's OOM killer does
            _, generated, _, _ = await pending
            assert generated == compile_cr(doc, Settings())[1]
            assert victim.retired and pid not in _pids(workers)
        finally:
            workers.close()

    asyncio.run(scenario())


def test_a_storm_of_the_same_review_compiles_once() -> None:
    doc = large_doc("big", "team-a")

    async def scenario() -> None:
        workers = _workers()
        try:
            first = await workers.verdict(doc, None)
            calls = _counted(workers)
            again = await asyncio.gather(*(workers.verdict(doc, None) for _ in range(20)))
            assert calls == [0] and all(v == first for v in again)
            renamed = large_doc("other", "team-a")
            await workers.verdict(renamed, None)
            assert calls == [1]  # another name is another verdict
        finally:
            workers.close()

    asyncio.run(scenario())


def test_the_access_reviews_items_come_from_a_worker_as_in_process_and_are_kept() -> None:
    """reach_items in a worker gives the items render/reach.py finds in the operator's process over the
    same compile; a second review of the same pipeline compiles nothing, a refusal is kept too, and a
    pipeline whose Gateway must be read first is left to the operator (None)."""
    doc = cluster_doc("fanout", "team-a")
    address = "http://prometheus.team-a.svc:9090"
    doc["spec"]["autoscaling"] = {"maxReplicas": 3, "engine": "auto", "prometheusAddress": address}
    bad = cluster_doc("fanout", "team-a")
    bad["spec"]["models"][0]["maxBatchSize"] = -1
    gateway = cluster_doc("fanout", "team-a")
    gateway["spec"]["routing"] = {
        "sessionAffinity": "Header",
        "provider": "gateway-api",
        "gateway": {"name": "g", "namespace": "infra"},
    }
    settings = Settings()
    tp, _, children, _ = compile_cr(doc, settings)
    here = rc.reach(tp, children, settings, doc["spec"])

    async def scenario() -> None:
        workers = _workers()
        try:
            items = await workers.reach_items(doc, settings)
            assert items is not None and [i for i in items if not i.optional] == here
            assert any(i.optional and address in i.detail for i in items)  # a ScaledObject's, if chosen
            calls = _counted(workers)
            assert await workers.reach_items(doc, settings) == items
            for _ in range(2):
                with pytest.raises(SpecError) as refused:
                    await workers.reach_items(bad, settings)
                assert refused.value.problems == verdict(bad).problems
            assert calls == [1]  # the refusal once, the items not again
            assert await workers.reach_items(gateway, settings) is None
        finally:
            workers.close()

    asyncio.run(scenario())


def test_a_namespace_that_compiled_much_lately_compiles_at_the_lowest_priority(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 54: a storm of large specs took the CPU another tenant's compiles needed. Once a namespace
    has used HEAVY_CPU_SECONDS, its compiles run in a worker at nice HEAVY_NICE; the others' do not."""
    monkeypatch.setattr(compiling, "HEAVY_CPU_SECONDS", 0.3)
    big = large_doc("big", "team-a")

    async def scenario() -> None:
        workers = _workers()
        try:
            while workers.used("team-a") <= compiling.HEAVY_CPU_SECONDS:
                await workers.run(compile_cr, big, Settings())
            assert not workers._idle[True]
            await workers.run(compile_cr, big, Settings())
            (heavy,) = workers._idle[True]
            assert os.getpriority(os.PRIO_PROCESS, heavy.process.pid) == compiling.HEAVY_NICE
            await workers.run(compile_cr, cluster_doc("fanout", "team-b"), Settings())
            assert workers.used("team-b") < compiling.HEAVY_CPU_SECONDS
            for worker in workers._idle[False]:
                assert os.getpriority(os.PRIO_PROCESS, worker.process.pid) == 0
        finally:
            workers.close()

    asyncio.run(scenario())


def test_compile_usage_halves_with_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(compiling.time, "monotonic", lambda: clock[0])
    workers = Workers()
    assert workers.used("a", 8.0) == 8.0
    clock[0] += compiling.USAGE_HALF_LIFE_SECONDS
    assert workers.used("a") == pytest.approx(4.0)
    clock[0] += 20 * compiling.USAGE_HALF_LIFE_SECONDS
    assert workers.used("a") == pytest.approx(0.0, abs=0.01) and "a" not in workers.usage


def test_a_compile_that_needs_more_memory_than_a_worker_may_map_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker maps at most WORKER_DATA_BYTES: a spec whose compile needs more is refused (not the pod's
    OOM kill), and its worker replaced."""
    monkeypatch.setattr(compiling, "WORKER_DATA_BYTES", 48 * 1024 * 1024)  # loaded: about 28 MB
    huge = large_doc("huge", "team-a", models=256, pipelines=16, steps=128, tensors=12)  # needs ~60 MB

    async def scenario() -> None:
        workers = _workers()
        try:
            with pytest.raises(CompileStopped) as refused:
                await workers.run(compile_cr, huge, Settings())
            (problem,) = refused.value.problems
            assert problem.message == compiling.COMPILE_TOO_BIG.format(mib=48)
            assert not workers._idle[False]  # the worker that raised is gone
            assert (await workers.verdict(cluster_doc("fanout", "team-b"), None)).allowed
        finally:
            workers.close()

    asyncio.run(scenario())


def test_essence_tells_what_a_verdict_and_a_compile_depend_on() -> None:
    """One digest for both caches: the webhook's verdict sees every annotation (their size is checked),
    the reconcile's compile leaves out the operator's own (kopf's progress, the roll request)."""
    doc = cluster_doc("fanout", "team-b")
    marked = cluster_doc("fanout", "team-b")
    marked["metadata"]["annotations"] = {f"{GROUP}/roll": "now"}
    labelled = cluster_doc("fanout", "team-b")
    labelled["metadata"]["labels"] = {"team": "b"}
    other = cluster_doc("fanout", "team-c")
    assert compiling.essence(marked, owned=False) == compiling.essence(doc, owned=False)
    assert compiling.essence(marked)[0] != compiling.essence(doc)[0]
    for changed in (labelled, other):
        assert compiling.essence(changed)[0] != compiling.essence(doc)[0]
        assert compiling.essence(changed, owned=False)[0] != compiling.essence(doc, owned=False)[0]
    big = large_doc("big", "team-b", models=8, pipelines=2, steps=4, tensors=2)
    assert compiling.essence(big)[1] > compiling.essence(doc)[1]  # the size weighs the cached compile


def test_a_worker_spawned_by_a_large_operator_is_kept_after_a_small_compile() -> None:
    """Linux keeps getrusage's peak across exec: a worker started by a process past WORKER_RECYCLE_BYTES
    read that peak as its own and was replaced after every compile (a new process each time; the full
    `make test` run, whose pytest had grown, showed it). A worker measures its own address space."""
    ballast = bytearray(compiling.WORKER_RECYCLE_BYTES + 64 * 1024 * 1024)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1  # resident, as an operator of that size is

    async def scenario() -> None:
        workers = _workers(compile_workers=1)
        try:
            workers.start()
            (worker,) = workers._idle[False]
            for _ in range(2):
                await workers.run(compile_cr, cluster_doc("fanout", "team-a"), Settings())
            assert workers._idle[False] == [worker] and not worker.retired
        finally:
            workers.close()

    asyncio.run(scenario())
    del ballast
