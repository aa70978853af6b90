"""Status conditions in the cert-manager style (pure functions over plain dicts)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..spec import NEWER_FIELDS, newer_fields

CONDITION_TYPES = (
    "SpecValid",
    "SchemaCurrent",
    "ModelsConfigured",
    "ModelSource",
    "RoutingConfigured",
    "AutoscalingConfigured",
    "SessionAffinity",
    "Progressing",
    "Ready",
)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


# the longest free text the operator writes into status (a condition's message, the router choice's
# reason): readable in `kubectl describe`, and far below the CRD's bound (render/status_schema.py), which a
# later release's longer text must not exceed either
MAX_MESSAGE = 1024
TRUNCATED = " … [{more} more characters]"


def fit(text: str, most: int = MAX_MESSAGE) -> str:
    """`text` as the operator writes it into status: cut to at most `most` characters, a cut one ending
    with TRUNCATED (a spec error lists every problem, a scheduler's or the API server's words are quoted,
    an image reference has no length limit), so the API server never refuses the status for its size."""
    if len(text) <= most:
        return text
    cut = most - len(TRUNCATED.format(more=len(text)))  # the marker of the largest count: it fits
    return text[:cut] + TRUNCATED.format(more=len(text) - cut)


def condition(ctype: str, ok: bool, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": fit(message),
        "observedGeneration": generation,
    }


class Condition(NamedTuple):
    """A condition as a step of the reconcile finds it (the apply, the pin, a renderer's rule): its type,
    whether it holds, its reason and message. The report writes it into the status (`condition`, with the
    generation it is of: `stamped`)."""

    type: str
    ok: bool
    reason: str
    message: str


# a reason that warns although its condition holds: RoutingConfigured with a deprecated provider
PROVIDER_DEPRECATED = "ProviderDeprecated"


@dataclass
class Conditions:
    """The conditions a reconcile reports, in the order the status lists them (`listed`), and those it
    warns about when they say a problem (`watched`: status False, or PROVIDER_DEPRECATED): on a user's
    change (`changed`), or when the problem is new (its reason other than the status had: `before`), not
    on every resync."""

    listed: list[dict[str, Any]]
    watched: list[dict[str, Any]]
    before: list[dict[str, Any]]
    changed: bool

    def new(self, condition: dict[str, Any]) -> bool:
        """Whether `condition`'s reason is not the one the status had for its type."""
        had = next((c for c in self.before if c.get("type") == condition["type"]), None) or {}
        return had.get("reason") != condition["reason"]

    def warnings(self) -> list[dict[str, Any]]:
        problems = [c for c in self.watched if c["status"] == "False" or c["reason"] == PROVIDER_DEPRECATED]
        return [c for c in problems if self.changed or self.new(c)]


def stamped(found: Iterable[Condition], generation: int | None) -> list[dict[str, Any]]:
    """The conditions `found`, as the status lists them, of `generation`, in their order."""
    return [condition(*c, generation) for c in found]


def graph_status(summary: dict[str, Any]) -> dict[str, Any]:
    """status.graph: the compiler's summary (Artifacts.graph_summary), the router choice's reason fitted
    (it quotes spec.server.image), and each branch's condition (it quotes the spec's values)."""
    fitted = dict(summary)
    choice = summary.get("routerBackend")
    if choice is not None:
        fitted["routerBackend"] = {**choice, "reason": fit(str(choice.get("reason", "")))}
    if summary.get("conditions"):
        fitted["conditions"] = [
            {**c, "branches": [{**b, "condition": fit(b["condition"])} for b in c["branches"]]}
            for c in summary["conditions"]
        ]
    return fitted


# the spec holds fields of a newer CRD than the operator's (spec/parse.py `parse_pipeline`'s `newer`)
SCHEMA_CURRENT = "SchemaCurrent"
ALL_FIELDS_KNOWN = "AllFieldsKnown"
ALL_FIELDS_KNOWN_MESSAGE = "every field of the spec is one this operator knows"
FIELDS_FROM_NEWER_SCHEMA = "FieldsFromNewerSchema"


def schema_condition(newer: list[str], generation: int | None) -> dict[str, Any]:
    """SchemaCurrent: True, or False naming the fields of a newer CRD that this operator ignores."""
    if not newer:
        return condition(SCHEMA_CURRENT, True, ALL_FIELDS_KNOWN, ALL_FIELDS_KNOWN_MESSAGE, generation)
    message = f"{newer_fields(newer)}: {NEWER_FIELDS}"
    return condition(SCHEMA_CURRENT, False, FIELDS_FROM_NEWER_SCHEMA, message, generation)


# the most conditions status holds (the CRD's maxItems): the operator writes 11 types (CONDITION_TYPES,
# UpToDate, ObjectsOwned); the rest is room for the types of a newer release, which an older operator keeps
MAX_CONDITIONS = 32


def merge_conditions(
    old: list[dict[str, Any]] | None, new: list[dict[str, Any]], timestamp: str | None = None
) -> list[dict[str, Any]]:
    """Replace conditions by type; lastTransitionTime is kept unless the status flips. At most
    MAX_CONDITIONS: the types only `old` has (another writer's) make room for `new`'s."""
    by_type = {c.get("type"): c for c in (old or [])}
    ts = timestamp or now()
    for c in new:
        prev = by_type.get(c["type"])
        since = ts
        if prev is not None and prev.get("status") == c["status"] and prev.get("lastTransitionTime"):
            since = prev["lastTransitionTime"]
        by_type[c["type"]] = {**c, "lastTransitionTime": since}
    written = {c["type"] for c in new}
    room = MAX_CONDITIONS - len(written)
    for ctype in [t for t in by_type if t not in written][max(room, 0) :]:
        del by_type[ctype]
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    return sorted(by_type.values(), key=lambda c: (order.get(str(c.get("type")), 99), str(c.get("type"))))


STALLED_HINT = (
    "for GPU pods this usually means no node has a free GPU for the new pod: free one, or let the rollout "
    "replace pods in place (spec.server.rollout: ReplaceInPlace)"
)
# Progressing while a rollout's new pod has no room, or a drain waits for the only ready pod's replacement
NO_ROOM, DRAIN_WAITING, REPLACING_DRAINED = "NoRoomForNewPod", "DrainWaiting", "ReplacingDrainedPod"
ROOM_HINT = (
    "make room for one more pod (free a GPU, add a node), or set spec.server.rollout: ReplaceInPlace to "
    "replace pods in place (no extra pod, but with one replica nothing serves while the new pod loads)"
)
NO_ROOM_MESSAGE = (
    "rollout waiting ({updated}/{desired} updated, {ready} ready): pod {pod} cannot be scheduled: {why}; "
    "{serving}" + ROOM_HINT
)
STILL_SERVING = "the {ready} ready pod(s) keep serving meanwhile; "
DRAINED_MESSAGE = (
    "node {node} is being drained (cordoned) and holds pod {pod}, the only ready replica: the "
    "PodDisruptionBudget keeps the drain from evicting it until a new pod is ready on another node"
)
DRAIN_WAITING_MESSAGE = (
    DRAINED_MESSAGE + "; pod {new} cannot be scheduled: {why}; make room for one more pod (free a GPU, add a "
    "node), or set spec.server.rollout: ReplaceInPlace (the drain then evicts the pod, and nothing serves "
    "while its replacement loads)"
)
REPLACING_MESSAGE = (
    DRAINED_MESSAGE
    + "; the operator restarted the pods for that ({updated}/{desired} updated, {ready} ready), "
    "and the drain completes once the new pod is ready"
)


# a container waiting for one of these will not start by itself: its reason and message go to Ready
STUCK_WAITING = (
    "CrashLoopBackOff",
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
)
INIT_FAILED = "InitContainerFailed"
# the Deployment's ReplicaSet could not create pods: admission refused them (Pod Security, a quota, a policy
# webhook) or their spec is invalid; no pod exists to tell why, only the Deployment's ReplicaFailure condition
PODS_REFUSED = "PodsRefused"


def _terminated_failure(status: dict[str, Any]) -> dict[str, Any] | None:
    """The container's current or last termination when it failed (non-zero exit), else None."""
    for key in ("state", "lastState"):
        term = (status.get(key) or {}).get("terminated")
        if term and term.get("exitCode", 0) != 0:
            return term
    return None


def _termination_text(term: dict[str, Any]) -> str:
    """The container's own last words (its termination message: the log tail on error) or its exit."""
    lines = [ln for ln in str(term.get("message") or "").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else f"exit code {term.get('exitCode')} ({term.get('reason', 'Error')})"


def pod_problem(pods: list[dict[str, Any]]) -> tuple[str, str] | None:
    """Why a pipeline's pods do not become ready, from the pods' own status, as (reason, message): a
    failed init container (the repository assembly: a missing model directory, an unreachable bucket),
    a container stuck waiting (image pull, crash loop, bad config) or a pod that cannot be scheduled.
    None when no pod shows such a problem (they are starting)."""
    for pod in pods:
        name = pod.get("metadata", {}).get("name", "?")
        status = pod.get("status") or {}
        for c in status.get("initContainerStatuses") or []:
            term = _terminated_failure(c)
            if term is not None:  # also while it retries: the last failure is the news
                return (
                    INIT_FAILED,
                    f"pod {name}: init container {c.get('name')} failed: {_termination_text(term)}",
                )
        for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            waiting = (c.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_WAITING:
                detail = waiting.get("message") or ""
                term = _terminated_failure(c)
                if term is not None:
                    detail = f"{detail}; last exit: {_termination_text(term)}".lstrip("; ")
                return waiting[
                    "reason"
                ], f"pod {name}: container {c.get('name')}: {detail or waiting['reason']}"
        pending = unschedulable([pod])
        if pending is not None:
            return "Unschedulable", f"pod {name} cannot be scheduled: {pending[1]}"
    return None


def unschedulable(pods: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(name, the scheduler's message) of the first pod the scheduler found no node for, e.g. `0/3 nodes are
    available: 3 Insufficient nvidia.com/gpu.`; None when there is none."""
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return pod.get("metadata", {}).get("name", "?"), str(cond.get("message", ""))
    return None


def ready_condition(
    replicas: int,
    ready: int,
    updated: int,
    desired: int,
    generation: int | None,
    stalled: str | None = None,
    problem: tuple[str, str] | None = None,
    pending: tuple[str, str] | None = None,
    drained: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Progressing and Ready from the Deployment's numbers; `stalled` is the Deployment's message when
    its rollout passed progressDeadlineSeconds (Progressing=False, ProgressDeadlineExceeded); `problem`
    (pod_problem) names why pods are not ready in Ready's reason and message; `pending` (unschedulable)
    is a pod without room, which stops a rollout (Progressing=False); `drained` is (pod, node), the only
    ready pod on a node being drained, which the rollout replaces."""
    rolling = updated < desired or replicas > desired
    progressing = condition(
        "Progressing",
        rolling or ready < desired,
        "RollingOut" if rolling else ("Starting" if ready < desired else "Complete"),
        f"{updated}/{desired} replicas updated, {ready} ready",
        generation,
    )
    counts = {"updated": updated, "desired": desired, "ready": ready}
    if rolling and pending is not None and drained is not None:
        message = DRAIN_WAITING_MESSAGE.format(
            pod=drained[0], node=drained[1], new=pending[0], why=pending[1]
        )
        progressing = condition("Progressing", False, DRAIN_WAITING, message, generation)
    elif rolling and pending is not None:
        serving = STILL_SERVING.format(ready=ready) if ready else ""
        message = NO_ROOM_MESSAGE.format(pod=pending[0], why=pending[1], serving=serving, **counts)
        progressing = condition("Progressing", False, NO_ROOM, message, generation)
    elif drained is not None:
        message = REPLACING_MESSAGE.format(pod=drained[0], node=drained[1], **counts)
        progressing = condition("Progressing", True, REPLACING_DRAINED, message, generation)
    elif stalled is not None:
        message = f"rollout stalled ({updated}/{desired} updated, {ready} ready): {stalled}; {STALLED_HINT}"
        progressing = condition("Progressing", False, "RolloutStalled", message, generation)
    ok = desired > 0 and ready >= desired and not rolling
    message = f"{ready}/{desired} Triton replicas ready"
    if problem is not None and not ok and desired > 0:
        return [progressing, condition("Ready", False, problem[0], f"{message}; {problem[1]}", generation)]
    ready_c = condition(
        "Ready",
        ok,
        "AllReplicasReady" if ok else ("ScaledToZero" if desired == 0 else "ReplicasNotReady"),
        message,
        generation,
    )
    return [progressing, ready_c]


def status_changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """True when writing `new` would change anything (lastTransitionTime aside, it is derived)."""
    old = old or {}
    for key, value in new.items():
        if key == "conditions":
            strip = lambda cs: [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in cs or []]  # noqa: E731
            if strip(old.get("conditions")) != strip(value):
                return True
        elif old.get(key) != value:
            return True
    return False


def creation_problem(deployment_status: dict[str, Any]) -> tuple[str, str] | None:
    """(PODS_REFUSED, the API server's refusal) when the Deployment reports ReplicaFailure: its pods are not
    created at all, e.g. `pods "vision-..." is forbidden: violates PodSecurity "restricted:latest": ...`."""
    for c in deployment_status.get("conditions") or []:
        if c.get("type") == "ReplicaFailure" and c.get("status") == "True":
            why = str(c.get("message") or c.get("reason") or "the ReplicaSet cannot create pods")
            return PODS_REFUSED, f"pods cannot be created: {why}"
    return None


def stalled_message(deployment_status: dict[str, Any]) -> str | None:
    """The Deployment's own message when its rollout exceeded progressDeadlineSeconds, else None."""
    for c in deployment_status.get("conditions") or []:
        if c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded":
            return str(c.get("message") or "progress deadline exceeded")
    return None
