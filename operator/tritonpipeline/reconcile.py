"""Reconcile one TritonPipeline: parse, compile, render, server-side apply, report status and events.

The kopf handlers in handlers.py call into this module; everything here is plain async code over the
Kube client and the pure renderers in compiler/ and kube/.
"""

from __future__ import annotations

import asyncio
import calendar
import collections
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from . import metrics, security
from .compiler import compile_pipeline
from .errors import SpecError
from .kube import access, autoscaling, storage
from .kube import routing as rt
from .kube import status as st
from .kube.client import Kube, KubeError
from .kube.manifests import PIPELINE_LABEL, Children, endpoint, owner_reference, render_children
from .settings import GROUP, VERSION, Settings
from .spec import TritonPipeline, parse_pipeline

MANAGED = {"app.kubernetes.io/managed-by": "tritonpipeline-operator"}


def api_client() -> k8s.ApiClient:
    try:
        k8s_config.load_incluster_config()
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()
    configuration = k8s.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = 8
    return k8s.ApiClient(configuration)


def one_line(exc: SpecError) -> str:
    return "; ".join(str(p) for p in exc.problems)


def first_error(exc: SpecError) -> str:
    more = len(exc.problems) - 1
    return f"{exc.problems[0]}" + (f" (and {more} more; see status.conditions SpecValid)" if more else "")


def pipeline_logger(memo: kopf.Memo, cr: Mapping[str, Any]) -> logging.LoggerAdapter[Any]:
    """A logger whose lines carry the pipeline's namespace/name (posts no Events), for work done
    outside the pipeline's own handlers (resync, child and Deployment events)."""
    settings = memo.get("kopf_settings") or kopf.OperatorSettings()
    return kopf.LocalObjectLogger(body=cr, settings=settings)  # type: ignore[arg-type]


def pipeline_ref(namespace: str, name: str, uid: str | None = None) -> dict[str, Any]:
    meta = {"namespace": namespace, "name": name, "uid": uid}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TritonPipeline", "metadata": meta}


def namespace_of(body: kopf.Body) -> str:
    """The namespace of a TritonPipeline or one of its children (all namespaced)."""
    namespace = body.metadata.namespace
    if namespace is None:
        raise kopf.PermanentError(f"{body.get('kind')} {body.metadata.name} has no namespace")
    return namespace


def forget(memo: kopf.Memo, namespace: str, name: str) -> None:
    """Drop what the operator remembers of a deleted pipeline."""
    for store in (memo.statuses, memo.owners, memo.optional, memo.applied):
        store.pop((namespace, name), None)


def _epoch(stamp: str | None) -> float:
    """An API timestamp (RFC 3339, UTC, whole seconds) as seconds since the epoch; 0 when absent."""
    if not stamp:
        return 0.0
    return float(calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))


Seen = dict[str, tuple[str, float, int]]  # Kind/name -> (uid, our Apply time, hash of spec/data)


def _seen(obj: dict[str, Any], manager: str) -> tuple[str, float, int]:
    meta = obj.get("metadata") or {}
    times = [
        _epoch(f.get("time"))
        for f in meta.get("managedFields") or []
        if f.get("manager") == manager and f.get("operation") == "Apply"
    ]
    body = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    labels = {k: meta.get(k) for k in ("labels", "annotations", "ownerReferences")}
    return str(meta.get("uid")), max(times, default=0.0), hash(json.dumps([body, labels], sort_keys=True))


def changes(
    applied: list[dict[str, Any]], manager: str, since: float, before: Seen | None
) -> tuple[list[str], list[str], Seen]:
    """(created, updated, seen): the `Kind/name` of the objects a server-side apply started at `since`
    created or changed, given what the previous reconcile in this process saw (`before`, None after a
    start). The apiserver stamps our field manager's Apply entry, to the second, only when our fields
    changed, so a change by this apply is stamped at or after `since`, and (within the same second as
    the previous apply) also changes the object's uid, stamp or content. Others' writes (a controller,
    an HPA) do not touch our stamp."""
    start = float(int(since))
    created, updated, seen = [], [], {}
    for obj in applied:
        meta = obj.get("metadata") or {}
        ref = f"{obj.get('kind')}/{meta.get('name')}"
        seen[ref] = now = _seen(obj, manager)
        old = (before or {}).get(ref)
        if (old[0] != now[0]) if old else _epoch(meta.get("creationTimestamp")) >= start:
            created.append(ref)
        elif now[1] >= start and (old is None or old[1:] != now[1:]):
            updated.append(ref)
    return created, updated, seen


