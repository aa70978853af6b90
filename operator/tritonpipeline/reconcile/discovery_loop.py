"""The discovery loop: every TRITONPIPELINE_DISCOVERY_SECONDS, on the active replica, API discovery is
read again for every optional API the pipelines use (runtime/discovery.py); when what one serves changed
(a CRD installed, established or removed), the pipelines that depend on it are re-applied at once: an
`auto` autoscaling engine switches to KEDA when KEDA's CRD appears (its HPA pruned, the ScaledObject
created), a routing provider's objects are created when its CRDs appear."""

from __future__ import annotations

import kopf

from ..kube.api_client import transient_error
from ..runtime import log_events as events
from ..runtime.loops import DISCOVERY, supervise
from ..runtime.state import OperatorState
from .refs import pipeline_ref
from .resync import reconcile_owner


def _kinds(kinds: frozenset[str]) -> str:
    return ", ".join(sorted(kinds)) or "nothing"


async def discovery_pass(state: OperatorState, logger: kopf.Logger) -> None:
    """Read discovery again; re-apply the pipelines of each API whose answer changed (one whose
    reconcile raises is reported and the others go on; no answer from the API server fails the pass)."""
    if not state.active:
        return
    changed = await state.discovery.refresh(state.kube)
    if not changed:
        return
    pipelines = state.discovery.pipelines(changed)
    for api_version, (before, after) in sorted(changed.items()):
        count = len(state.discovery.pipelines([api_version]))
        events.DISCOVERY_CHANGED.log(
            logger, served=_kinds(after), api_version=api_version, before=_kinds(before), count=count
        )
    for namespace, name in pipelines:
        try:
            await reconcile_owner(state, namespace, name)
        except Exception as exc:
            if transient_error(exc):
                raise
            log = state.logger_for(pipeline_ref(namespace, name, None))
            events.RESYNC_FAILED.log(log, error_type=type(exc).__name__, error=exc)


async def discovery_loop(state: OperatorState, logger: kopf.Logger) -> None:
    """Every discovery period, a discovery pass on the active replica (supervised like the resync)."""
    loop = state.loops.add(DISCOVERY, state.settings.discovery_seconds, active_only=True)
    await supervise(state.loops, loop, lambda: discovery_pass(state, logger), logger, wait_first=True)
