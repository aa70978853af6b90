"""What the operator process holds between handler calls: one typed object, handed to kopf as its
memo (`kopf.run(memo=...)`). kopf gives each resource object's handlers a shallow copy of it, so the
stores below are shared by all of them. Only the start-up handler assigns to it (kopf's settings, the
background tasks), on the operator's own copy, before any resource is watched."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import kopf

from ..kube.api_client import Kube
from ..settings import Settings
from .cache import BoundedCache
from .children import ChildIndex
from .compiling import Workers
from .discovery import Discovery
from .fairness import FairShare
from .health import WatchHealth
from .loops import Loops

if TYPE_CHECKING:
    import logging

    import aiohttp.web

    from ..render.triton_metrics import Scrape

Key = tuple[str, str]  # (namespace, name) of a TritonPipeline
COMPILE_CACHE_BYTES = 64 * 1024 * 1024  # the compiled pipelines kept (estimated: reconcile/pipeline.py)
# API calls run in threads (the official client is synchronous); more than 8 buys nothing on the
# CPU-bound path and costs memory (measured with `make bench-controlplane`)
API_THREADS = 8
# reconciles in flight at once: half the API-call threads (one reconcile's applies run side by side);
# more would only wait for a thread while holding their compiled plan and rendered children. 200 new
# pipelines at once (make bench-controlplane): peak RSS 234 MB with no bound, 159 MB with 16, 152 MB
# with 8, 149 MB with 4; all 200 reconciled in 17-20 s with each
RECONCILES_AT_ONCE = API_THREADS // 2
Seen = dict[str, tuple[str, float, int]]  # Kind/name -> (uid, our Apply time, hash of spec/data)
OptionalChildren = set[tuple[str, str, str]]  # (apiVersion, kind, name) of optional children


@dataclass
class Reviews:
    """What the access review needs once a process (reconcile/authors.py): the key that signs the
    pipelines' records (read once), the operator's own user name (its writes review nobody), and whether
    this process serves the webhook. An object of its own: kopf hands each pipeline's handlers a shallow
    copy of the OperatorState, so what one sets on its copy must live in an object they share."""

    key: bytes | None = None
    self_user: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    webhook_on: bool = False
    # the API server's answers to SubjectAccessReviews, by (user, item): until when each is kept, and
    # the answer (a future while it is asked; reconcile/authors.py `allowed`)
    answers: dict[tuple[str, str], tuple[float, asyncio.Future[bool]]] = field(default_factory=dict)


@dataclass
class PipelineMemory:
    """What the operator remembers of one pipeline between its reconciles: one object per pipeline in
    OperatorState.pipelines, so forgetting a deleted pipeline is one pop."""

    # the status it last got from us: we are its only writer (reconcile/status_writer.py)
    status: dict[str, Any] | None = None
    # (uid, generation) as last reconciled
    owner: tuple[str | None, int | None] | None = None
    # the optional children this process rendered (what a later prune may delete)
    optional: OptionalChildren | None = None
    # what its last reconcile saw of its children (reconcile.apply.changes)
    applied: Seen | None = None
    # what its last reconcile sent of each child (reconcile/claim.py: `Kind/name` -> digest)
    sent: dict[str, str] = field(default_factory=dict)
    # the objects with its children's names that another holds (render/ownership.py): `Kind/name` -> who,
    # as its last reconcile found them (the objects-not-owned metric counts them)
    taken: dict[tuple[str, str, str], str] = field(default_factory=dict)
    # its model claim as last read: (claim, when, the claim or None) (reconcile/pipeline.py)
    claim: tuple[str, float, dict[str, Any] | None] | None = None
    # when an event last started a repair of its changed child (reconcile/resync.py)
    repaired: float | None = None
    # the API server refused its objects: (essence of the refused spec, refusals in a row, monotonic time
    # before which a resync leaves it alone) (reconcile/pipeline.py refusal_backoff)
    refused: tuple[str, int, float] | None = None
    # this process made or found its generated admin-key Secret (reconcile/pipeline.py)
    secret: bool = False
    # the fields of a newer CRD its last reconcile ignored (logged when they change)
    newer_fields: str | None = None
    # the autoscaling engine its last reconcile chose (`auto` resolved: render/autoscaling_objects.py)
    engine: str | None = None
    # the last scrape of each Ready pod's Triton metrics (reconcile.live)
    scrapes: dict[str, Scrape] = field(default_factory=dict)
    # its last metrics poll failed (one warning when it starts failing)
    scrape_failing: bool = False


class KeyedLocks:
    """One asyncio.Lock per pipeline, kept while a task holds it or waits for it and dropped after: a
    lock in use is never replaced (whoever comes next waits for it, even after the pipeline was
    forgotten), and nothing is left of a pipeline nobody works on."""

    def __init__(self) -> None:
        self._locks: dict[Key, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: Key) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            users = self._locks[key][1] - 1
            if users:
                self._locks[key] = (lock, users)
            else:
                del self._locks[key]

    def locked(self, key: Key) -> bool:
        held = self._locks.get(key)
        return held is not None and held[0].locked()

    def __contains__(self, key: object) -> bool:
        return key in self._locks


@dataclass
class OperatorState:
    """The operator's settings, API client and per-pipeline memory."""

    settings: Settings
    kube: Kube
    # the watch streams' health (liveness, readiness), fed by the trace on kopf's client (health.py)
    health: WatchHealth = field(init=False)
    # the loops (resync, status poll, discovery, leadership, webhook certificate): their passes (liveness,
    # metrics)
    loops: Loops = field(init=False)
    # kopf's settings, for the loggers of work outside a pipeline's handlers (set at start-up)
    kopf_settings: kopf.OperatorSettings = field(default_factory=kopf.OperatorSettings)
    # what the operator remembers of each pipeline (PipelineMemory): a deleted one is one pop (forget)
    pipelines: dict[Key, PipelineMemory] = field(default_factory=dict)
    # the locks below are not on a pipeline's memory: a lock lives while a task holds or waits for it
    # (KeyedLocks), so forgetting a pipeline never replaces one that a running reconcile holds
    # reconciles, one at a time per pipeline
    reconciling: KeyedLocks = field(default_factory=KeyedLocks)
    # status writes, one at a time per pipeline
    writing: KeyedLocks = field(default_factory=KeyedLocks)
    # status mirrors of the Deployment and its pods, one at a time per pipeline (read, then write)
    mirroring: KeyedLocks = field(default_factory=KeyedLocks)
    # reconciles in flight at once, of all pipelines (RECONCILES_AT_ONCE), shared fairly between
    # namespaces: one tenant's burst leaves the next free place to another tenant's pipeline
    admitted: FairShare = field(default_factory=lambda: FairShare(RECONCILES_AT_ONCE))
    # outdated pipelines (render/pinning.py) this process rolled whose rollout has not completed, with the
    # Deployment generation the roll's apply produced (None until applied: no event frees the slot before),
    # and those waiting for a slot (settings.roll_outdated), oldest first. Operator-wide, not on a
    # pipeline's memory: the slots are shared, and the queue's order is across pipelines
    rolling: dict[Key, int | None] = field(default_factory=dict)
    queued: dict[Key, None] = field(default_factory=dict)
    # each pipeline's last compilation, by its essence (reconcile/pipeline.py `compiled`): the children,
    # or the SpecError. Operator-wide, not on a pipeline's memory: bounded by bytes across pipelines, and
    # the access review of a pipeline whose Gateway it reads fills it at admission, before the pipeline
    # exists
    compiled: BoundedCache = field(default_factory=lambda: BoundedCache(COMPILE_CACHE_BYTES))
    # the compile worker processes and the webhook's verdicts (runtime/compiling.py); in-process threads
    # until the start-up handler configures them from the settings
    workers: Workers = field(default_factory=Workers)
    # the children as their watches show them (handlers.py feeds it; runtime/children.py)
    children: ChildIndex = field(default_factory=ChildIndex)
    # nodes the drain check could not read (NODE_UNREADABLE is logged once per node; reconcile/drain.py)
    unreadable_nodes: set[str] = field(default_factory=set)
    # each node as the drain check last read it: (monotonic time, cordoned) (reconcile/drain.py)
    nodes: dict[str, tuple[float, bool]] = field(default_factory=dict)
    # which optional APIs the cluster serves (KEDA, routing providers), kept for the discovery period
    discovery: Discovery = field(init=False)
    # the access review's key and identity (reconcile/authors.py), one object every memo shares
    reviews: Reviews = field(default_factory=lambda: Reviews())
    # this replica in kopf's peering (render/peering.py) and whether it is the active one (the resync and
    # status-poll loops run only then); always active without peering (settings.peering empty)
    identity: str = ""
    priority: int = 0
    active: bool = True
    # the drift-repair loop (reconcile.resync), the status poll (reconcile.live), the peering check
    # (reconcile.leadership), the discovery loop (reconcile.discovery_loop)
    resync: asyncio.Task[None] | None = None
    poll: asyncio.Task[None] | None = None
    leadership: asyncio.Task[None] | None = None
    discovering: asyncio.Task[None] | None = None
    # /metrics and /readyz, when served
    metrics_server: aiohttp.web.AppRunner | None = None

    def __post_init__(self) -> None:
        self.health = WatchHealth(self.settings.watch_stale_seconds)
        self.loops = Loops(self.settings.loop_stale_margin_seconds)
        self.discovery = Discovery(self.settings.discovery_seconds)

    def memory(self, key: Key) -> PipelineMemory:
        """What the operator remembers of the pipeline `key`, made empty the first time."""
        memory = self.pipelines.get(key)
        if memory is None:
            memory = self.pipelines[key] = PipelineMemory()
        return memory

    def forget(self, namespace: str, name: str) -> None:
        """Drop what the operator remembers of a deleted pipeline: its memory, and its place in the
        operator-wide stores (the roll-out slots and queue, the compile cache, the discovery's
        dependents). Its locks go when nobody holds them (KeyedLocks)."""
        key = (namespace, name)
        self.pipelines.pop(key, None)
        self.rolling.pop(key, None)
        self.queued.pop(key, None)
        self.compiled.pop(key)
        self.discovery.forget(key)

    def logger_for(self, cr: Mapping[str, Any]) -> logging.LoggerAdapter[Any]:
        """A logger whose lines carry the pipeline's namespace/name (posts no Events), for work done
        outside the pipeline's own handlers (resync, child and Deployment events)."""
        return kopf.LocalObjectLogger(body=cr, settings=self.kopf_settings)  # type: ignore[arg-type]


def operator_state(memo: object) -> OperatorState:
    """The memo kopf hands a handler, which `tritonpipeline run` made an OperatorState."""
    if not isinstance(memo, OperatorState):
        raise kopf.PermanentError("start the operator with `tritonpipeline run` (it hands kopf its state)")
    return memo
