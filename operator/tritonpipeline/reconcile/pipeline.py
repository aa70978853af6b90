"""One reconcile of a TritonPipeline: parse, compile, render, server-side apply (apply.py), report
status and events (status.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

import kopf

from ..compiler import graph_problems_beside
from ..errors import SpecError
from ..kube import access, autoscaling, ownership, pinning, storage
from ..kube import routing as rt
from ..kube import status as st
from ..kube.client import Kube, KubeError, is_transient, namespace_terminating
from ..kube.manifests import endpoint, owner_reference
from ..runtime import compiling, metrics
from ..runtime import log_events as events
from ..runtime.compiling import Compiled, CompileStopped, compile_cr
from ..runtime.state import OperatorState
from ..settings import Settings
from ..spec import TritonPipeline, parse_pipeline
from . import authors
from .apply import (
    apply_children,
    apply_optional,
    changes,
    ensure_admin_secret,
    prune,
    prune_replaced_hpa,
    rendered_optional,
)
from .claim import Claims, Pipeline
from .engine import choose_engine
from .gateway import lookup as lookup_gateway
from .refs import namespace_of
from .status import pod_status, previous_condition, schema_current, warn, write_status
from .upgrade import pin, rolled


def essence(body: Mapping[str, Any]) -> tuple[str, int]:
    """What a pipeline's compilation depends on, as a digest, and its size: runtime/compiling.py's
    essence without the operator's own annotations."""
    return compiling.essence(body, owned=False)


# what a compiled pipeline keeps in memory per byte of its spec (the parsed spec, what the repository is
# and the rendered children: 3.3 MB for a 260 KB spec, 2.5 MB of it the parsed spec; tracemalloc)
RETAINED_PER_SPEC_BYTE = 13
RETAINED_AT_LEAST = 48 * 1024  # and at least this much (examples/fanout.yaml's: 44 KB)


async def compiled(state: OperatorState, body: Mapping[str, Any]) -> Compiled:
    """compile_cr in a compile worker (runtime/compiling.py: a large spec takes seconds, and neither the
    webhook's answers nor the probes wait for it), in the namespace's turn, once per change of the
    pipeline's essence while it stays in the bounded cache (state.compiled, which every memo shares: a
    resync of an unchanged pipeline compiles nothing, nor does the reconcile of a pipeline the access
    review compiled at admission). Raises the compile's SpecError (remembered alike)."""
    meta = body.get("metadata") or {}
    key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
    tag, size = essence(body)
    result = state.compiled.get(key, tag)
    if result is None:
        try:
            result = await state.workers.run(compile_cr, dict(body), state.settings)
        except CompileStopped:
            raise  # not remembered: the next resync tries again
        except SpecError as exc:
            result = exc
        state.compiled.put(key, tag, result, max(size * RETAINED_PER_SPEC_BYTE, RETAINED_AT_LEAST))
    if isinstance(result, SpecError):
        raise result
    return cast(Compiled, result)


async def parsed(state: OperatorState, body: kopf.Body) -> TritonPipeline:
    """The pipeline's parsed spec, for readers that need nothing compiled (the status poll): the compiled
    one where the cache keeps it, else a parse off the event loop (13 ms for a 260 KB spec whose
    compilation takes 270 ms): a poll of many large pipelines compiles nothing. Raises SpecError."""
    result = state.compiled.get((namespace_of(body), body.metadata.name), essence(body)[0])
    if isinstance(result, SpecError):
        raise result
    if result is not None:
        return cast(Compiled, result)[0]
    return await asyncio.to_thread(parse_pipeline, dict(body), beside=graph_problems_beside, newer=[])


def one_line(exc: SpecError) -> str:
    return "; ".join(str(p) for p in exc.problems)


def first_error(exc: SpecError) -> str:
    more = len(exc.problems) - 1
    return f"{exc.problems[0]}" + (f" (and {more} more; see status.conditions SpecValid)" if more else "")


