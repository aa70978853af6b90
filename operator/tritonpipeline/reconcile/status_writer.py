"""The pipeline's status (the operator is its only writer), the Deployment and pod mirrors into it,
and Warning events."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, cast

import kopf

from ..kube.api_client import Kube, KubeError
from ..render import conditions as st
from ..render.manifests import PIPELINE_LABEL
from ..runtime import log_events as events
from ..runtime.state import OperatorState
from ..settings import API_VERSION, KIND, OPERATOR_NAME
from ..spec import newer_fields
from .apply import raise_if_transient
from .drain import relieve
from .refs import namespace_of, owner_of, pipeline_ref


async def write_status(
    state: OperatorState,
    namespace: str,
    name: str,
    new: dict[str, Any],
    current: dict[str, Any] | None = None,
) -> bool:
    """Merge `new` into the pipeline's status (conditions by type) and write it only when it changed.

    The operator is the only writer of status; writes for one pipeline are serialised by a lock and
    the last written status is kept in memory, so no read is needed before a write (the resync loop
    drops it once a period, so a status someone else wrote is seen and repaired). `current` is the
    status as last seen (from the event), used when nothing is cached yet."""
    key = (namespace, name)
    async with state.writing.hold(key):
        known = state.pipelines.get(key)  # none made before the pipeline is found
        old = known.status if known is not None else None
        if old is None:
            if current is None:
                cr = await asyncio.to_thread(state.kube.get, API_VERSION, KIND, namespace, name)
                if cr is None:
                    return False
                current = cr.get("status") or {}
            old = dict(current)
        merged = dict(new)
        if "conditions" in new:
            merged["conditions"] = st.merge_conditions(old.get("conditions"), new["conditions"])
        if not st.status_changed(old, merged):
            state.memory(key).status = old
            return False
        try:
            await asyncio.to_thread(state.kube.patch_status, namespace, name, merged)
        except KubeError as exc:
            if known is not None:
                known.status = None
            if exc.status == 404:
                return False
            raise
        state.memory(key).status = {**old, **merged}
        return True


def last_conditions(state: OperatorState, namespace: str, name: str, body: kopf.Body) -> list[dict[str, Any]]:
    """The pipeline's conditions as last written (or as the event showed them)."""
    memory = state.pipelines.get((namespace, name))
    status = (memory.status if memory is not None else None) or body.get("status") or {}
    return list(status.get("conditions") or [])


def previous_condition(
    state: OperatorState, namespace: str, name: str, body: kopf.Body, ctype: str
) -> dict[str, Any] | None:
    """The condition of type `ctype` as last written (or as the event showed it)."""
    return next((c for c in last_conditions(state, namespace, name, body) if c.get("type") == ctype), None)


@dataclass(frozen=True)
class PipelineStatus:
    """One pipeline's status as a reconcile reads and writes it: the conditions as last written (or as the
    handler's event showed them) and the merge of what the reconcile found (write_status)."""

    state: OperatorState
    namespace: str
    name: str
    body: kopf.Body

    def previous(self, ctype: str) -> dict[str, Any] | None:
        """The condition of type `ctype` as last written (or as the event showed it)."""
        return previous_condition(self.state, self.namespace, self.name, self.body, ctype)

    def conditions(self) -> list[dict[str, Any]]:
        """The conditions as last written (or as the event showed them)."""
        return last_conditions(self.state, self.namespace, self.name, self.body)

    async def write(self, new: dict[str, Any]) -> None:
        """Merge `new` into the pipeline's status (write_status)."""
        await write_status(self.state, self.namespace, self.name, new, self.body.get("status") or {})


def schema_current(
    state: OperatorState, body: kopf.Body, logger: kopf.Logger, newer: list[str], generation: int | None
) -> dict[str, Any]:
    """SchemaCurrent for the fields of a newer CRD the parse left out (`newer`); logged once by each
    operator process, and again when they change."""
    key, fields = (namespace_of(body), body.metadata.name), newer_fields(newer)
    memory = state.memory(key)
    if fields and memory.newer_fields != fields:
        events.NEWER_FIELDS_IGNORED.log(logger, fields=fields)
    memory.newer_fields = fields
    return st.schema_condition(newer, generation)


async def warn(kube: Kube, body: kopf.Body, reason: str, message: str) -> None:
    """A Warning event on the pipeline: through kopf inside its handlers; from the resync loop, which
    runs outside them (kopf has no event queue there), straight through the API."""
    try:
        kopf.warn(body, reason=reason, message=message)
        return
    except LookupError:
        pass
    meta = body.metadata
    now = st.now()
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.name}.", "namespace": meta.namespace},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": meta.name,
            "namespace": meta.namespace,
            "uid": meta.uid,
        },
        "type": "Warning",
        "reason": reason,
        "message": message[:1024],
        "source": {"component": OPERATOR_NAME},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        await asyncio.to_thread(kube.create, event)
    except KubeError as exc:  # an event is worth a try, never a failed reconcile
        events.EVENT_NOT_POSTED.log(logging.getLogger(__name__), reason=reason, error=exc)


