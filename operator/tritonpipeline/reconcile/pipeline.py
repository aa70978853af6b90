"""One reconcile of a TritonPipeline (a Turn), in steps: compile (parse, compile, render: `compiled`;
what the cluster serves: `_plan`), apply (server-side apply and prune: `_apply`, apply.py), report
(status and events: `_report`, its conditions gathered in a Conditions, status_writer.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, NoReturn, cast

import kopf

from ..errors import SpecError
from ..kube.api_client import KubeError, is_transient, namespace_terminating
from ..render import access, autoscaling_objects, ownership, pinning, storage
from ..render import conditions as st
from ..render import routing_objects as rt
from ..render.manifests import Children, endpoint, owner_reference
from ..runtime import compiling, metrics
from ..runtime import log_events as events
from ..runtime.compiling import Compiled, CompileStopped, Generated, compile_cr
from ..runtime.state import Key, OperatorState, PipelineMemory, Seen
from ..spec import TritonPipeline, parse_pipeline
from . import authors
from .apply import (
    apply_children,
    apply_optional,
    changes,
    ensure_admin_secret,
    prune,
    rendered_optional,
)
from .claim import Claims, Pipeline
from .engine import choose_engine
from .gateway import GatewayLookup
from .gateway import lookup as lookup_gateway
from .refs import namespace_of
from .status_writer import PipelineStatus, pod_status, schema_current, warn
from .upgrade import Pinned, pin, rolled


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
    resync of an unchanged pipeline compiles nothing). The access review at admission compiles in a
    worker of its own and keeps only the items it reaches (runtime/compiling.reach_items), so a
    pipeline's first reconcile compiles it again. Raises the compile's SpecError (remembered alike)."""
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
    return await asyncio.to_thread(parse_pipeline, dict(body), newer=[])  # its schema: refused or not


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
    async with state.reconciling.hold(key):
        why = None if event is not None else left_alone(state, key, body)
        if why is not None:
            events.REAPPLY_SKIPPED.log(logger, why=why)
            return
        started = time.monotonic()
        status = PipelineStatus(state, *key, body)
        generation = body.metadata.get("generation")
        turn = Turn(state, body, logger, event, key, state.memory(key), generation, status)
        try:
            async with state.admitted.of(key[0]):
                try:
                    outcome = await _reconcile(turn)
                except SpecError as exc:  # the spec, or what its author may not reach: nothing applied
                    await _refuse(turn, exc)
        except kopf.PermanentError:
            outcome = "invalid"
            raise
        except KubeError as exc:  # a call outside the apply (a read, the status): said and retried alike
            events.RECONCILE_ERROR.log(logger, generation=turn.generation, error=exc, retry=RETRY_SECONDS)
            raise kopf.TemporaryError(f"reconcile failed: {exc}", delay=RETRY_SECONDS) from exc
        finally:
            metrics.RECONCILES.labels(outcome).inc()
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)


@dataclass
class Turn:
    """One reconcile of one pipeline, what each of its steps reads: the operator's state, the handler's
    body, logger and event (Created, Updated, Resumed; None for a re-apply outside the handlers), and
    the pipeline's key, memory, generation and status."""

    state: OperatorState
    body: kopf.Body
    logger: kopf.Logger
    event: str | None
    key: Key
    memory: PipelineMemory
    generation: int | None
    status: PipelineStatus


RETRY_SECONDS = 10  # a failed apply is tried again after this long (kopf's retry)
MAX_RETRY_SECONDS = 600  # the longest back-off of an apply the API server keeps refusing


def refusal_backoff(memory: PipelineMemory, spec: str) -> int:
    """The seconds until the apply of this spec (`spec`: its essence) is tried again after the API server
    refused it: 10, then doubled at each refusal of the same spec, up to MAX_RETRY_SECONDS (a spec change
    starts over). The resync leaves the pipeline alone until then."""
    before = memory.refused
    count = before[1] + 1 if before is not None and before[0] == spec else 0
    delay = min(RETRY_SECONDS * 2**count, MAX_RETRY_SECONDS)
    memory.refused = (spec, count, time.monotonic() + delay)
    return delay