async def _write_status(
    memo: kopf.Memo, namespace: str, name: str, new: dict[str, Any], current: dict[str, Any] | None = None
) -> bool:
    """Merge `new` into the pipeline's status (conditions by type) and write it only when it changed.

    The operator is the only writer of status; writes for one pipeline are serialised by a lock and
    the last written status is kept in memory, so no read is needed before a write. `current` is the
    status as last seen (from the event), used when nothing is cached yet."""
    key = (namespace, name)
    async with memo.locks[key]:
        old = memo.statuses.get(key)
        if old is None:
            if current is None:
                cr = await asyncio.to_thread(
                    memo.kube.get, f"{GROUP}/{VERSION}", "TritonPipeline", namespace, name
                )
                if cr is None:
                    return False
                current = cr.get("status") or {}
            old = dict(current)
        merged = dict(new)
        if "conditions" in new:
            merged["conditions"] = st.merge_conditions(old.get("conditions"), new["conditions"])
        if not st.status_changed(old, merged):
            memo.statuses[key] = old
            return False
        try:
            await asyncio.to_thread(memo.kube.patch_status, namespace, name, merged)
        except KubeError as exc:
            memo.statuses.pop(key, None)
            if exc.status == 404:
                return False
            raise
        memo.statuses[key] = {**old, **merged}
        return True


async def reconcile(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, event: str | None) -> None:
    """Compile the CR and server-side apply its children; invalid specs change nothing. One reconcile
    per pipeline at a time; the Deployment watcher waits for it (its numbers are then already written).
    Counted and timed by outcome (metrics.py)."""
    outcome = "error"
    async with memo.reconciling[(body.metadata.namespace, body.metadata.name)]:
        started = time.monotonic()
        try:
            outcome = await _reconcile(body, memo, logger, event)
        except kopf.PermanentError:
            outcome = "invalid"
            raise
        finally:
            metrics.RECONCILES.labels(outcome).inc()
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)