async def reconcile(body: kopf.Body, state: OperatorState, logger: kopf.Logger, event: str | None) -> None:
    """Compile the CR and server-side apply its children; invalid specs change nothing. One reconcile
    per pipeline at a time; the Deployment watcher waits for it (its numbers are then already written).
    Counted and timed by outcome (metrics.py)."""
    outcome = "error"
    key = (namespace_of(body), body.metadata.name)
    async with state.reconciling[key]:
        why = None if event is not None else left_alone(state, key, body)
        if why is not None:
            events.REAPPLY_SKIPPED.log(logger, why=why)
            return
        started = time.monotonic()
        try:
            async with state.admitted.of(key[0]):
                outcome = await _reconcile(body, state, logger, event)
        except kopf.PermanentError:
            outcome = "invalid"
            raise
        except KubeError as exc:  # a call outside the apply (a read, the status): said and retried alike
            generation = body.metadata.get("generation")
            events.RECONCILE_ERROR.log(logger, generation=generation, error=exc, retry=RETRY_SECONDS)
            raise kopf.TemporaryError(f"reconcile failed: {exc}", delay=RETRY_SECONDS) from exc
        finally:
            metrics.RECONCILES.labels(outcome).inc()
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)


RETRY_SECONDS = 10  # a failed apply is tried again after this long (kopf's retry)
MAX_RETRY_SECONDS = 600  # the longest back-off of an apply the API server keeps refusing


def refusal_backoff(state: OperatorState, body: kopf.Body) -> int:
    """The seconds until this spec's apply is tried again after the API server refused it: 10, then
    doubled at each refusal of the same spec, up to MAX_RETRY_SECONDS (a spec change starts over). The
    resync leaves the pipeline alone until then."""
    key, current = (namespace_of(body), body.metadata.name), essence(body)[0]
    before = state.refused.get(key)
    count = before[1] + 1 if before is not None and before[0] == current else 0
    delay = min(RETRY_SECONDS * 2**count, MAX_RETRY_SECONDS)
    state.refused[key] = (current, count, time.monotonic() + delay)
    return delay


def left_alone(state: OperatorState, key: tuple[str, str], body: kopf.Body) -> str | None:
    """Why a re-apply outside the pipeline's handlers (the resync, a repair) leaves it alone, or None:
    the copy is older than what a handler reconciled meanwhile, or the API server refused this spec's
    objects and it is tried again after its back-off (refusal_backoff)."""
    last = state.owners.get(key)
    if superseded(last, body):
        generation = body.metadata.get("generation")
        return events.SKIP_SUPERSEDED.format(generation=generation, last=last[1] if last else None)
    refused = state.refused.get(key)
    now = time.monotonic()
    if refused is not None and refused[0] == essence(body)[0] and now < refused[2]:
        return events.SKIP_BACKING_OFF.format(seconds=refused[2] - now)
    return None


def superseded(last: tuple[str | None, int | None] | None, body: kopf.Body) -> bool:
    """Whether `body` is an older copy of the pipeline than the one reconciled last (`last`: its uid and
    generation): a resync lists the pipelines, then reconciles them one after another."""
    if last is None or last[0] != body.metadata.uid:
        return False
    generation = body.metadata.get("generation")
    return last[1] is not None and generation is not None and int(generation) < int(last[1])


