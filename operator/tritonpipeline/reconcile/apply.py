"""Server-side apply of a pipeline's children (their owner reference is added here: the renderers
leave it out), the pruning of those a spec no longer renders, and what an apply created or changed."""

from __future__ import annotations

import asyncio
import calendar
import datetime
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import kopf

from ..kube.api_client import Kube, KubeError, Replaced, is_transient
from ..render import access, autoscaling_objects, ownership, pinning
from ..render import conditions as st
from ..render import routing_objects as rt
from ..render.manifests import PIPELINE_LABEL, Children
from ..render.meta import namespace_of as pipeline_namespace
from ..runtime import log_events as events
from ..runtime.children import fingerprint
from ..runtime.discovery import Discovery
from ..runtime.state import Seen
from ..settings import Settings
from ..spec import TritonPipeline
from ..triton import security
from .claim import Claims, remove
from .gateway import GatewayLookup


def owned(obj: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """A rendered child with `owner` (render/meta.py owner_reference) as its controller: renderers leave
    owner references out (they need the stored CR's uid); they are added here, where it is applied."""
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [owner]}}


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


async def _served(
    kube: Kube, apis: tuple[tuple[str, str], ...], discovery: Discovery, key: tuple[str, str]
) -> list[str]:
    """The APIs (of `apis`) this cluster does not serve, as `Kind (group/version)`, from API discovery
    as last read (runtime/discovery.py: the pipeline `key` depends on the answers)."""
    served = await asyncio.gather(*(discovery.served(kube, a, k, key) for a, k in apis))
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
    (autoscaling_objects.replicas_handover). None when it was not applied (claims says why)."""
    if tp.spec.autoscaling is None or claims.blocked(deployment):
        return await claims.put(kube, deployment)
    kept = claims.unchanged(deployment)
    if kept is not None:  # as applied, and no one changed it since: no handover to make either
        return kept
    meta = deployment["metadata"]
    live = await asyncio.to_thread(kube.get, "apps/v1", "Deployment", meta["namespace"], meta["name"])
    if live is not None and not holder_writable(live, claims):
        return await claims.put(kube, deployment)  # records who holds it
    handover = autoscaling_objects.replicas_handover(tp, deployment, live, kube.field_manager)
    manager = autoscaling_objects.REPLICAS_HANDOVER_MANAGER
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


def _apis(objects: tuple[dict[str, Any], ...]) -> tuple[tuple[str, str], ...]:
    """(apiVersion, kind) of each of `objects`, each once, in order."""
    return tuple(dict.fromkeys((o["apiVersion"], o["kind"]) for o in objects))


async def apply_optional(
    kube: Kube,
    tp: TritonPipeline,
    claims: Claims,
    owner: dict[str, Any],
    discovery: Discovery,
    engine: autoscaling_objects.EngineChoice,
    gateway: GatewayLookup | None = None,
    use_keda: bool = True,
) -> tuple[list[dict[str, Any]], list[st.Condition], list[str]]:
    """Apply the children that need a provider's API when the cluster serves it (`discovery`), owned by
    the pipeline like the others (and, like them, only to objects the pipeline controls: claim.py).
    Returns what was applied, what RoutingConfigured and AutoscalingConfigured say of it, and what was
    deleted to make room (prune_replaced_hpa) (`gateway`: what the Gateway's lookup found, with
    gateway-api; `engine`: the autoscaling engine chosen and why, reconcile/engine.py; `use_keda`:
    settings.use_keda)."""
    children = claims.children
    key = (pipeline_namespace(tp), tp.name)

    async def _missing(apis: tuple[tuple[str, str], ...]) -> list[str]:
        return await _served(kube, apis, discovery, key)

    r = children.routing
    provider_objects = r.provider_objects
    for api in r.provider_apis:  # an older release of a provider may serve the kind at an older version
        older = rt.older_api(provider_objects, api)
        older_api = (rt.OLDER_API_VERSIONS.get(api, ""), api[1])
        if older is not None and await _missing((api,)) and not await _missing((older_api,)):
            provider_objects = older
    applied, routing = await _apply_routing(kube, tp, claims, owner, provider_objects, gateway, _missing)
    scaled, scaling, replaced = await _apply_scaler(kube, tp, claims, owner, engine, _missing, use_keda)
    routing = claims.unwritten("RoutingConfigured", [*r.objects, *provider_objects]) or routing
    scalers = [o for o in (children.hpa, children.scaled_object) if o is not None]
    scaling = claims.unwritten("AutoscalingConfigured", scalers) or scaling
    return applied + scaled, [routing, scaling], replaced


async def _apply_routing(
    kube: Kube,
    tp: TritonPipeline,
    claims: Claims,
    owner: dict[str, Any],
    provider_objects: tuple[dict[str, Any], ...],
    gateway: GatewayLookup | None,
    missing: Callable[[tuple[tuple[str, str], ...]], Awaitable[list[str]]],
) -> tuple[list[dict[str, Any]], st.Condition]:
    """Apply the provider's routing objects (`provider_objects`, at the version the cluster serves): what
    was applied and what RoutingConfigured says of it."""
    r, provider = claims.children.routing, tp.spec.routing.provider
    if r.gateway_pending:
        reason, message = (gateway.reason, gateway.message) if gateway else ("GatewayNotFound", r.description)
        return [], st.Condition("RoutingConfigured", False, reason, message)
    if not r.provider_objects:
        how = tp.spec.routing.session_affinity
        if how in ("ClientIP", "Stream"):
            reason = "ServiceAffinity" if how == "ClientIP" else "StreamAffinity"
            return [], st.Condition("RoutingConfigured", True, reason, r.description)
        return [], st.Condition("RoutingConfigured", True, "NoAffinity", r.description)
    if gone := await missing(_apis(provider_objects)):
        message = rt.PROVIDER_NOT_INSTALLED.format(
            provider=provider, missing=", ".join(gone), headless=rt.headless_name(tp)
        )
        return [], st.Condition("RoutingConfigured", False, "ProviderNotInstalled", message)
    applied: list[dict[str, Any]] = []
    try:
        for obj in provider_objects:
            done = await claims.put(kube, owned(obj, owner), 1)
            applied += [done] if done is not None else []
    except KubeError as exc:
        raise_if_transient(exc)
        hint = (
            ": the cluster has the Gateway API standard-channel CRDs, which lack sessionPersistence; "
            "install the experimental channel (or use provider istio)"
            if "sessionPersistence" in str(exc)
            else ""
        )
        message = f"the apiserver refused the {provider} objects ({exc}){hint}"
        return applied, st.Condition("RoutingConfigured", False, "ProviderRejected", message)
    if provider == "ingress-nginx":
        message = f"{r.description}; {rt.INGRESS_NGINX_RETIRED}"
        return applied, st.Condition("RoutingConfigured", True, st.PROVIDER_DEPRECATED, message)
    return applied, st.Condition("RoutingConfigured", True, "Configured", r.description)


async def _apply_scaler(
    kube: Kube,
    tp: TritonPipeline,
    claims: Claims,
    owner: dict[str, Any],
    engine: autoscaling_objects.EngineChoice,
    missing: Callable[[tuple[tuple[str, str], ...]], Awaitable[list[str]]],
    use_keda: bool,
) -> tuple[list[dict[str, Any]], st.Condition, list[str]]:
    """Apply the ScaledObject (KEDA's engine; the HPA is among the children every cluster takes), the
    pipeline's HPA deleted first: what was applied, what AutoscalingConfigured says of it (which engine
    and why), and the HPA deleted."""
    children = claims.children
    message = engine.sentence + engine.scaling
    if tp.spec.autoscaling is None:
        return [], st.Condition("AutoscalingConfigured", True, "FixedReplicas", message), []
    if children.scaled_object is None:
        return [], st.Condition("AutoscalingConfigured", True, "HorizontalPodAutoscaler", message), []
    if not use_keda:
        return [], st.Condition("AutoscalingConfigured", False, "KedaNotEnabled", KEDA_NOT_ENABLED), []
    if gone := await missing((autoscaling_objects.SCALED_OBJECT_API,)):
        text = KEDA_NOT_INSTALLED.format(missing=gone[0])
        return [], st.Condition("AutoscalingConfigured", False, "KedaNotInstalled", text), []
    replaced = await prune_replaced_hpa(kube, tp, claims, use_keda)
    try:
        done = await claims.put(kube, owned(children.scaled_object, owner), 1)
    except KubeError as exc:
        raise_if_transient(exc)
        text = f"the apiserver refused the ScaledObject: {exc}"
        return [], st.Condition("AutoscalingConfigured", False, "ScaledObjectRejected", text), replaced
    applied = [done] if done is not None else []
    return applied, st.Condition("AutoscalingConfigured", True, "ScaledObject", message), replaced


KEDA_NOT_INSTALLED = (
    "autoscaling.engine keda needs {missing}, which this cluster does not serve: install KEDA (the "
    "ScaledObject is created once its CRD is served) or use engine hpa or auto; no autoscaler exists "
    "meanwhile"
)
KEDA_NOT_ENABLED = (
    "autoscaling.engine keda, but this operator does not use KEDA (TRITONPIPELINE_USE_KEDA is off: the "
    "chart's autoscaling.keda, which grants it ScaledObjects): use engine hpa or auto, or ask the admin to "
    "turn it on; no autoscaler exists meanwhile"
)


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
    kube: Kube,
    tp: TritonPipeline,
    claims: Claims,
    use_keda: bool,
    keep_configmaps: frozenset[str] = frozenset(),
    listed: tuple[dict[str, Any], ...] | None = None,
    skip: frozenset[str] = frozenset(),
) -> list[str]:
    """Delete the pipeline's children a valid spec no longer renders, each only if the pipeline controls
    it (by UID): generated ConfigMaps (of `listed`, the pipeline's ConfigMaps before this apply, listed
    here when None) that neither this rendering, nor a pinned pod template (`keep_configmaps`), nor a
    ReplicaSet of the Deployment (REVISION_HISTORY of them are kept) mounts; and a dropped optional child
    (an autoscaler, a routing object...) of those rendered before (claim.py Pipeline.optional), but
    those of `skip` (`Kind/name` of children deleted already: prune_replaced_hpa). `use_keda`:
    settings.use_keda (prune_optional)."""
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
    return removed + await prune_optional(kube, tp, claims, use_keda, skip=skip)


async def prune_optional(
    kube: Kube,
    tp: TritonPipeline,
    claims: Claims,
    use_keda: bool,
    kinds: frozenset[str] | None = None,
    skip: frozenset[str] = frozenset(),
) -> list[str]:
    """Delete the optional children (of `kinds`, or all) the spec rendered before (claim.py
    Pipeline.optional) and no longer does, each only if the pipeline controls it (`prune`), but those of
    `skip` (`Kind/name`, deleted already). No ScaledObject where the operator does not use KEDA
    (`use_keda`): it made none, and may not read one (the chart grants ScaledObjects with KEDA only)."""
    namespace, name = pipeline_namespace(tp), tp.name
    if not use_keda:
        skip = skip | {f"{autoscaling_objects.SCALED_OBJECT_API[1]}/{name}"}
    rendered = rendered_optional(tp, claims.children)
    candidates = [
        c
        for c in ownership.optional_names(name)
        if c not in rendered
        and c in claims.pipeline.optional
        and ownership.shown(c) not in skip
        and (kinds is None or c[1] in kinds)
    ]
    deleted = await asyncio.gather(*(remove(kube, c, namespace, claims.pipeline) for c in candidates))
    return [ownership.shown(c) for c, gone in zip(candidates, deleted, strict=True) if gone]


async def prune_replaced_hpa(kube: Kube, tp: TritonPipeline, claims: Claims, use_keda: bool) -> list[str]:
    """Before KEDA's ScaledObject is applied, delete the HPA the pipeline had (the engine switched, `auto`
    finding KEDA installed): KEDA's admission webhook refuses a ScaledObject for a Deployment that another
    HPA scales. Only the pipeline's own HPA, as `prune` would delete it after; nothing for a new pipeline."""
    if claims.pipeline.new:
        return []
    return await prune_optional(kube, tp, claims, use_keda, frozenset({"HorizontalPodAutoscaler"}))