async def _reconcile(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, event: str | None) -> str:
    kube: Kube = memo.kube
    config: Settings = memo.settings
    generation = body.metadata.get("generation")
    name, namespace = body.metadata.name, namespace_of(body)
    memo.owners[(namespace, name)] = (body.metadata.uid, generation)
    try:
        tp = parse_pipeline(dict(body))
        artifacts = compile_pipeline(tp)
        children = render_children(tp, artifacts, config, owner_reference(dict(body)))
    except SpecError as exc:
        message = one_line(exc)
        logger.warning(
            f"reconcile invalid (generation {generation}): {first_error(exc)}; last good deployment kept"
        )
        logger.debug(f"every problem of generation {generation}: {message}")
        await _write_status(
            memo,
            namespace,
            name,
            {
                "observedGeneration": generation,
                "conditions": [
                    st.condition("SpecValid", False, "InvalidSpec", message, generation),
                    st.condition(
                        "Ready", False, "InvalidSpec", "the spec is invalid; see SpecValid", generation
                    ),
                ],
            },
            body.get("status") or {},
        )
        await _warn(kube, body, "InvalidSpec", message)
        raise kopf.PermanentError(message) from None
    since = time.time()
    try:
        await _ensure_admin_secret(kube, tp, config, dict(body), logger)
        applied = [
            await (
                _apply_deployment(kube, tp, obj)
                if obj is children.deployment
                else asyncio.to_thread(kube.apply, obj)
            )
            for obj in children.all()
        ]
        optional, conditions = await _apply_optional(kube, tp, children, generation)
        applied += optional
        # a new pipeline has nothing to prune
        stale = [] if event == "Created" else await _prune(memo, kube, tp, children)
        memo.optional[(namespace, name)] = _rendered_optional(tp, children)
    except KubeError as exc:
        logger.error(f"reconcile error (generation {generation}): apply failed, retried in 10s: {exc}")
        raise kopf.TemporaryError(f"apply failed: {exc}", delay=10) from exc
    deployment = next(o for o in applied if o.get("kind") == "Deployment")
    summary = artifacts.graph_summary()
    routers = [r["name"] for r in summary["routers"]]
    logger.debug(
        f"applied {len(applied)} objects ({len(children.configmaps)} ConfigMaps, repository "
        f"{artifacts.digest()[:12]}, routers: {', '.join(routers) or 'none'}); pruned {stale or 'nothing'}; "
        f"autoscaling: {autoscaling.describe(tp)}"
    )
    configured = st.condition(
        "ModelsConfigured",
        True,
        "RepositoryGenerated",
        f"{len(artifacts.files)} generated files in {len(children.configmaps)} ConfigMap(s); "
        f"{len(routers)} router(s) inserted",
        generation,
    )
    valid = st.condition("SpecValid", True, "Valid", "the spec compiles", generation)
    affinity = _affinity_condition(tp, generation)
    claim = storage.claim_name(tp)
    if claim is not None:
        live_claim = await asyncio.to_thread(kube.get, "v1", "PersistentVolumeClaim", namespace, claim)
        source = storage.model_source_condition(tp, live_claim, generation)
        conditions = [*conditions, *([source] if source else [])]
    warnings = [c for c in [*conditions, affinity] if c["status"] == "False"]
    # warn on a user's change, or when a problem is new (not on every resync)
    warnings = [
        c
        for c in warnings
        if event
        or (_previous_condition(memo, namespace, name, body, c["type"]) or {}).get("reason") != c["reason"]
    ]
    pods = await _pods(memo, namespace, name)
    replicas = _replica_status(deployment, generation, [valid, configured, *conditions, affinity], pods)
    await _write_status(
        memo,
        namespace,
        name,
        {"observedGeneration": generation, "endpoint": endpoint(tp), "graph": summary, **replicas},
        body.get("status") or {},
    )
    created, updated, memo.applied[(namespace, name)] = changes(
        applied, config.field_manager, since, memo.applied.get((namespace, name))
    )
    outcome, line = _outcome(len(applied), created, updated, stale, deployment)
    logger.info(f"reconcile {outcome} (generation {generation}): {line}")
    for c in warnings:
        logger.warning(f"{c['type']}={c['status']} ({c['reason']}): {c['message']}")
        await _warn(kube, body, c["reason"], c["message"])
    if event:
        kopf.info(
            body,
            reason=event,
            message=f"applied repository {artifacts.digest()[:12]}, "
            f"{len(routers)} router(s), {len(applied)} objects",
        )
    return outcome


def _outcome(
    applied: int, created: list[str], updated: list[str], pruned: list[str], deployment: dict[str, Any]
) -> tuple[str, str]:
    """The reconcile's outcome (created, updated, unchanged or waiting) and what it changed, one line."""
    desired = int((deployment.get("spec") or {}).get("replicas", 1))
    ready = int((deployment.get("status") or {}).get("readyReplicas", 0))
    waiting = f"waiting for pods ({ready}/{desired} ready)" if ready < desired else ""
    if created and len(created) == applied:
        outcome, what = "created", f"{len(created)} objects ({', '.join(created)})"
    elif created or updated or pruned:
        parts = [
            f"created {', '.join(created)}" if created else "",
            f"updated {', '.join(updated)}" if updated else "",
        ]
        parts.append(f"pruned {', '.join(pruned)}" if pruned else "")
        outcome, what = "updated", "; ".join(p for p in parts if p)
    else:
        outcome, what = ("waiting" if waiting else "unchanged"), f"{applied} objects unchanged"
    return outcome, "; ".join(p for p in (what, waiting) if p)


async def _ensure_admin_secret(
    kube: Kube, tp: TritonPipeline, config: Settings, body: dict[str, Any], logger: kopf.Logger
) -> None:
    """Create the pipeline's admin-key Secret with a fresh key unless it exists (or the spec names one).
    Create only: the operator never reads a Secret, so the key is in no status, event or log line."""
    if not access.generates_secret(tp):
        return
    secret = access.admin_secret(tp, security.new_key(), config, owner_reference(body))
    if await asyncio.to_thread(kube.create_if_absent, secret):
        logger.info(f"created Secret {access.admin_secret_name(tp)} holding the admin key")


