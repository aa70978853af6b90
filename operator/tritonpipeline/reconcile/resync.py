"""Drift repair: the periodic re-apply of every pipeline, the restore of a deleted child, and of a missing
admin-key Secret that a pod waits for."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, cast

import kopf

from ..kube.api_client import KubeError, transient_error
from ..render import access
from ..runtime import log_events as events
from ..runtime.children import fingerprint
from ..runtime.diffbase import handled
from ..runtime.loops import RESYNC, supervise
from ..runtime.state import OperatorState
from ..settings import API_VERSION, GROUP, KIND, Settings
from .pipeline import reconcile
from .refs import namespace_of, owner_of, pipeline_ref


async def reconcile_owner(
    state: OperatorState, namespace: str, name: str, cr: dict[str, Any] | None = None
) -> None:
    """Re-apply one pipeline's children from its current spec (drift repair). A pipeline kopf has not
    handled yet is left to kopf's create handler (reconciled here first, it was reconciled twice, its
    problems reported twice)."""
    if cr is None:
        cr = await asyncio.to_thread(state.kube.get, API_VERSION, KIND, namespace, name)
    why = left_to_others(cr)
    if why is not None:
        logger = state.logger_for(cr if cr is not None else pipeline_ref(namespace, name))
        events.REAPPLY_SKIPPED.log(logger, why=why)
        return
    body = kopf.Body(cast(kopf.RawBody, cr))
    with contextlib.suppress(kopf.PermanentError, kopf.TemporaryError):  # already reported
        await reconcile(body, state, state.logger_for(body), None)


def left_to_others(cr: dict[str, Any] | None) -> str | None:
    """Why a re-apply leaves the pipeline `cr` (as read; None: not found) alone, or None where it re-applies
    it: it is gone or being deleted, or kopf's create handler has not run yet."""
    if cr is None:
        return events.SKIP_GONE
    if cr["metadata"].get("deletionTimestamp"):
        return events.SKIP_DELETING
    if not handled(cr, GROUP):
        return events.SKIP_UNHANDLED
    return None


async def restore_child(state: OperatorState, body: kopf.Body, owner: dict[str, Any]) -> None:
    """A deleted child of a pipeline: say so on the pipeline's lines, and re-apply its children. Not one
    the pipeline's last reconcile in this process did not apply (it pruned it, or a new set of generated
    ConfigMaps replaced it)."""
    namespace = namespace_of(body)
    memory = state.pipelines.get((namespace, owner["name"]))
    seen = memory.applied if memory is not None else None
    if seen is not None and f"{body.get('kind')}/{body.metadata.name}" not in seen:
        return
    log = state.logger_for(pipeline_ref(namespace, owner["name"], owner.get("uid")))
    events.CHILD_RESTORED.log(log, kind=body.get("kind"), name=body.metadata.name)
    # a child deleted right after the create handler applied it may be seen before kopf has stored that
    # the handler ran (reconcile_owner leaves such a pipeline to kopf, and nothing restored the child
    # until the next resync): read the pipeline again for a moment until it has
    for _ in range(RESTORE_READS):
        cr = await asyncio.to_thread(state.kube.get, API_VERSION, KIND, namespace, owner["name"])
        if cr is None or cr["metadata"].get("deletionTimestamp") or handled(cr, GROUP):
            break
        await asyncio.sleep(RESTORE_READ_SECONDS)
    await reconcile_owner(state, namespace, owner["name"], cr)


RESTORE_READS, RESTORE_READ_SECONDS = 10, 0.5  # how long a restore waits for kopf's record of the create

DRIFT_REPAIR_SECONDS = 10.0  # the least time between two repairs of one pipeline that its events start


async def repair_drift(state: OperatorState, body: kopf.Body) -> None:
    """A child's watch shows it other than the pipeline's last reconcile applied it (by its fingerprint,
    runtime/children.py): someone changed it. Re-apply the pipeline now, unless a reconcile of it runs (its
    own writes show up so), or one that an event started ran less than DRIFT_REPAIR_SECONDS ago (another
    controller that keeps changing it is then repaired at that pace, and by the resync)."""
    owner = owner_of(body)
    if owner is None:
        return
    key, ref = (namespace_of(body), owner["name"]), f"{body.get('kind')}/{body.metadata.name}"
    memory = state.pipelines.get(key)
    seen = (memory.applied or {}).get(ref) if memory is not None else None
    if memory is None or seen is None or seen[0] != body.metadata.uid or seen[2] == fingerprint(body):
        return
    now = time.monotonic()
    if state.reconciling.locked(key) or (
        memory.repaired is not None and now - memory.repaired < DRIFT_REPAIR_SECONDS
    ):
        return
    memory.repaired = now
    log = state.logger_for(pipeline_ref(key[0], key[1], owner.get("uid")))
    events.CHILD_DRIFTED.log(log, kind=body.get("kind"), name=body.metadata.name)
    await reconcile_owner(state, *key)


async def restore_admin_secret(state: OperatorState, pod: kopf.Body, pipeline: str) -> None:
    """A pipeline's pod cannot start because its generated admin-key Secret is missing (deleted, or
    collected with an earlier pipeline of the same name): re-apply the pipeline now, which creates it,
    rather than at the next resync."""
    if access.waits_for_secret([dict(pod)], access.generated_secret_name(pipeline)):
        memory = state.pipelines.get((namespace_of(pod), pipeline))
        if memory is not None:
            memory.secret = False
        await reconcile_owner(state, namespace_of(pod), pipeline)


async def watched_pipelines(state: OperatorState, logger: kopf.Logger, what: str) -> list[dict[str, Any]]:
    """Every pipeline in the namespaces the operator watches, for an operator-level loop (`what` names
    it in the warning when the API server refuses to list a namespace: that namespace is skipped this
    round). No answer at all (a transient KubeError) is raised: the loop's pass fails, and is tried again
    (runtime/loops.py). None on a standby replica: the active one does this work (render/peering.py)."""
    config: Settings = state.settings
    if not state.active:
        return []
    found: list[dict[str, Any]] = []
    for ns in config.namespaces or (None,):
        try:
            found += await asyncio.to_thread(state.kube.list, API_VERSION, KIND, ns, "")
        except KubeError as exc:
            if transient_error(exc):
                raise
            events.LIST_FAILED.log(logger, loop=what, error=exc)
    return found


async def resync_pass(state: OperatorState, logger: kopf.Logger) -> None:
    """Re-apply every pipeline (catches drift no event told us about). A pipeline whose repair raises
    is reported and the others go on; no answer from the API server fails the pass (the rest would get
    none either)."""
    for cr in await watched_pipelines(state, logger, RESYNC):
        key = (cr["metadata"]["namespace"], cr["metadata"]["name"])
        # the status as stored, not as last written: someone else's write (or an earlier active
        # replica's, after a hand-over) is then seen, and repaired, once a period
        state.memory(key).status = None
        try:
            await reconcile_owner(state, *key, cr)  # as listed: reconcile skips a copy older than its last
        except Exception as exc:
            if transient_error(exc):
                raise
            events.RESYNC_FAILED.log(state.logger_for(cr), error_type=type(exc).__name__, error=exc)


async def resync_loop(state: OperatorState, logger: kopf.Logger) -> None:
    """Every resync period, a resync pass on the active replica (supervised: runtime/loops.py). An
    operator-level loop, not a kopf timer: timers put finalizers on the CRs, and we need none."""
    loop = state.loops.add(RESYNC, state.settings.resync_seconds, active_only=True)
    await supervise(state.loops, loop, lambda: resync_pass(state, logger), logger, wait_first=True)
