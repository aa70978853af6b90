"""What the operator remembers of a pipeline is one object (runtime/state.py PipelineMemory): forgetting a
deleted pipeline leaves nothing of it in the operator's state, and its locks live while someone holds or
waits for them, so forgetting one never replaces a lock a running reconcile holds. Pure: no API call
(milliseconds)."""

from __future__ import annotations

import asyncio
import dataclasses

from kubernetes.client import ApiClient

from tritonpipeline.kube.api_client import Kube
from tritonpipeline.runtime.state import KeyedLocks, OperatorState, PipelineMemory
from tritonpipeline.settings import Settings

KEY, OTHER = ("team", "fanout"), ("team", "other")
SCRAPE = object()  # a scrape (render/triton_metrics.py Scrape) stands for itself here


def _state() -> OperatorState:
    return OperatorState(settings=Settings(), kube=Kube(ApiClient(), "test"))  # no call is made


def _remembered() -> PipelineMemory:
    """A memory with every field set away from its default: one a new field would be missing from
    fails the test below until it is set here too."""
    memory = PipelineMemory(
        status={"observedGeneration": 3},
        owner=("u-1", 3),
        optional={("v1", "Service", "fanout-headless")},
        applied={"Deployment/fanout": ("u-2", 1.0, 7)},
        sent={"Deployment/fanout": "d1"},
        taken={("v1", "ConfigMap", "fanout-a"): "someone"},
        claim=("models", 1.0, None),
        repaired=1.0,
        refused=("tag", 1, 2.0),
        secret=True,
        newer_fields="spec.future",
        engine="keda",
        scrapes={"pod-a": SCRAPE},  # type: ignore[dict-item]
        scrape_failing=True,
    )
    unset = [f.name for f in dataclasses.fields(PipelineMemory) if getattr(memory, f.name) == _default(f)]
    assert not unset, f"set these in _remembered: {unset}"
    return memory


def _default(f: dataclasses.Field[object]) -> object:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _holds(value: object, key: tuple[str, str]) -> bool:
    """Whether an operator-wide store of the state has an entry for `key`."""
    if isinstance(value, (dict, set, KeyedLocks)):
        return key in value
    return False


def test_forget_leaves_nothing_of_the_pipeline_behind() -> None:
    state = _state()

    async def work() -> None:
        for locks in (state.reconciling, state.writing, state.mirroring):
            async with locks.hold(KEY):
                pass

    asyncio.run(work())
    state.pipelines[KEY] = _remembered()
    state.pipelines[OTHER] = _remembered()
    state.rolling[KEY], state.queued[KEY] = 4, None
    state.compiled.put(KEY, "tag", "compiled", 1)
    state.discovery.dependents["keda.sh/v1alpha1"].add(KEY)

    state.forget(*KEY)

    left = [f.name for f in dataclasses.fields(state) if _holds(getattr(state, f.name), KEY)]
    assert left == []
    assert state.compiled.get(KEY, "tag") is None
    assert all(KEY not in keys for keys in state.discovery.dependents.values())
    assert state.pipelines[OTHER] == _remembered()  # another pipeline's memory is its own


def test_a_lock_in_use_is_not_lost_when_its_pipeline_is_forgotten() -> None:
    state, order = _state(), []

    async def reconcile(name: str, release: asyncio.Event) -> None:
        async with state.reconciling.hold(KEY):
            order.append(f"{name} in")
            await release.wait()
            order.append(f"{name} out")

    async def run() -> None:
        first_done, second_done = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(reconcile("first", first_done))
        await asyncio.sleep(0)
        state.forget(*KEY)  # the pipeline deleted while its reconcile runs (the resync's, say)
        assert state.reconciling.locked(KEY)  # a drift repair still sees the reconcile in flight
        second = asyncio.create_task(reconcile("second", second_done))
        await asyncio.sleep(0.01)
        assert order == ["first in"]  # the next reconcile waits for the running one
        first_done.set()
        second_done.set()
        await asyncio.gather(first, second)

    asyncio.run(run())
    assert order == ["first in", "first out", "second in", "second out"]
    assert KEY not in state.reconciling and not state.reconciling.locked(KEY)


def test_a_lock_is_kept_while_a_task_waits_and_dropped_after_a_cancelled_wait() -> None:
    locks = KeyedLocks()

    async def run() -> None:
        release = asyncio.Event()

        async def hold() -> None:
            async with locks.hold(KEY):
                await release.wait()

        holder = asyncio.create_task(hold())
        await asyncio.sleep(0)
        waiter = asyncio.create_task(hold())
        await asyncio.sleep(0)
        waiter.cancel()  # a waiter that gives up (a cancelled handler) leaves no count behind
        await asyncio.gather(waiter, return_exceptions=True)
        assert KEY in locks and locks.locked(KEY)
        release.set()
        await holder

    asyncio.run(run())
    assert KEY not in locks