async def _warn(kube: Kube, body: kopf.Body, reason: str, message: str) -> None:
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
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TritonPipeline",
            "name": meta.name,
            "namespace": meta.namespace,
            "uid": meta.uid,
        },
        "type": "Warning",
        "reason": reason,
        "message": message[:1024],
        "source": {"component": "tritonpipeline-operator"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        await asyncio.to_thread(kube.create, event)
    except KubeError as exc:  # an event is worth a try, never a failed reconcile
        logging.getLogger(__name__).warning(f"cannot post event {reason}: {exc}")


def _affinity_condition(tp: TritonPipeline, generation: int | None) -> dict[str, Any]:
    problem = rt.affinity_problem(tp)
    if problem:
        return st.condition("SessionAffinity", False, "SequencesWillBreak", problem, generation)
    models = rt.sequence_models(tp)
    if models and rt.max_replicas(tp) > 1:
        how = tp.spec.routing.session_affinity
        message = f"sequences of {', '.join(models)} stay on one replica (routing.sessionAffinity {how})"
        return st.condition("SessionAffinity", True, "SequencesRouted", message, generation)
    message = "no sequence model" if not models else "at most one replica serves the sequences"
    return st.condition("SessionAffinity", True, "NotNeeded", message, generation)


def _previous_condition(
    memo: kopf.Memo, namespace: str, name: str, body: kopf.Body, ctype: str
) -> dict[str, Any] | None:
    status = memo.statuses.get((namespace, name)) or body.get("status") or {}
    return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), None)


async def _served(kube: Kube, apis: tuple[tuple[str, str], ...]) -> list[str]:
    """The APIs (of `apis`) this cluster does not serve, as `Kind (group/version)`."""
    served = await asyncio.gather(*(asyncio.to_thread(kube.resource_exists, a, k) for a, k in apis))
    return [f"{k} ({a})" for (a, k), ok in zip(apis, served, strict=True) if not ok]


async def _apply_deployment(kube: Kube, tp: TritonPipeline, deployment: dict[str, Any]) -> dict[str, Any]:
    """Apply the Deployment; when it gets an autoscaler, hand spec.replicas over first so the count stays
    (autoscaling.replicas_handover)."""
    if tp.spec.autoscaling is None:
        return await asyncio.to_thread(kube.apply, deployment)
    meta = deployment["metadata"]
    live = await asyncio.to_thread(kube.get, "apps/v1", "Deployment", meta["namespace"], meta["name"])
    handover = autoscaling.replicas_handover(tp, deployment, live, kube.field_manager)
    manager = autoscaling.REPLICAS_HANDOVER_MANAGER
    if handover is not None and live is not None:
        await asyncio.to_thread(kube.apply, handover, None, manager)
    applied = await asyncio.to_thread(kube.apply, deployment)
    if handover is not None and live is None:
        applied = await asyncio.to_thread(kube.apply, handover, None, manager)
    return applied