def left_alone(state: OperatorState, key: Key, body: kopf.Body) -> str | None:
    """Why a re-apply outside the pipeline's handlers (the resync, a repair) leaves it alone, or None:
    the copy is older than what a handler reconciled meanwhile, or the API server refused this spec's
    objects and it is tried again after its back-off (refusal_backoff)."""
    memory = state.pipelines.get(key)
    if memory is None:
        return None
    last = memory.owner
    if superseded(last, body):
        generation = body.metadata.get("generation")
        return events.SKIP_SUPERSEDED.format(generation=generation, last=last[1] if last else None)
    refused = memory.refused
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


async def _refuse(turn: Turn, exc: SpecError) -> NoReturn:
    """Report an invalid spec (or one whose author may not reach what it asks for) and change nothing:
    the Deployment of the last good spec keeps serving. Raises kopf.PermanentError."""
    state, (namespace, name), generation = turn.state, turn.key, turn.generation
    message = one_line(exc)
    indexed = state.children.get("Deployment", namespace, name)
    deployed = (
        indexed.body
        if indexed
        else await asyncio.to_thread(state.kube.get, "apps/v1", "Deployment", namespace, name)
    )
    kept = events.INVALID_KEPT if deployed is not None else events.INVALID_NOTHING
    events.RECONCILE_INVALID.log(turn.logger, generation=generation, error=first_error(exc), kept=kept)
    events.RECONCILE_PROBLEMS.log(turn.logger, generation=generation, problems=message)
    before = turn.status.previous("SpecValid") or {}
    invalid = st.condition("SpecValid", False, "InvalidSpec", message, generation)
    not_ready = st.condition("Ready", False, "InvalidSpec", "the spec is invalid; see SpecValid", generation)
    await turn.status.write({"observedGeneration": generation, "conditions": [invalid, not_ready]})
    # compared as stored: a long list of problems is cut there (st.fit)
    if turn.event or (before.get("reason"), before.get("message")) != ("InvalidSpec", invalid["message"]):
        await warn(state.kube, turn.body, "InvalidSpec", message)  # a user's change or a new problem
    raise kopf.PermanentError(message) from None


async def _reconcile(turn: Turn) -> str:
    """Compile, apply, report: the outcome (see _outcome). Raises SpecError where the spec does not
    compile, or its author may not reach what it asks for (reconcile refuses it: _refuse)."""
    turn.memory.owner = (turn.body.metadata.uid, turn.generation)
    tp, artifacts, children, newer = await compiled(turn.state, turn.body)
    since = time.time()
    try:
        plan = await _plan(turn, tp, children)
        done = await _apply(turn, plan, since)
    except KubeError as exc:
        return await _apply_failed(turn, exc)
    turn.memory.refused = None
    return await _report(turn, Reconciled(plan, artifacts, newer, done))


@dataclass
class Plan:
    """What a reconcile applies: the compiled children, with the routing of the Gateway found and the
    autoscaler of the engine chosen."""

    tp: TritonPipeline
    children: Children
    engine: autoscaling_objects.EngineChoice
    gateway: GatewayLookup | None


@dataclass
class Applied:
    """What a reconcile's apply did: the objects as applied, those pruned, whose names another holds
    (`claims`), what it pinned, what it found of the optional children (RoutingConfigured,
    AutoscalingConfigured), and what it changed (apply.changes: `created`, `updated`, and `seen`, what the
    next reconcile compares with once the status is written)."""

    objects: list[dict[str, Any]]
    pruned: list[str]
    claims: Claims
    pinned: Pinned
    conditions: list[st.Condition]
    created: list[str]
    updated: list[str]
    seen: Seen

    @property
    def deployment(self) -> dict[str, Any] | None:
        """The Deployment applied: None when another's object holds its name (nothing of ours serves)."""
        return next((o for o in self.objects if o.get("kind") == "Deployment"), None)


@dataclass
class Reconciled:
    """A reconcile's steps, for its report: the plan, what was generated, the fields of a newer CRD the
    parse left out, and what the apply did."""

    plan: Plan
    artifacts: Generated
    newer: list[str]
    applied: Applied