async def _refuse(
    state: OperatorState, body: kopf.Body, logger: kopf.Logger, event: str | None, exc: SpecError
) -> None:
    """Report an invalid spec (or one whose author may not reach what it asks for) and change nothing:
    the Deployment of the last good spec keeps serving. Raises kopf.PermanentError."""
    kube: Kube = state.kube
    generation = body.metadata.get("generation")
    name, namespace = body.metadata.name, namespace_of(body)
    message = one_line(exc)
    indexed = state.children.get("Deployment", namespace, name)
    deployed = (
        indexed.body
        if indexed
        else await asyncio.to_thread(kube.get, "apps/v1", "Deployment", namespace, name)
    )
    kept = events.INVALID_KEPT if deployed is not None else events.INVALID_NOTHING
    events.RECONCILE_INVALID.log(logger, generation=generation, error=first_error(exc), kept=kept)
    events.RECONCILE_PROBLEMS.log(logger, generation=generation, problems=message)
    before = previous_condition(state, namespace, name, body, "SpecValid") or {}
    invalid = st.condition("SpecValid", False, "InvalidSpec", message, generation)
    await write_status(
        state,
        namespace,
        name,
        {
            "observedGeneration": generation,
            "conditions": [
                invalid,
                st.condition("Ready", False, "InvalidSpec", "the spec is invalid; see SpecValid", generation),
            ],
        },
        body.get("status") or {},
    )
    # compared as stored: a long list of problems is cut there (st.fit)
    if event or (before.get("reason"), before.get("message")) != ("InvalidSpec", invalid["message"]):
        await warn(kube, body, "InvalidSpec", message)  # a user's change or a new problem, not a resync
    raise kopf.PermanentError(message) from None


