"""Status conditions in the cert-manager style (pure functions over plain dicts)."""

from __future__ import annotations

import datetime as dt
from typing import Any

CONDITION_TYPES = (
    "SpecValid",
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


def condition(ctype: str, ok: bool, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message[:1024],
        "observedGeneration": generation,
    }


def merge_conditions(
    old: list[dict[str, Any]] | None, new: list[dict[str, Any]], timestamp: str | None = None
) -> list[dict[str, Any]]:
    """Replace conditions by type; lastTransitionTime is kept unless the status flips."""
    by_type = {c.get("type"): c for c in (old or [])}
    ts = timestamp or now()
    for c in new:
        prev = by_type.get(c["type"])
        since = ts
        if prev is not None and prev.get("status") == c["status"] and prev.get("lastTransitionTime"):
            since = prev["lastTransitionTime"]
        by_type[c["type"]] = {**c, "lastTransitionTime": since}
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    return sorted(by_type.values(), key=lambda c: (order.get(str(c.get("type")), 99), str(c.get("type"))))


STALLED_HINT = (
    "for GPU pods this usually means no node has a free GPU for the new pod: free one, or let the rollout "
    "replace pods in place (spec.server.strategy rollingUpdate maxSurge 0, maxUnavailable 1)"
)


def ready_condition(
    replicas: int,
    ready: int,
    updated: int,
    desired: int,
    generation: int | None,
    stalled: str | None = None,
) -> list[dict[str, Any]]:
    """Progressing and Ready from the Deployment's numbers; `stalled` is the Deployment's message when
    its rollout passed progressDeadlineSeconds (Progressing=False, ProgressDeadlineExceeded)."""
    rolling = updated < desired or replicas > desired
    progressing = condition(
        "Progressing",
        rolling or ready < desired,
        "RollingOut" if rolling else ("Starting" if ready < desired else "Complete"),
        f"{updated}/{desired} replicas updated, {ready} ready",
        generation,
    )
    if stalled is not None:
        message = f"rollout stalled ({updated}/{desired} updated, {ready} ready): {stalled}; {STALLED_HINT}"
        progressing = condition("Progressing", False, "RolloutStalled", message, generation)
    ok = desired > 0 and ready >= desired and not rolling
    ready_c = condition(
        "Ready",
        ok,
        "AllReplicasReady" if ok else ("ScaledToZero" if desired == 0 else "ReplicasNotReady"),
        f"{ready}/{desired} Triton replicas ready",
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


def stalled_message(deployment_status: dict[str, Any]) -> str | None:
    """The Deployment's own message when its rollout exceeded progressDeadlineSeconds, else None."""
    for c in deployment_status.get("conditions") or []:
        if c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded":
            return str(c.get("message") or "progress deadline exceeded")
    return None
