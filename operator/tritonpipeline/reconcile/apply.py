"""Server-side apply of a pipeline's children (their owner reference is added here: the renderers
leave it out), the pruning of those a spec no longer renders, and what an apply created or changed."""

from __future__ import annotations

import asyncio
import calendar
import datetime
import time
from collections.abc import Mapping
from typing import Any

import kopf

from ..kube import access, autoscaling, ownership, pinning
from ..kube import routing as rt
from ..kube import status as st
from ..kube.client import Kube, KubeError, Replaced, is_transient
from ..kube.manifests import PIPELINE_LABEL, Children
from ..kube.meta import namespace_of as pipeline_namespace
from ..kube.meta import owned
from ..runtime import log_events as events
from ..runtime.children import fingerprint
from ..runtime.state import OperatorState, Seen
from ..settings import Settings
from ..spec import TritonPipeline
from ..triton import security
from .claim import Claims, remove
from .gateway import GatewayLookup


def _epoch(stamp: str | None) -> float:
    """An API timestamp (RFC 3339, UTC, whole seconds) as seconds since the epoch; 0 when absent."""
    if not stamp:
        return 0.0
    return float(calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))


def _seen(obj: dict[str, Any], manager: str) -> tuple[str, float, int]:
    meta = obj.get("metadata") or {}
    times = [
        _epoch(f.get("time"))
        for f in meta.get("managedFields") or []
        if f.get("manager") == manager and f.get("operation") == "Apply"
    ]
    return str(meta.get("uid")), max(times, default=0.0), fingerprint(obj)


def changes(
    applied: list[dict[str, Any]],
    manager: str,
    since: float,
    before: Seen | None,
    kept: Mapping[str, tuple[str, float, int]] | None = None,
) -> tuple[list[str], list[str], Seen]:
    """(created, updated, seen): the `Kind/name` of the objects a server-side apply started at `since`
    created or changed, given what the previous reconcile in this process saw (`before`, None after a
    start). The apiserver stamps our field manager's Apply entry, to the second, only when our fields
    changed, so a change by this apply is stamped at or after `since`, and (within the same second as
    the previous apply) also changes the object's uid, stamp or content. Others' writes (a controller,
    an HPA) do not touch our stamp. The objects of `kept` were not sent (claim.py `unchanged`): they keep
    what the previous reconcile saw."""
    start = float(int(since))
    created, updated, seen = [], [], {}
    for obj in applied:
        meta = obj.get("metadata") or {}
        ref = f"{obj.get('kind')}/{meta.get('name')}"
        if kept and ref in kept:
            seen[ref] = kept[ref]
            continue
        seen[ref] = now = _seen(obj, manager)
        old = (before or {}).get(ref)
        if (old[0] != now[0]) if old else _epoch(meta.get("creationTimestamp")) >= start:
            created.append(ref)
        elif now[1] >= start and (old is None or old[1:] != now[1:]):
            updated.append(ref)
    return created, updated, seen


async def ensure_admin_secret(
    kube: Kube, tp: TritonPipeline, config: Settings, owner: dict[str, Any], logger: kopf.Logger
) -> None:
    """Create the pipeline's admin-key Secret with a fresh key unless it exists (or the spec names one).
    Create only: the operator never reads a Secret, so the key is in no status, event or log line. A new
    key for pods that run an earlier generated one (its Secret was deleted) restarts them at once, before
    anything else is applied: each pod reads the key once, when it starts, and a retry of this reconcile
    finds the Secret there and would not know."""
    if not access.generates_secret(tp):
        return
    secret = owned(access.admin_secret(tp, security.new_key(), config), owner)
    if not await asyncio.to_thread(kube.create_if_absent, secret):
        return
    name = access.admin_secret_name(tp)
    events.ADMIN_SECRET_CREATED.log(logger, secret=name)
    live = await asyncio.to_thread(kube.get, "apps/v1", "Deployment", pipeline_namespace(tp), tp.name)
    if live is None or not ownership.controlled_by(live, owner["uid"]) or not access.reads_secret(live, name):
        return  # a new pipeline, or pods that read another Secret (the spec's adminKeySecretRef until now)
    created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    manager = config.field_manager + access.ADMIN_KEY_MANAGER_SUFFIX
    roll = access.admin_key_roll(tp, created)
    await asyncio.to_thread(kube.apply, roll, None, manager, live["metadata"]["uid"])
    events.ADMIN_KEY_ROLL.log(logger, secret=name, deployment=tp.name)