async def _apply_optional(
    kube: Kube, tp: TritonPipeline, children: Children, generation: int | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Apply the children that need a provider's API when the cluster serves it. Returns what was
    applied and the RoutingConfigured / AutoscalingConfigured conditions saying what happened."""
    applied: list[dict[str, Any]] = []
    r = children.routing
    provider = tp.spec.routing.provider
    provider_objects = r.provider_objects
    for api in r.provider_apis:  # an older release of a provider may serve the kind at an older version
        older = rt.older_api(provider_objects, api)
        older_api = (rt.OLDER_API_VERSIONS.get(api, ""), api[1])
        if older is not None and await _served(kube, (api,)) and not await _served(kube, (older_api,)):
            provider_objects = older
    if not r.provider_objects:
        how = tp.spec.routing.session_affinity
        if how == "ClientIP":
            routing = st.condition("RoutingConfigured", True, "ServiceAffinity", r.description, generation)
        else:
            routing = st.condition("RoutingConfigured", True, "NoAffinity", r.description, generation)
    elif missing := await _served(
        kube, tuple(dict.fromkeys((o["apiVersion"], o["kind"]) for o in provider_objects))
    ):
        routing = st.condition(
            "RoutingConfigured",
            False,
            "ProviderNotInstalled",
            f"routing.provider {provider} needs {', '.join(missing)}, which this cluster does not serve: "
            f"install {provider} (its CRDs) and the routing objects are created at the next reconcile; "
            f"everything else, the headless Service {rt.headless_name(tp)} included, is applied",
            generation,
        )
    else:
        try:
            applied += [await asyncio.to_thread(kube.apply, obj, 1) for obj in provider_objects]
            routing = st.condition("RoutingConfigured", True, "Configured", r.description, generation)
        except KubeError as exc:
            _raise_if_transient(exc)
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
            applied.append(await asyncio.to_thread(kube.apply, children.scaled_object, 1))
            message = autoscaling.describe(tp)
            scaling = st.condition("AutoscalingConfigured", True, "ScaledObject", message, generation)
        except KubeError as exc:
            _raise_if_transient(exc)
            message = f"the apiserver refused the ScaledObject: {exc}"
            scaling = st.condition(
                "AutoscalingConfigured", False, "ScaledObjectRejected", message, generation
            )
    return applied, [routing, scaling]


def _raise_if_transient(exc: KubeError) -> None:
    """Connection trouble and overload are retried by the reconcile; a refusal becomes a condition."""
    if exc.status in (0, 429, 502, 503, 504):
        raise exc


def _replica_status(
    deployment: dict[str, Any],
    generation: int | None,
    extra: list[dict[str, Any]],
    pods: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """replicas, readyReplicas and the conditions; Ready says why when `pods` show a problem."""
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
                st.pod_problem(pods or []),
            ),
        ],
    }


def _optional_candidates(tp: TritonPipeline) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of every child that only some specs of this pipeline render."""
    return [
        *rt.possible_names(tp),
        ("autoscaling/v2", "HorizontalPodAutoscaler", tp.name),
        (*autoscaling.SCALED_OBJECT_API, tp.name),
        (*access.NETWORK_POLICY_API, tp.name),
    ]


def _rendered_optional(tp: TritonPipeline, children: Children) -> set[tuple[str, str, str]]:
    rendered = [
        *children.routing.objects,
        *children.routing.provider_objects,
        *([children.hpa] if children.hpa else []),
        *([children.scaled_object] if children.scaled_object else []),
        *([children.network_policy] if children.network_policy else []),
    ]
    names = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in rendered}
    return names & set(_optional_candidates(tp))


async def _prune(memo: kopf.Memo, kube: Kube, tp: TritonPipeline, children: Children) -> list[str]:
    """Delete children a valid spec no longer renders: surplus ConfigMap parts, and a dropped HPA,
    ScaledObject or routing object. After a restart every candidate is tried once (404s are cheap);
    later only what this process rendered before."""
    namespace, name = tp.metadata.namespace, tp.name
    selector = f"{PIPELINE_LABEL}={name}"
    keep = {c["metadata"]["name"] for c in children.configmaps}
    removed = []
    for cm in await asyncio.to_thread(kube.list, "v1", "ConfigMap", namespace, selector):
        if cm["metadata"]["name"] not in keep:
            await asyncio.to_thread(kube.delete, "v1", "ConfigMap", namespace, cm["metadata"]["name"])
            removed.append(f"ConfigMap/{cm['metadata']['name']}")
    rendered = _rendered_optional(tp, children)
    before = memo.optional.get((namespace, name))
    candidates = [
        c for c in _optional_candidates(tp) if c not in rendered and (before is None or c in before)
    ]
    deleted = await asyncio.gather(
        *(asyncio.to_thread(kube.delete, api, kind, namespace, obj) for api, kind, obj in candidates)
    )
    removed += [f"{kind}/{obj}" for (_, kind, obj), gone in zip(candidates, deleted, strict=True) if gone]
    return removed


async def _pods(memo: kopf.Memo, namespace: str, name: str) -> list[dict[str, Any]]:
    """The pipeline's Triton pods (their status says why they are not ready); [] when they cannot be read."""
    try:
        return await asyncio.to_thread(memo.kube.list, "v1", "Pod", namespace, f"{PIPELINE_LABEL}={name}")
    except KubeError as exc:
        _raise_if_transient(exc)
        return []


