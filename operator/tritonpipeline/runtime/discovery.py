"""Which optional APIs the cluster serves (KEDA's ScaledObject, a routing provider's kinds), from API
discovery, and whether the operator's RBAC lets it use one (`may`), kept between reconciles.

A reconcile asks `served` (one GET of /apis/GROUP/VERSION, the kinds it serves) only when the answer is
older than the discovery period: the other reconciles of that period ask the API server nothing. The
discovery loop (reconcile/discovery_loop.py) asks again each period about every API asked before, and when an
answer changed (a CRD installed, established or removed) re-applies the pipelines whose reconciles asked:
an `auto` autoscaling engine switches to KEDA when KEDA's CRD appears, a provider's objects are created
when its CRDs appear, without waiting for the resync."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..kube.api_client import Kube

Key = tuple[str, str]  # (namespace, name) of a TritonPipeline


@dataclass
class Discovery:
    """The kinds each API version serves, as last read, and which pipelines depend on each."""

    period: float
    clock: Callable[[], float] = time.monotonic
    # apiVersion -> (the kinds it serves, monotonic time read)
    answers: dict[str, tuple[frozenset[str], float]] = field(default_factory=dict)
    # apiVersion -> the pipelines whose reconciles asked about it
    dependents: collections.defaultdict[str, set[Key]] = field(
        default_factory=lambda: collections.defaultdict(set)
    )
    # one read of an apiVersion at a time (a burst of reconciles asks once)
    locks: collections.defaultdict[str, asyncio.Lock] = field(
        default_factory=lambda: collections.defaultdict(asyncio.Lock)
    )

    # (verb, apiVersion, kind, namespace) -> (whether the operator may: Kube.may, monotonic time asked)
    permissions: dict[tuple[str, str, str, str], tuple[bool | None, float]] = field(default_factory=dict)

    def fresh(self, api_version: str) -> frozenset[str] | None:
        """The kinds as read within the period, or None."""
        known = self.answers.get(api_version)
        if known is None or self.clock() - known[1] >= self.period:
            return None
        return known[0]

    async def kinds(self, kube: Kube, api_version: str, key: Key | None = None) -> frozenset[str]:
        """The kinds `api_version` serves, read again when the last answer is older than the period
        (a KubeError that is not a refusal passes through: never taken for "not served"). `key`: the
        pipeline that depends on the answer (re-applied when it changes)."""
        if key is not None:
            self.dependents[api_version].add(key)
        known = self.fresh(api_version)
        if known is not None:
            return known
        async with self.locks[api_version]:
            known = self.fresh(api_version)
            if known is None:
                known = await asyncio.to_thread(kube.served_kinds, api_version)
                self.answers[api_version] = (known, self.clock())
        return known

    async def served(self, kube: Kube, api_version: str, kind: str, key: Key | None = None) -> bool:
        """Whether the cluster serves `kind` at `api_version` (`kinds`)."""
        return kind in await self.kinds(kube, api_version, key)

    async def may(self, kube: Kube, verb: str, api_version: str, kind: str, namespace: str) -> bool | None:
        """Whether the operator may `verb` objects of `kind` in `namespace` (Kube.may: None where it
        cannot ask), asked again when the answer is older than the period: a grant or a revocation of
        its RBAC is seen by the first reconcile after that (the resync at the latest)."""
        ask = (verb, api_version, kind, namespace)
        known = self.permissions.get(ask)
        if known is not None and self.clock() - known[1] < self.period:
            return known[0]
        answer = await asyncio.to_thread(kube.may, verb, api_version, kind, namespace)
        self.permissions[ask] = (answer, self.clock())
        return answer

    async def refresh(self, kube: Kube) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
        """Read every API version asked about before again; those whose kinds changed, with the kinds
        before and after. A KubeError (no answer) passes through after the versions read before it."""
        changed = {}
        for api_version in list(self.answers):
            async with self.locks[api_version]:
                before = self.answers[api_version][0]
                after = await asyncio.to_thread(kube.served_kinds, api_version)
                self.answers[api_version] = (after, self.clock())
            if after != before:
                changed[api_version] = (before, after)
        return changed

    def pipelines(self, api_versions: Iterable[str]) -> list[Key]:
        """The pipelines that depend on any of `api_versions`, each once, sorted."""
        return sorted({key for api in api_versions for key in self.dependents.get(api, ())})

    def forget(self, key: Key) -> None:
        """A deleted pipeline depends on nothing."""
        for keys in self.dependents.values():
            keys.discard(key)
