"""A drain never waits forever for a pipeline's only ready pod, and never takes it away before its
replacement serves (the rule and its pieces: render/disruption.py).

The pipeline's PodDisruptionBudget keeps a drain from evicting the only ready replica of a pipeline that
surges. When that pod is on a cordoned node (the first thing `kubectl drain` does), the operator restarts
the Deployment's pods: the roll surges, so the new pod starts on another node and the old one goes once
the new one is Ready; the drain's next eviction attempt finds it gone. Nodes are read with `get` only,
when a pipeline's status is worked out (each reconcile, so every resync, and each pod or Deployment
event), and only for a Deployment of one surging replica."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..kube.api_client import KubeError
from ..render import disruption
from ..render.pinning import rollout_done
from ..runtime import log_events as events
from ..runtime.state import OperatorState
from .apply import raise_if_transient

NODES = "/api/v1/nodes"  # cluster-scoped, read one at a time (`get` only)


NODE_RECHECK_SECONDS = 15.0  # how long a node read serves every pipeline with a pod on it


async def _cordoned(state: OperatorState, node: str, pod: str, log: Any) -> bool:
    """Whether `node` is cordoned; False when it cannot be read (logged once per node). One read serves
    every pipeline for NODE_RECHECK_SECONDS (a resync of many pipelines on few nodes reads each once)."""
    now = time.monotonic()
    known = state.nodes.get(node)
    if known is not None and now - known[0] < NODE_RECHECK_SECONDS:
        return known[1]
    try:
        found = await asyncio.to_thread(state.kube.request, "GET", f"{NODES}/{node}")
    except KubeError as exc:
        raise_if_transient(exc)
        if exc.status == 404:  # gone with its pods
            return False
        if node not in state.unreadable_nodes:
            state.unreadable_nodes.add(node)
            events.NODE_UNREADABLE.log(log, node=node, pod=pod, error=exc)
        return False
    state.unreadable_nodes.discard(node)
    state.nodes[node] = (now, disruption.cordoned(found))
    return state.nodes[node][1]


async def relieve(
    state: OperatorState, log: Any, deployment: dict[str, Any], pods: list[dict[str, Any]]
) -> tuple[tuple[str, str] | None, dict[str, Any]]:
    """(pod, node) when the pipeline's only ready pod is on a cordoned node, and the Deployment as it is
    now: restarted for that pod unless a rollout under way replaces it already (or the restart for it was
    made). (None, deployment) when no drain waits for the pipeline."""
    if not disruption.budget_holds_one(deployment):
        return None, deployment
    for pod, node in disruption.serving_pods(pods):
        if await _cordoned(state, node, pod, log):
            break
    else:
        return None, deployment
    if not rollout_done(deployment) or disruption.replacing(deployment, pod, node):
        return (pod, node), deployment  # the rollout under way replaces it
    manager = state.settings.field_manager + disruption.DRAIN_MANAGER_SUFFIX
    body = disruption.drain_restart(deployment, pod, node)
    name = deployment["metadata"]["name"]
    try:
        uid = deployment["metadata"]["uid"]  # only the pipeline's own (claim.py)
        restarted = await asyncio.to_thread(state.kube.apply, body, None, manager, uid)
    except KubeError as exc:  # an admission policy, say: the next status pass tries again
        raise_if_transient(exc)
        events.DRAIN_RESTART_REFUSED.log(log, node=node, pod=pod, deployment=name, error=exc)
        return (pod, node), deployment
    events.DRAIN_REPLACING.log(log, node=node, pod=pod, deployment=name)
    return (pod, node), restarted
