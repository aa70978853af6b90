"""Operator upgrades restart no Triton pod by themselves (render/pinning.py decides; here the live objects
are read and the fleet roll is paced)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import kopf

from ..render import conditions as st
from ..render import pinning
from ..render.manifests import PIPELINE_LABEL, Children
from ..render.meta import namespace_of
from ..runtime import log_events as events
from ..runtime.state import OperatorState
from ..spec import TritonPipeline


@dataclasses.dataclass(frozen=True)
class Pinned:
    """What to apply (the pinned children or the fresh ones), what the UpToDate condition says, the
    ConfigMaps a prune must keep (those of a pinned pod template) and the pipeline's ConfigMaps as listed
    (for the prune: one list per reconcile)."""

    children: Children
    up_to_date: st.Condition
    keep_configmaps: frozenset[str] = frozenset()
    live_configmaps: tuple[dict[str, Any], ...] = ()
    rolled: bool = False  # this apply rolls an outdated pipeline (settings.roll_outdated)
    live: dict[str, Any] | None = None  # the Deployment as read before this apply


async def pin(
    state: OperatorState,
    tp: TritonPipeline,
    children: Children,
    body: kopf.Body,
    logger: kopf.Logger,
) -> Pinned:
    """The children to apply: fresh, or with the live pod template and ConfigMaps kept (pinning.decide).
    With settings.roll_outdated, an outdated pipeline rolls when fewer than that many are rolling."""
    generation = body.metadata.get("generation")
    observed = (body.get("status") or {}).get("observedGeneration")
    namespace, key = namespace_of(tp), (namespace_of(tp), tp.name)
    live, configmaps = await live_deployment(
        state, namespace, children.deployment["metadata"]["name"], tp.name
    )
    roll = pinning.roll_request(dict(body))
    rendered = pinning.record(children.deployment, generation, roll)
    fresh = dataclasses.replace(children, deployment=rendered)
    live_configmaps = {cm["metadata"]["name"]: cm for cm in configmaps}
    decision = pinning.decide(
        generation, observed, roll, rendered, list(children.configmaps), live, live_configmaps
    )
    message = f"the pods run what this operator renders for generation {generation}"
    current = st.Condition(pinning.UP_TO_DATE, True, pinning.CURRENT, message)
    listed = tuple(configmaps)
    if not decision.pinned or live is None:
        state.queued.pop(key, None)
        return Pinned(fresh, current, live_configmaps=listed, live=live)
    differences = pinning.describe(decision.differences)
    slots = state.settings.roll_outdated
    if slots > 0 and (key in state.rolling or len(state.rolling) < slots):
        state.queued.pop(key, None)
        state.rolling.setdefault(key, None)
        events.ROLLING.log(logger, rolling=len(state.rolling), slots=slots, differences=differences)
        return Pinned(fresh, current, live_configmaps=listed, rolled=True, live=live)
    message = pinning.PINNED_MESSAGE.format(
        generation=generation, differences=differences, name=tp.name, annotation=pinning.ROLL_ANNOTATION
    )
    reason = pinning.OPERATOR_UPGRADED
    if slots > 0:
        state.queued[key] = None
        message += pinning.QUEUED_MESSAGE.format(slots=slots)
        reason = pinning.ROLL_QUEUED
    pinned = dataclasses.replace(fresh, deployment=pinning.pinned_deployment(rendered, live), configmaps=())
    keep = frozenset(pinning.projected_configmaps(live["spec"]["template"]))
    return Pinned(pinned, st.Condition(pinning.UP_TO_DATE, False, reason, message), keep, listed, live=live)


async def live_deployment(
    state: OperatorState, namespace: str, name: str, pipeline: str
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The pipeline's Deployment and its generated ConfigMaps as they are: from the watches' index where
    it knows them (the Deployment, and every ConfigMap its pod template mounts), else from the API."""
    index = state.children
    known = index.get("Deployment", namespace, name)
    if known is not None:
        configmaps = index.of("ConfigMap", namespace, pipeline)
        mounts = set(pinning.projected_configmaps(known.body["spec"].get("template") or {}))
        if mounts <= {cm["metadata"]["name"] for cm in configmaps}:
            return known.body, configmaps
    kube = state.kube
    live, listed = await asyncio.gather(
        asyncio.to_thread(kube.get, "apps/v1", "Deployment", namespace, name),
        asyncio.to_thread(kube.list, "v1", "ConfigMap", namespace, f"{PIPELINE_LABEL}={pipeline}", True),
    )
    return live, listed


def rolled(state: OperatorState, key: tuple[str, str], deployment: dict[str, Any]) -> None:
    """After the roll's apply: the Deployment generation whose completed rollout frees the slot."""
    if key in state.rolling:
        state.rolling[key] = int((deployment.get("metadata") or {}).get("generation", 0))


def finished_rolling(
    state: OperatorState, namespace: str, owner: str, deployment: dict[str, Any]
) -> list[tuple[str, str]]:
    """After a Deployment event: when it ends a roll of ours, free the slot; the queued pipelines to
    reconcile now (at most the free slots, oldest first). Only the rollout of the roll's own generation
    counts: an event from before the roll's apply (the listing at start-up, say) shows the old rollout
    done and must not free the slot."""
    key = (namespace, owner)
    generation = state.rolling.get(key)
    if generation is None or int((deployment.get("metadata") or {}).get("generation", 0)) < generation:
        return []
    if not pinning.rollout_done(deployment):
        return []
    del state.rolling[key]
    free = max(0, state.settings.roll_outdated - len(state.rolling))
    return list(state.queued)[:free]