async def _plan(turn: Turn, tp: TritonPipeline, children: Children) -> Plan:
    """The compiled children as this cluster serves them: routed by the Gateway's implementation, with the
    autoscaler of the engine chosen (`auto`: KEDA where served). Raises SpecError where what the pipeline
    reaches its author may not reach, nor an admin list allows (reconcile/authors.py)."""
    state = turn.state
    gateway = await lookup_gateway(state.kube, tp, state.settings) if rt.needs_gateway_lookup(tp) else None
    if gateway is not None and gateway.implementation is not None:
        routing = rt.routing_children(tp, state.settings, gateway.implementation)
        children = replace(children, routing=routing)
    children, engine = await choose_engine(state, turn.body, tp, children)
    await authors.check(state, turn.body, tp, children)
    return Plan(tp, children, engine, gateway)


async def _apply(turn: Turn, plan: Plan, since: float) -> Applied:
    """Server-side apply the plan's children (pinned where an operator upgrade would restart pods), prune
    what it no longer renders, remember what was applied and sent, and tell what the apply (started at
    `since`, wall clock) created and changed."""
    state, memory, tp, new = turn.state, turn.memory, plan.tp, turn.event == "Created"
    kube, config, owner = state.kube, state.settings, owner_reference(dict(turn.body))
    await _admin_secret(turn, tp, owner)
    pinned = await pin(state, tp, plan.children, turn.body, turn.logger)  # an upgrade restarts no pod
    before = memory.optional  # the optional children rendered before: those a prune may delete
    if before is None:  # not by this process: as the live Deployment records them
        before = ownership.recorded_optional(pinned.live, tp.name)
    uid, seen, manager = turn.body.metadata.uid, memory.applied or {}, config.field_manager
    pipeline = Pipeline(tp.name, uid, turn.key[0], seen, memory.sent, state.children, new, manager, before)
    claims = Claims(pipeline, pinned.children)
    applied = await apply_children(kube, tp, claims, owner, turn.logger)
    optional, conditions, stale = await apply_optional(
        kube, tp, claims, owner, state.discovery, plan.engine, plan.gateway, config.use_keda
    )
    if not new:  # a new pipeline has nothing to prune
        keep, listed = pinned.keep_configmaps, pinned.live_configmaps
        stale += await prune(kube, tp, claims, config.use_keda, keep, listed, frozenset(stale))
    memory.optional = rendered_optional(tp, plan.children)
    memory.engine, memory.taken, memory.sent = plan.engine.engine, dict(claims.taken), dict(claims.sent)
    objects = applied + optional
    created, updated, now = changes(objects, config.field_manager, since, memory.applied, claims.kept)
    done = Applied(objects, stale, claims, pinned, conditions, created, updated, now)
    if pinned.rolled and done.deployment is not None:
        rolled(state, turn.key, done.deployment)
    return done


async def _admin_secret(turn: Turn, tp: TritonPipeline, owner: dict[str, Any]) -> None:
    """The generated admin-key Secret, where the pipeline has one: made or found once a process (a pod
    event says when it is gone: reconcile/resync.py)."""
    if not access.generates_secret(tp):
        turn.memory.secret = False
    elif not turn.memory.secret:
        await ensure_admin_secret(turn.state.kube, tp, turn.state.settings, owner, turn.logger)
        turn.memory.secret = True


async def _apply_failed(turn: Turn, exc: KubeError) -> str:
    """An apply the API server did not take: nothing to restore in a namespace being deleted; else tried
    again, after RETRY_SECONDS where no answer came, after the refusal's back-off where one did (its
    words reported: _report_refused). Raises kopf.TemporaryError but in a namespace being deleted."""
    if namespace_terminating(exc):
        # deleting the namespace deletes the pipeline and its children: nothing to restore
        events.NAMESPACE_DELETING.log(turn.logger, namespace=turn.key[0], generation=turn.generation)
        return "unchanged"
    delay = RETRY_SECONDS
    if not is_transient(exc):  # the apiserver's answer, the same until something changes: say it
        delay = refusal_backoff(turn.memory, essence(turn.body)[0])
        await _report_refused(turn, exc)
    events.RECONCILE_ERROR.log(turn.logger, generation=turn.generation, error=exc, retry=delay)
    raise kopf.TemporaryError(f"apply failed: {exc}", delay=delay) from exc