async def _reconcile(body: kopf.Body, state: OperatorState, logger: kopf.Logger, event: str | None) -> str:
    kube: Kube = state.kube
    config: Settings = state.settings
    generation = body.metadata.get("generation")
    name, namespace = body.metadata.name, namespace_of(body)
    state.owners[(namespace, name)] = (body.metadata.uid, generation)
    try:
        tp, artifacts, children, newer = await compiled(state, body)
    except SpecError as exc:
        await _refuse(state, body, logger, event, exc)
    since = time.time()
    try:
        owner = owner_reference(dict(body))
        gateway = await lookup_gateway(kube, tp, config) if rt.needs_gateway_lookup(tp) else None
        if gateway is not None and gateway.implementation is not None:
            children = replace(children, routing=rt.routing_children(tp, config, gateway.implementation))
        children, engine = await choose_engine(state, body, tp, children)  # `auto`: KEDA where served
        try:  # what it reaches, its author may reach, or an admin list allows (reconcile/authors.py)
            await authors.check(state, body, tp, children)
        except SpecError as exc:
            await _refuse(state, body, logger, event, exc)
        if not access.generates_secret(tp):
            state.secrets.discard((namespace, name))
        elif (namespace, name) not in state.secrets:  # once a process: a pod event says when it is gone
            await ensure_admin_secret(kube, tp, config, owner, logger)
            state.secrets.add((namespace, name))
        pinned = await pin(state, tp, children, body, logger)  # an operator upgrade restarts no pod
        seen, sent = state.applied.get((namespace, name), {}), state.sent.get((namespace, name), {})
        pipeline = Pipeline(
            name,
            body.metadata.uid,
            namespace,
            seen,
            sent,
            state.children,
            event == "Created",
            config.field_manager,
        )
        claims = Claims(pipeline, pinned.children)
        applied = await apply_children(kube, tp, claims, owner, logger)
        new = event == "Created"  # a new pipeline has nothing to prune
        replaced = [] if new else await prune_replaced_hpa(state, kube, tp, claims, pinned.live)
        optional, conditions = await apply_optional(
            kube, tp, claims, owner, generation, state.discovery, engine, gateway, config.use_keda
        )
        applied += optional
        stale = replaced
        if not new:
            keep, listed, live = pinned.keep_configmaps, pinned.live_configmaps, pinned.live
            stale += await prune(state, kube, tp, claims, keep, listed, live, frozenset(replaced))
        state.optional[(namespace, name)] = rendered_optional(tp, children)
        if engine.engine is None:
            state.engines.pop((namespace, name), None)
        else:
            state.engines[(namespace, name)] = engine.engine
        state.taken[(namespace, name)] = dict(claims.taken)
        state.sent[(namespace, name)] = dict(claims.sent)
    except KubeError as exc:
        if namespace_terminating(exc):
            # deleting the namespace deletes the pipeline and its children: nothing to restore
            events.NAMESPACE_DELETING.log(logger, namespace=namespace, generation=generation)
            return "unchanged"
        delay = RETRY_SECONDS
        if not is_transient(exc):  # the apiserver's answer, the same until something changes: say it
            delay = refusal_backoff(state, body)
            await _report_refused(state, body, generation, exc)
        events.RECONCILE_ERROR.log(logger, generation=generation, error=exc, retry=delay)
        raise kopf.TemporaryError(f"apply failed: {exc}", delay=delay) from exc
    state.refused.pop((namespace, name), None)
    deployment = next((o for o in applied if o.get("kind") == "Deployment"), None)
    if pinned.rolled and deployment is not None:
        rolled(state, (namespace, name), deployment)
    summary = artifacts.graph
    routers = [r["name"] for r in summary["routers"]]
    events.RECONCILE_DETAILS.log(
        logger,
        objects=len(applied),
        configmaps=len(children.configmaps),
        digest=artifacts.digest[:12],
        routers=", ".join(routers) or "none",
        pruned=stale or "nothing",
        autoscaling=autoscaling.describe(tp, engine.engine),
    )
    configured = st.condition(
        "ModelsConfigured",
        True,
        "RepositoryGenerated",
        f"{artifacts.files} generated files in {len(children.configmaps)} ConfigMap(s); "
        f"{len(routers)} router(s) inserted",
        generation,
    )
    valid = _spec_valid(generation)
    affinity = _affinity_condition(tp, generation)
    conditions = [*conditions, _owned_condition(name, claims, generation)]
    claim = storage.claim_name(tp)
    if claim is not None:
        live_claim = await read_claim(state, namespace, name, claim, fresh=event is not None)
        source = storage.model_source_condition(tp, live_claim, generation)
        conditions = [*conditions, *([source] if source else [])]
    warnings = [
        c for c in [*conditions, affinity] if c["status"] == "False" or c["reason"] == rt.PROVIDER_DEPRECATED
    ]
    # warn on a user's change, or when a problem is new (not on every resync)
    warnings = [
        c
        for c in warnings
        if event
        or (previous_condition(state, namespace, name, body, c["type"]) or {}).get("reason") != c["reason"]
    ]
    if pinned.condition["status"] == "False" and (
        (previous_condition(state, namespace, name, body, pinning.UP_TO_DATE) or {}).get("reason")
        != pinned.condition["reason"]
    ):
        events.NOT_UP_TO_DATE.log(
            logger,
            condition=pinning.UP_TO_DATE,
            reason=pinned.condition["reason"],
            message=pinned.condition["message"],
        )
    schema = schema_current(state, body, logger, newer, generation)
    extra = [valid, configured, *conditions, affinity, pinned.condition, schema]
    if deployment is None:  # another's Deployment (or ConfigMap) has the name: nothing of ours serves
        why = ", ".join(ownership.shown(ref) for ref in claims.taken)
        message = ownership.NOT_SERVING.format(what=f"{why} is not this pipeline's (see {ownership.OWNED})")
        not_ready = st.condition("Ready", False, ownership.NAME_TAKEN, message, generation)
        replicas: dict[str, Any] = {"conditions": [*extra, not_ready]}
    else:
        replicas = await pod_status(state, logger, deployment, generation, extra, indexed=True)
    await write_status(
        state,
        namespace,
        name,
        {
            "observedGeneration": generation,
            "endpoint": endpoint(tp),
            "graph": st.graph_status(summary),
            **replicas,
        },
        body.get("status") or {},
    )
    created, updated, state.applied[(namespace, name)] = changes(
        applied, config.field_manager, since, state.applied.get((namespace, name)), claims.kept
    )
    outcome, line = _outcome(len(applied), created, updated, stale, deployment or {})
    events.RECONCILE_DONE.log(logger, outcome=outcome, generation=generation, summary=line)
    for c in warnings:
        events.CONDITION_WARNING.log(
            logger, type=c["type"], status=c["status"], reason=c["reason"], message=c["message"]
        )
        await warn(kube, body, c["reason"], c["message"])
    if event:
        kopf.info(
            body,
            reason=event,
            message=f"applied repository {artifacts.digest[:12]}, "
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


CLAIM_RECHECK_SECONDS = 300  # how long a resync reuses the model claim it read (ModelSource)


async def read_claim(
    state: OperatorState, namespace: str, pipeline: str, claim: str, fresh: bool
) -> dict[str, Any] | None:
    """The pipeline's model claim (None: none of that name): read on a user's change (`fresh`), and by a
    resync once CLAIM_RECHECK_SECONDS have passed; the pods' own events say sooner when it cannot mount."""
    key, now = (namespace, pipeline), time.monotonic()
    cached = state.claims.get(key)
    if fresh or cached is None or cached[0] != claim or now - cached[1] > CLAIM_RECHECK_SECONDS:
        live = await asyncio.to_thread(state.kube.get, "v1", "PersistentVolumeClaim", namespace, claim)
        state.claims[key] = cached = (claim, now, live)
    return cached[2]


def _owned_condition(name: str, claims: Claims, generation: int | None) -> dict[str, Any]:
    """ObjectsOwned: every object of the pipeline is its own, or which another holds and what was left
    out because of it."""
    if not claims.taken:
        return st.condition(
            ownership.OWNED, True, ownership.ALL_OWNED, ownership.ALL_OWNED_MESSAGE, generation
        )
    message = ownership.taken_message(name, claims.taken, claims.skipped)
    return st.condition(ownership.OWNED, False, ownership.NAME_TAKEN, message, generation)


def _spec_valid(generation: int | None) -> dict[str, Any]:
    return st.condition("SpecValid", True, "Valid", "the spec compiles", generation)


# an apply the apiserver refused (an admission policy or webhook, a quota, a field it does not know)
APPLY_REFUSED = "ApplyRefused"
APPLY_REFUSED_MESSAGE = (
    "the apiserver refused {error}; the objects applied before stay as they are, and the operator "
    "tries again after 10 s, doubling the wait while the same spec is refused (at most 10 minutes), and at "
    "once when the spec changes"
)
NOTHING_APPLIED_MESSAGE = "nothing serves yet: the apiserver refused the pipeline's objects (see UpToDate)"


async def _report_refused(
    state: OperatorState, body: kopf.Body, generation: int | None, exc: KubeError
) -> None:
    """UpToDate=False with the apiserver's words (and Ready=False while nothing was ever applied), and a
    Warning event when the refusal is new. The spec itself compiled."""
    name, namespace = body.metadata.name, namespace_of(body)
    message = APPLY_REFUSED_MESSAGE.format(error=f"{exc.message} (HTTP {exc.status})")
    before = previous_condition(state, namespace, name, body, pinning.UP_TO_DATE) or {}
    conditions = [
        _spec_valid(generation),
        st.condition(pinning.UP_TO_DATE, False, APPLY_REFUSED, message, generation),
    ]
    ready = previous_condition(state, namespace, name, body, "Ready")
    if ready is None or ready.get("reason") == APPLY_REFUSED:
        conditions.append(st.condition("Ready", False, APPLY_REFUSED, NOTHING_APPLIED_MESSAGE, generation))
    new = {"observedGeneration": generation, "conditions": conditions}
    with contextlib.suppress(KubeError):  # the status write may fail too: the log line has it all
        await write_status(state, namespace, name, new, body.get("status") or {})
    if before.get("message") != conditions[1]["message"]:
        await warn(state.kube, body, APPLY_REFUSED, message)


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