async def mirror_pods(memo: kopf.Memo, namespace: str, name: str) -> None:
    """A pipeline's pod or Deployment changed: mirror its Deployment, read now, with what the pods say,
    into the status. One mirror per pipeline at a time, each reading after the previous one wrote: an
    earlier read (or an event's older copy) is never written over a later one."""
    mirroring = memo.setdefault("mirroring", collections.defaultdict(asyncio.Lock))
    async with mirroring[(namespace, name)]:
        deployment = await asyncio.to_thread(memo.kube.get, "apps/v1", "Deployment", namespace, name)
        if deployment is None:
            return
        body = kopf.Body(deployment)
        owner = owner_of(body)
        if owner is not None:
            await mirror_deployment(body, memo, owner)


def owner_of(body: kopf.Body) -> dict[str, Any] | None:
    refs = body.metadata.get("ownerReferences") or []
    return next((o for o in refs if o.get("kind") == "TritonPipeline" and o.get("controller")), None)


async def reconcile_owner(memo: kopf.Memo, namespace: str, name: str) -> None:
    """Re-apply one pipeline's children from its current spec (drift repair)."""
    cr = await asyncio.to_thread(memo.kube.get, f"{GROUP}/{VERSION}", "TritonPipeline", namespace, name)
    if cr is None or cr["metadata"].get("deletionTimestamp"):
        return
    with contextlib.suppress(kopf.PermanentError, kopf.TemporaryError):  # already reported
        await reconcile(kopf.Body(cr), memo, pipeline_logger(memo, cr), None)


async def restore_child(memo: kopf.Memo, body: kopf.Body, owner: dict[str, Any]) -> None:
    """A deleted child of a pipeline: say so on the pipeline's lines, and re-apply its children."""
    namespace = namespace_of(body)
    log = pipeline_logger(memo, pipeline_ref(namespace, owner["name"], owner.get("uid")))
    log.info(f"{body.get('kind')}/{body.metadata.name} was deleted; restoring it")
    await reconcile_owner(memo, namespace, owner["name"])


async def resync_loop(memo: kopf.Memo, logger: kopf.Logger) -> None:
    """Every resync period, re-apply every pipeline (catches drift no event told us about). An
    operator-level loop, not a kopf timer: timers put finalizers on the CRs, and we need none."""
    config: Settings = memo.settings
    while True:
        await asyncio.sleep(config.resync_seconds)
        for ns in config.namespaces or (None,):
            try:
                crs = await asyncio.to_thread(memo.kube.list, f"{GROUP}/{VERSION}", "TritonPipeline", ns, "")
            except KubeError as exc:
                logger.warning(f"resync: cannot list pipelines: {exc}")
                continue
            for cr in crs:
                await reconcile_owner(memo, cr["metadata"]["namespace"], cr["metadata"]["name"])


async def mirror_deployment(body: kopf.Body, memo: kopf.Memo, owner: dict[str, Any]) -> None:
    """Mirror a Deployment's replica counts into its TritonPipeline's status and Ready condition."""
    namespace = namespace_of(body)
    key = (namespace, owner["name"])
    async with memo.reconciling[key]:  # a reconcile in flight writes these numbers itself
        pass
    if key not in memo.owners:
        cr = await asyncio.to_thread(
            memo.kube.get, f"{GROUP}/{VERSION}", "TritonPipeline", namespace, owner["name"]
        )
        if cr is None:
            return
        memo.owners[key] = (cr["metadata"].get("uid"), cr["metadata"].get("generation"))
    uid, generation = memo.owners[key]
    if uid != owner.get("uid"):
        return
    new = _replica_status(dict(body), generation, [], await _pods(memo, namespace, owner["name"]))
    conditions = (memo.statuses.get(key) or {}).get("conditions") or []
    if any(c.get("type") == "SpecValid" and c.get("status") == "False" for c in conditions):
        # the spec is invalid: keep Ready=False/InvalidSpec, mirror only the counts and Progressing
        new["conditions"] = [c for c in new["conditions"] if c["type"] == "Progressing"]
    if await _write_status(memo, namespace, owner["name"], new):
        log = pipeline_logger(memo, pipeline_ref(namespace, owner["name"], uid))
        log.info(f"pods: {new['readyReplicas']}/{new['replicas']} ready (Deployment/{body.metadata.name})")