async def _served(kube: Kube, apis: tuple[tuple[str, str], ...]) -> list[str]:
    """The APIs (of `apis`) this cluster does not serve, as `Kind (group/version)`."""
    served = await asyncio.gather(*(asyncio.to_thread(kube.resource_exists, a, k) for a, k in apis))
    return [f"{k} ({a})" for (a, k), ok in zip(apis, served, strict=True) if not ok]


async def apply_children(
    kube: Kube, tp: TritonPipeline, claims: Claims, owner: dict[str, Any], logger: kopf.Logger
) -> list[dict[str, Any]]:
    """Apply the children every cluster serves (claims.children.all()), owned by the pipeline, to the
    objects the pipeline controls (claim.py: an object of a child's name that another holds is left as it
    is, and recorded in `claims`); the live objects as applied."""
    applied = []
    children = claims.children
    for child in children.all():
        obj = owned(child, owner)
        try:
            if child is children.deployment:
                obj = ownership.record_optional(obj, rendered_optional(tp, children))
                done = await _apply_deployment(kube, tp, obj, claims)
                if done is not None:
                    done = await _restore_pod_spec(kube, obj, done, logger)
            else:
                done = await claims.put(kube, obj)
        except KubeError as exc:  # which object, for the log and the status
            what = f"{child['kind']} {child['metadata']['name']}: {exc.message}"
            raise KubeError(exc.status, what, exc.causes) from exc
        if done is not None:
            applied.append(done)
    return applied


async def _apply_deployment(
    kube: Kube, tp: TritonPipeline, deployment: dict[str, Any], claims: Claims
) -> dict[str, Any] | None:
    """Apply the Deployment; when it gets an autoscaler, hand spec.replicas over first so the count stays
    (autoscaling.replicas_handover). None when it was not applied (claims says why)."""
    if tp.spec.autoscaling is None or claims.blocked(deployment):
        return await claims.put(kube, deployment)
    kept = claims.unchanged(deployment)
    if kept is not None:  # as applied, and no one changed it since: no handover to make either
        return kept
    meta = deployment["metadata"]
    live = await asyncio.to_thread(kube.get, "apps/v1", "Deployment", meta["namespace"], meta["name"])
    if live is not None and not holder_writable(live, claims):
        return await claims.put(kube, deployment)  # records who holds it
    handover = autoscaling.replicas_handover(tp, deployment, live, kube.field_manager)
    manager = autoscaling.REPLICAS_HANDOVER_MANAGER
    if handover is not None and live is not None:
        await asyncio.to_thread(kube.apply, handover, None, manager, live["metadata"]["uid"])
    applied = await claims.put(kube, deployment)
    if applied is not None and handover is not None and live is None:
        applied = await asyncio.to_thread(kube.apply, handover, None, manager, applied["metadata"]["uid"])
    return applied


def holder_writable(live: dict[str, Any], claims: Claims) -> bool:
    """Whether the pipeline may write `live`, an existing object of one of its children's names."""
    return ownership.holder(live, claims.pipeline.name, claims.pipeline.uid).writable


async def _restore_pod_spec(
    kube: Kube, deployment: dict[str, Any], applied: dict[str, Any], logger: kopf.Logger
) -> dict[str, Any]:
    """What another field manager added to the pod spec (`kubectl set env`, `kubectl edit`: an env var, a
    container, a security setting) stays through a server-side apply, which removes only what its own
    manager stops setting: the pod spec is then replaced by the one applied (a JSON patch; the template's
    metadata, such as `kubectl rollout restart`'s annotation, is left as it is). Fields no manager owns
    (what a mutating webhook added when the Deployment was created) go with it."""
    edited = pinning.foreign_pod_spec_fields(applied, kube.field_manager)
    if not edited:
        return applied
    meta = deployment["metadata"]
    spec = deployment["spec"]["template"]["spec"]
    operation = {"op": "replace", "path": "/spec/template/spec", "value": spec}
    try:
        restored = await asyncio.to_thread(
            kube.patch_json, deployment, applied["metadata"]["uid"], [operation]
        )
    except KubeError as exc:  # a policy refuses it: the rest of the pipeline is applied all the same
        if is_transient(exc) or isinstance(exc, Replaced):
            raise
        events.POD_SPEC_NOT_RESTORED.log(
            logger, deployment=meta["name"], managers=", ".join(edited), error=exc.message
        )
        return applied
    before, after = (int((d.get("metadata") or {}).get("generation", 0)) for d in (applied, restored))
    if after != before:
        events.POD_SPEC_RESTORED.log(logger, deployment=meta["name"], managers=", ".join(edited))
    return restored