def replica_status(
    deployment: dict[str, Any],
    generation: int | None,
    extra: list[dict[str, Any]],
    pods: list[dict[str, Any]] | None = None,
    drained: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """replicas, readyReplicas and the conditions; Ready says why when `pods` show a problem, or when the
    Deployment cannot create them; Progressing when a rollout's new pod has no room, or a drain waits
    for the only ready pod (`drained`: drain.relieve) to be replaced."""
    spec, dstatus = deployment.get("spec", {}), deployment.get("status", {})
    desired = int(spec.get("replicas", 1))
    fresh = dstatus.get("observedGeneration", 0) >= deployment.get("metadata", {}).get("generation", 0)
    updated = int(dstatus.get("updatedReplicas", 0)) if fresh else 0
    ready = int(dstatus.get("readyReplicas", 0))
    return {
        "replicas": int(dstatus.get("replicas", 0)),
        "readyReplicas": ready,
        "conditions": [
            *extra,
            *st.ready_condition(
                int(dstatus.get("replicas", 0)),
                ready,
                updated,
                desired,
                generation,
                st.stalled_message(dstatus),
                st.pod_problem(pods or []) or st.creation_problem(dstatus),
                st.unschedulable(pods or []),
                drained,
            ),
        ],
    }


async def list_pods(
    state: OperatorState, namespace: str, name: str, indexed: bool = False
) -> list[dict[str, Any]]:
    """The pipeline's Triton pods (their status says why they are not ready); [] when they cannot be read.
    `indexed`: as the pods' watch last showed them, once the watches know the pipeline's Deployment (a
    resync, the status poll: no request), else from the API."""
    if indexed and state.children.get("Deployment", namespace, name) is not None:
        return state.children.of("Pod", namespace, name)
    try:
        return await asyncio.to_thread(state.kube.list, "v1", "Pod", namespace, f"{PIPELINE_LABEL}={name}")
    except KubeError as exc:
        raise_if_transient(exc)
        return []


async def pod_status(
    state: OperatorState,
    log: Any,
    deployment: dict[str, Any],
    generation: int | None,
    extra: list[dict[str, Any]],
    indexed: bool = False,
) -> dict[str, Any]:
    """replica_status with the pipeline's pods as they are now (`indexed`: as their watch shows them,
    list_pods), once a drain that waits for its only ready pod has that pod replaced (drain.relieve)."""
    meta = deployment["metadata"]
    pods = await list_pods(state, meta["namespace"], meta["name"], indexed)
    drained, deployment = await relieve(state, log, deployment, pods)
    return replica_status(deployment, generation, extra, pods, drained)


async def mirror_pods(state: OperatorState, namespace: str, name: str) -> None:
    """A pipeline's pod or Deployment changed: mirror its Deployment, read now, with what the pods say,
    into the status. One mirror per pipeline at a time, each reading after the previous one wrote: an
    earlier read (or an event's older copy) is never written over a later one."""
    async with state.mirroring.hold((namespace, name)):
        deployment = await asyncio.to_thread(state.kube.get, "apps/v1", "Deployment", namespace, name)
        if deployment is None:
            return
        body = kopf.Body(cast(kopf.RawBody, deployment))
        owner = owner_of(body)
        if owner is not None:
            await mirror_deployment(body, state, owner)


async def mirror_deployment(body: kopf.Body, state: OperatorState, owner: dict[str, Any]) -> None:
    """Mirror a Deployment's replica counts into its TritonPipeline's status and Ready condition."""
    namespace = namespace_of(body)
    key = (namespace, owner["name"])
    async with state.reconciling.hold(key):  # a reconcile in flight writes these numbers itself
        pass
    memory = state.pipelines.get(key)
    if memory is None or memory.owner is None:
        cr = await asyncio.to_thread(state.kube.get, API_VERSION, KIND, namespace, owner["name"])
        if cr is None:
            return
        memory = state.memory(key)
        memory.owner = (cr["metadata"].get("uid"), cr["metadata"].get("generation"))
    uid, generation = memory.owner
    if uid != owner.get("uid"):
        return
    log = state.logger_for(pipeline_ref(namespace, owner["name"], uid))
    new = await pod_status(state, log, dict(body), generation, [])
    conditions = (memory.status or {}).get("conditions") or []
    if any(c.get("type") == "SpecValid" and c.get("status") == "False" for c in conditions):
        # the spec is invalid: keep Ready=False/InvalidSpec, mirror only the counts and Progressing
        new["conditions"] = [c for c in new["conditions"] if c["type"] == "Progressing"]
    if await write_status(state, namespace, owner["name"], new):
        events.PODS_READY.log(
            log, ready=new["readyReplicas"], replicas=new["replicas"], deployment=body.metadata.name
        )