async def _report(turn: Turn, done: Reconciled) -> str:
    """Log what was applied, write the status (its conditions, its pods), warn of what is wrong, and tell
    a user's change what it applied. The outcome (_outcome)."""
    tp, applied, generation = done.plan.tp, done.applied, turn.generation
    outcome, line = _outcome(applied)
    _log_details(turn.logger, done)
    conditions = await _conditions(turn, done)
    warnings = conditions.warnings()  # before the write: what is new is told against the last status
    if applied.deployment is None:  # another's Deployment (or ConfigMap) has the name: nothing of ours serves
        why = ", ".join(ownership.shown(ref) for ref in applied.claims.taken)
        message = ownership.NOT_SERVING.format(what=f"{why} is not this pipeline's (see {ownership.OWNED})")
        not_ready = st.condition("Ready", False, ownership.NAME_TAKEN, message, generation)
        replicas: dict[str, Any] = {"conditions": [*conditions.listed, not_ready]}
    else:
        extra = conditions.listed
        replicas = await pod_status(
            turn.state, turn.logger, applied.deployment, generation, extra, indexed=True
        )
    graph = st.graph_status(done.artifacts.graph)
    await turn.status.write(
        {"observedGeneration": generation, "endpoint": endpoint(tp), "graph": graph, **replicas}
    )
    turn.memory.applied = applied.seen  # what the next reconcile's apply.changes compares with
    events.RECONCILE_DONE.log(turn.logger, outcome=outcome, generation=generation, summary=line)
    for c in warnings:
        events.CONDITION_WARNING.log(
            turn.logger, type=c["type"], status=c["status"], reason=c["reason"], message=c["message"]
        )
        await warn(turn.state.kube, turn.body, c["reason"], c["message"])
    if turn.event:
        routers, digest = len(done.artifacts.graph["routers"]), done.artifacts.digest[:12]
        message = f"applied repository {digest}, {routers} router(s), {len(applied.objects)} objects"
        kopf.info(turn.body, reason=turn.event, message=message)
    return outcome


def _log_details(logger: kopf.Logger, done: Reconciled) -> None:
    """RECONCILE_DETAILS: what was applied, generated and pruned."""
    routers = [r["name"] for r in done.artifacts.graph["routers"]]
    events.RECONCILE_DETAILS.log(
        logger,
        objects=len(done.applied.objects),
        configmaps=len(done.plan.children.configmaps),
        digest=done.artifacts.digest[:12],
        routers=", ".join(routers) or "none",
        pruned=done.applied.pruned or "nothing",
        autoscaling=done.plan.engine.scaling,
    )


async def _conditions(turn: Turn, done: Reconciled) -> st.Conditions:
    """The conditions of a reconcile that applied its children, gathered once: what the compile and the
    apply found, the model claim, the session affinity, the pin (UpToDate: an outdated pipeline is
    logged when that is new) and the schema."""
    tp, applied, generation = done.plan.tp, done.applied, turn.generation
    configmaps, routers = len(done.plan.children.configmaps), len(done.artifacts.graph["routers"])
    generated = f"{done.artifacts.files} generated files in {configmaps} ConfigMap(s); "
    generated += f"{routers} router(s) inserted"
    compiled = [SPEC_VALID, st.Condition("ModelsConfigured", True, "RepositoryGenerated", generated)]
    live_claim = await read_claim(turn, tp)
    source = storage.model_source(tp, live_claim)
    owned = ownership.owned_condition(tp.name, applied.claims.taken, applied.claims.skipped)
    affinity = done.plan.children.routing.affinity  # the spec's alone: rendered with the routing
    found = [*applied.conditions, owned, *([source] if source else []), *([affinity] if affinity else [])]
    before = turn.status.conditions()
    watched = st.stamped(found, generation)
    conditions = st.Conditions(
        [*st.stamped(compiled, generation), *watched], watched, before, bool(turn.event)
    )
    up_to_date = st.condition(*applied.pinned.up_to_date, generation)
    if up_to_date["status"] == "False" and conditions.new(up_to_date):
        events.NOT_UP_TO_DATE.log(
            turn.logger,
            condition=pinning.UP_TO_DATE,
            reason=up_to_date["reason"],
            message=up_to_date["message"],
        )
    schema = schema_current(turn.state, turn.body, turn.logger, done.newer, generation)
    conditions.listed += [up_to_date, schema]
    return conditions