async def apply_optional(
    kube: Kube,
    tp: TritonPipeline,
    claims: Claims,
    owner: dict[str, Any],
    generation: int | None,
    gateway: GatewayLookup | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Apply the children that need a provider's API when the cluster serves it, owned by the pipeline
    like the others (and, like them, only to objects the pipeline controls: claim.py). Returns what was
    applied and the RoutingConfigured / AutoscalingConfigured conditions saying what happened
    (`gateway`: what the Gateway's lookup found, with gateway-api)."""
    applied: list[dict[str, Any]] = []
    children = claims.children
    r = children.routing
    provider = tp.spec.routing.provider
    provider_objects = r.provider_objects
    for api in r.provider_apis:  # an older release of a provider may serve the kind at an older version
        older = rt.older_api(provider_objects, api)
        older_api = (rt.OLDER_API_VERSIONS.get(api, ""), api[1])
        if older is not None and await _served(kube, (api,)) and not await _served(kube, (older_api,)):
            provider_objects = older
    if r.gateway_pending:
        reason, message = (gateway.reason, gateway.message) if gateway else ("GatewayNotFound", r.description)
        routing = st.condition("RoutingConfigured", False, reason, message, generation)
    elif not r.provider_objects:
        how = tp.spec.routing.session_affinity
        if how in ("ClientIP", "Stream"):
            reason = "ServiceAffinity" if how == "ClientIP" else "StreamAffinity"
            routing = st.condition("RoutingConfigured", True, reason, r.description, generation)
        else:
            routing = st.condition("RoutingConfigured", True, "NoAffinity", r.description, generation)
    elif missing := await _served(
        kube, tuple(dict.fromkeys((o["apiVersion"], o["kind"]) for o in provider_objects))
    ):
        routing = st.condition(
            "RoutingConfigured",
            False,
            "ProviderNotInstalled",
            rt.PROVIDER_NOT_INSTALLED.format(
                provider=provider, missing=", ".join(missing), headless=rt.headless_name(tp)
            ),
            generation,
        )
    else:
        try:
            for obj in provider_objects:
                done = await claims.put(kube, owned(obj, owner), 1)
                applied += [done] if done is not None else []
            if provider == "ingress-nginx":
                message = f"{r.description}; {rt.INGRESS_NGINX_RETIRED}"
                routing = st.condition("RoutingConfigured", True, rt.PROVIDER_DEPRECATED, message, generation)
            else:
                routing = st.condition("RoutingConfigured", True, "Configured", r.description, generation)
        except KubeError as exc:
            raise_if_transient(exc)
            hint = (
                ": the cluster has the Gateway API standard-channel CRDs, which lack sessionPersistence; "
                "install the experimental channel (or use provider istio)"
                if "sessionPersistence" in str(exc)
                else ""
            )
            routing = st.condition(
                "RoutingConfigured",
                False,
                "ProviderRejected",
                f"the apiserver refused the {provider} objects ({exc}){hint}",
                generation,
            )
    auto = tp.spec.autoscaling
    if auto is None:
        scaling = st.condition(
            "AutoscalingConfigured", True, "FixedReplicas", autoscaling.describe(tp), generation
        )
    elif children.scaled_object is None:
        message = autoscaling.describe(tp)
        scaling = st.condition("AutoscalingConfigured", True, "HorizontalPodAutoscaler", message, generation)
    elif missing := await _served(kube, (autoscaling.SCALED_OBJECT_API,)):
        scaling = st.condition(
            "AutoscalingConfigured",
            False,
            "KedaNotInstalled",
            f"autoscaling.engine keda needs {missing[0]}, which this cluster does not serve: install KEDA "
            "(the ScaledObject is created at the next reconcile) or use engine hpa; no autoscaler exists "
            "meanwhile",
            generation,
        )
    else:
        try:
            done = await claims.put(kube, owned(children.scaled_object, owner), 1)
            applied += [done] if done is not None else []
            message = autoscaling.describe(tp)
            scaling = st.condition("AutoscalingConfigured", True, "ScaledObject", message, generation)
        except KubeError as exc:
            raise_if_transient(exc)
            message = f"the apiserver refused the ScaledObject: {exc}"
            scaling = st.condition(
                "AutoscalingConfigured", False, "ScaledObjectRejected", message, generation
            )
    routing = claims.unwritten("RoutingConfigured", [*r.objects, *provider_objects], generation) or routing
    scalers = [o for o in (children.hpa, children.scaled_object) if o is not None]
    scaling = claims.unwritten("AutoscalingConfigured", scalers, generation) or scaling
    return applied, [routing, scaling]


def raise_if_transient(exc: KubeError) -> None:
    """Connection trouble and overload are retried by the reconcile; a refusal becomes a condition."""
    if is_transient(exc):
        raise exc


def rendered_optional(tp: TritonPipeline, children: Children) -> set[tuple[str, str, str]]:
    """(apiVersion, kind, name) of the optional children this spec renders."""
    rendered = [
        *children.routing.objects,
        *children.routing.provider_objects,
        *([children.hpa] if children.hpa else []),
        *([children.scaled_object] if children.scaled_object else []),
        *([children.network_policy] if children.network_policy else []),
        *([children.disruption_budget] if children.disruption_budget else []),
    ]
    names = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in rendered}
    return names & set(ownership.optional_names(tp.name))


async def prune(
    state: OperatorState,
    kube: Kube,
    tp: TritonPipeline,
    claims: Claims,
    keep_configmaps: frozenset[str] = frozenset(),
    listed: tuple[dict[str, Any], ...] | None = None,
    live: dict[str, Any] | None = None,
) -> list[str]:
    """Delete the pipeline's children a valid spec no longer renders, each only if the pipeline controls
    it (by UID): generated ConfigMaps (of `listed`, the pipeline's ConfigMaps before this apply, listed
    here when None) that neither this rendering, nor a pinned pod template (`keep_configmaps`), nor a
    ReplicaSet of the Deployment (REVISION_HISTORY of them are kept) mounts; and a dropped optional child
    (an autoscaler, a routing object...): those the previous reconcile in this process rendered, else
    those the live Deployment (`live`, before this apply) records (ownership.RENDERED_OPTIONAL), else,
    for a Deployment of an operator before that record, every optional name this pipeline could have."""
    children, pipeline = claims.children, claims.pipeline
    namespace, name = pipeline_namespace(tp), tp.name
    selector = f"{PIPELINE_LABEL}={name}"
    keep = {c["metadata"]["name"] for c in children.configmaps} | keep_configmaps
    removed = []
    if listed is None:
        listed = tuple(await asyncio.to_thread(kube.list, "v1", "ConfigMap", namespace, selector, True))
    surplus = [
        cm["metadata"]
        for cm in listed
        if cm["metadata"]["name"] not in keep and ownership.controlled_by(cm, pipeline.uid)
    ]
    if surplus:  # those a ReplicaSet's pods mount stay with it (a pod it starts again must find them)
        sets = await asyncio.to_thread(kube.list, "apps/v1", "ReplicaSet", namespace, selector)
        mounted = {n for rs in sets for n in pinning.projected_configmaps(rs["spec"].get("template") or {})}
        surplus = [meta for meta in surplus if meta["name"] not in mounted]
    for meta in surplus:
        if await asyncio.to_thread(kube.delete, "v1", "ConfigMap", namespace, meta["name"], meta["uid"]):
            removed.append(f"ConfigMap/{meta['name']}")
    rendered = rendered_optional(tp, children)
    before = state.optional.get((namespace, name))
    if before is None:
        before = ownership.recorded_optional(live, tp.name)
    candidates = [c for c in ownership.optional_names(name) if c not in rendered and c in before]
    deleted = await asyncio.gather(*(remove(kube, c, namespace, pipeline) for c in candidates))
    removed += [ownership.shown(c) for c, gone in zip(candidates, deleted, strict=True) if gone]
    return removed
