"""runtime/fairness.py: places shared fairly between namespaces (pure: asyncio only)."""

from __future__ import annotations

import asyncio

from tritonpipeline.runtime import admission
from tritonpipeline.runtime.fairness import FairShare
from tritonpipeline.runtime.state import RECONCILES_AT_ONCE, OperatorState


async def _storm(
    share: FairShare, order: list[str], gate: asyncio.Event, key: str, n: int
) -> list[asyncio.Task[None]]:
    async def one(tag: str) -> None:
        async with share.of(key):
            order.append(tag)
            await gate.wait()

    tasks = [asyncio.create_task(one(f"{key}{i}")) for i in range(n)]
    await asyncio.sleep(0)
    return tasks


def test_one_namespace_alone_uses_every_place() -> None:
    async def scenario() -> list[str]:
        share, order, gate = FairShare(2), [], asyncio.Event()
        tasks = await _storm(share, order, gate, "a", 3)
        assert share.running["a"] == 2
        gate.set()
        await asyncio.gather(*tasks)
        assert len(share) == 0
        return order

    assert asyncio.run(scenario()) == ["a0", "a1", "a2"]


def test_a_namespace_arriving_during_a_storm_gets_the_next_free_place() -> None:
    """Issue 54: one tenant's large dry runs held every review thread and another tenant's admission
    waited behind all of them. Now it waits for one place to free."""

    async def scenario() -> list[str]:
        share, order = FairShare(2), []
        gates = {tag: asyncio.Event() for tag in ("a0", "a1", "a2", "a3", "b0")}

        async def one(key: str, tag: str) -> None:
            async with share.of(key):
                order.append(tag)
                await gates[tag].wait()

        storm = [asyncio.create_task(one("a", f"a{i}")) for i in range(4)]
        await asyncio.sleep(0)
        other = asyncio.create_task(one("b", "b0"))
        await asyncio.sleep(0)
        assert order == ["a0", "a1"]  # both places taken; a2, a3 and b0 queued, in that order
        gates["a0"].set()
        await asyncio.sleep(0.01)
        assert order == ["a0", "a1", "b0"]  # b holds none: it goes before a2, queued earlier
        for gate in gates.values():
            gate.set()
        await asyncio.gather(*storm, other)
        assert len(share) == 0
        return order

    assert asyncio.run(scenario()) == ["a0", "a1", "b0", "a2", "a3"]


def test_a_waiter_cancelled_holds_nothing() -> None:
    async def scenario() -> None:
        share, gate = FairShare(1), asyncio.Event()
        order: list[str] = []
        first = await _storm(share, order, gate, "a", 1)
        waiting = asyncio.create_task(share.of("b").__aenter__())
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        gate.set()
        await asyncio.gather(*first)
        assert len(share) == 0 and not share.running

    asyncio.run(scenario())


def test_the_webhook_and_the_reconciles_share_by_namespace() -> None:
    assert isinstance(admission.TURNS, FairShare) and admission.TURNS.capacity == admission.REVIEW_THREADS
    admitted = OperatorState.__dataclass_fields__["admitted"].default_factory()  # type: ignore[misc]
    assert isinstance(admitted, FairShare) and admitted.capacity == RECONCILES_AT_ONCE


def test_a_namespace_holds_at_most_its_limit_and_leaves_the_rest_free() -> None:
    """Issue 54: with compiles_per_namespace 1 of 2 workers, a tenant's storm never holds both; another
    tenant arriving mid-storm starts at once, without waiting for a place to free."""

    async def scenario() -> list[str]:
        share, order, gate = FairShare(2, limit=1), [], asyncio.Event()
        storm = await _storm(share, order, gate, "a", 3)
        assert order == ["a0"] and share.running["a"] == 1  # the second place stays free
        other = await _storm(share, order, gate, "b", 1)
        assert order == ["a0", "b0"]  # at once: no place had to free
        gate.set()
        await asyncio.gather(*storm, *other)
        assert len(share) == 0
        return order

    assert asyncio.run(scenario()) == ["a0", "b0", "a1", "a2"]


def test_a_storm_of_reviews_leaves_a_review_thread_to_another_namespace() -> None:
    """Issue 54: with both review threads open to one namespace, a storm of large dry runs held them with
    its reads of names taken, and another tenant's review waited (bench-tenants: admission p50 2.1x at
    1/s). The webhook's own turns give a namespace one thread at a time."""

    async def scenario() -> list[str]:
        order: list[str] = []
        gate = asyncio.Event()
        storm = await _storm(admission.TURNS, order, gate, "a", 3)
        other = await _storm(admission.TURNS, order, gate, "b", 1)
        assert order == ["a0", "b0"]  # b's review at once, beside the storm's one
        gate.set()
        await asyncio.gather(*storm, *other)
        assert len(admission.TURNS) == 0
        return order

    assert asyncio.run(scenario()) == ["a0", "b0", "a1", "a2"]