def _outcome(applied: Applied) -> tuple[str, str]:
    """The reconcile's outcome (created, updated, unchanged or waiting) and what it changed, one line."""
    created, updated, pruned, count = applied.created, applied.updated, applied.pruned, len(applied.objects)
    deployment = applied.deployment or {}
    desired = int((deployment.get("spec") or {}).get("replicas", 1))
    ready = int((deployment.get("status") or {}).get("readyReplicas", 0))
    waiting = f"waiting for pods ({ready}/{desired} ready)" if ready < desired else ""
    if created and len(created) == count:
        outcome, what = "created", f"{len(created)} objects ({', '.join(created)})"
    elif created or updated or pruned:
        parts = [
            f"created {', '.join(created)}" if created else "",
            f"updated {', '.join(updated)}" if updated else "",
        ]
        parts.append(f"pruned {', '.join(pruned)}" if pruned else "")
        outcome, what = "updated", "; ".join(p for p in parts if p)
    else:
        outcome, what = ("waiting" if waiting else "unchanged"), f"{count} objects unchanged"
    return outcome, "; ".join(p for p in (what, waiting) if p)


CLAIM_RECHECK_SECONDS = 300  # how long a resync reuses the model claim it read (ModelSource)


async def read_claim(turn: Turn, tp: TritonPipeline) -> dict[str, Any] | None:
    """The pipeline's model claim (None: none of that name, or no pvc:// repository): read on a user's
    change, and by a resync once CLAIM_RECHECK_SECONDS have passed; the pods' own events say sooner when
    it cannot mount."""
    claim = storage.claim_name(tp)
    if claim is None:
        return None
    memory, now = turn.memory, time.monotonic()
    cached = memory.claim
    fresh = turn.event is not None
    if fresh or cached is None or cached[0] != claim or now - cached[1] > CLAIM_RECHECK_SECONDS:
        kube = turn.state.kube
        live = await asyncio.to_thread(kube.get, "v1", "PersistentVolumeClaim", turn.key[0], claim)
        memory.claim = cached = (claim, now, live)
    return cached[2]


SPEC_VALID = st.Condition("SpecValid", True, "Valid", "the spec compiles")


# an apply the apiserver refused (an admission policy or webhook, a quota, a field it does not know)
APPLY_REFUSED = "ApplyRefused"
APPLY_REFUSED_MESSAGE = (
    "the apiserver refused {error}; the objects applied before stay as they are, and the operator "
    "tries again after 10 s, doubling the wait while the same spec is refused (at most 10 minutes), and at "
    "once when the spec changes"
)
NOTHING_APPLIED_MESSAGE = "nothing serves yet: the apiserver refused the pipeline's objects (see UpToDate)"


async def _report_refused(turn: Turn, exc: KubeError) -> None:
    """UpToDate=False with the apiserver's words (and Ready=False while nothing was ever applied), and a
    Warning event when the refusal is new. The spec itself compiled."""
    generation = turn.generation
    message = APPLY_REFUSED_MESSAGE.format(error=f"{exc.message} (HTTP {exc.status})")
    before = turn.status.previous(pinning.UP_TO_DATE) or {}
    conditions = [
        st.condition(*SPEC_VALID, generation),
        st.condition(pinning.UP_TO_DATE, False, APPLY_REFUSED, message, generation),
    ]
    ready = turn.status.previous("Ready")
    if ready is None or ready.get("reason") == APPLY_REFUSED:
        conditions.append(st.condition("Ready", False, APPLY_REFUSED, NOTHING_APPLIED_MESSAGE, generation))
    with contextlib.suppress(KubeError):  # the status write may fail too: the log line has it all
        await turn.status.write({"observedGeneration": generation, "conditions": conditions})
    if before.get("message") != conditions[1]["message"]:
        await warn(turn.state.kube, turn.body, APPLY_REFUSED, message)
