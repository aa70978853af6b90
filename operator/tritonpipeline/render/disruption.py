"""How a pipeline's pods are replaced, on a roll and on a node drain (pure): the Deployment's strategy,
the PodDisruptionBudget, and the surge-first replacement of the only ready pod on a node being drained.

One rule for the three: a serving pipeline never goes to zero unless its spec asks for it
(`spec.server.rollout: ReplaceInPlace`, or a passed-through `strategy` that does not surge).

The Deployment's strategy is static while an autoscaler changes the replica count, so it is stated in
percentages where the count matters: Kubernetes rounds a rollout's maxUnavailable down and its maxSurge
up, so at one replica a surge strategy starts the new pod first whatever the autoscaler chose. A
PodDisruptionBudget's minAvailable rounds up, so `50%` never lets a drain evict the only replica (nor
more than half of several); a drain would then wait forever for that one pod, so the operator, seeing
it on a cordoned node (`kubectl drain` cordons first), restarts the Deployment's pods, which surge: the
new pod starts on another node, the old one goes once it is Ready, and the drain completes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..settings import GROUP, Settings
from ..spec import TritonPipeline
from .meta import metadata, plain_copy, selector_labels

SURGE, REPLACE_IN_PLACE = "Surge", "ReplaceInPlace"
MAX_SURGE = 1  # one extra pod (one pod's GPUs) at a time
# GPU pipelines: from 4 replicas up a quarter is also replaced in place (rounded down: 0 below 4, so one
# replica, and two or three, only surge); CPU pods only surge
GPU_MAX_UNAVAILABLE = "25%"
IN_PLACE = {"maxSurge": 0, "maxUnavailable": 1}
K8S_DEFAULT_MAX_SURGE = "25%"  # a RollingUpdate's maxSurge when the strategy leaves it out

PDB_API = ("policy/v1", "PodDisruptionBudget")
# rounded up: at one replica no eviction (the operator replaces the pod first), at N at most N/2
PDB_MIN_AVAILABLE = "50%"
# a pod that is not Ready serves nothing: a drain may always evict it (a crash-looping or still loading
# pod never blocks a drain); IfHealthyBudget, the default, counts it against the budget
UNHEALTHY_POD_EVICTION = "AlwaysAllow"

# on the Deployment's pod template, set by its own field manager: the pod (and node) whose drain the
# restart serves; the same value again is no new restart
DRAIN_ANNOTATION = f"{GROUP}/replaces-drained-pod"
DRAIN_MANAGER_SUFFIX = "-drain"


def strategy(tp: TritonPipeline) -> dict[str, Any]:
    """The Deployment's strategy: spec.server.strategy as given, else the one spec.server.rollout names
    (Surge when unset)."""
    server = tp.spec.server
    if server.strategy is not None:
        return plain_copy(server.strategy)
    if server.rollout == REPLACE_IN_PLACE:
        rolling: dict[str, Any] = dict(IN_PLACE)
    else:
        rolling = {"maxSurge": MAX_SURGE, "maxUnavailable": GPU_MAX_UNAVAILABLE if server.gpus > 0 else 0}
    return {"type": "RollingUpdate", "rollingUpdate": rolling}


def surges(deployment_strategy: Mapping[str, Any]) -> bool:
    """Whether a Deployment of this strategy starts a new pod before it stops the old one when it runs one
    replica: a RollingUpdate whose maxSurge is at least 1 there (a percentage rounds up, so any above 0%)."""
    if deployment_strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return False
    given = (deployment_strategy.get("rollingUpdate") or {}).get("maxSurge", K8S_DEFAULT_MAX_SURGE)
    try:
        return int(str(given).rstrip("%")) > 0
    except ValueError:
        return False


def may_run_one(tp: TritonPipeline) -> bool:
    """Whether the pipeline may run one replica: one replica, or an autoscaler that may go down to one."""
    auto = tp.spec.autoscaling
    return auto.min_replicas <= 1 if auto is not None else tp.spec.server.replicas == 1


def disruption_budget(tp: TritonPipeline, settings: Settings) -> dict[str, Any] | None:
    """The pipeline's PodDisruptionBudget; None when it runs no pod.

    A surging pipeline that may run one replica: minAvailable 50% (a drain never evicts the only replica,
    the operator replaces it first; of several it takes at most half at once). One that always runs
    several: maxUnavailable 1 (a drain takes one pod at a time). A pipeline that replaces in place:
    maxUnavailable 1 too, so a drain may evict its only replica, as its rolls stop it (its spec chose that).
    Pods that are not Ready may always be evicted."""
    if tp.spec.autoscaling is None and tp.spec.server.replicas == 0:
        return None
    if surges(strategy(tp)) and may_run_one(tp):
        budget: dict[str, Any] = {"minAvailable": PDB_MIN_AVAILABLE}
    else:
        budget = {"maxUnavailable": 1}
    return {
        "apiVersion": PDB_API[0],
        "kind": PDB_API[1],
        "metadata": metadata(tp.name, tp, settings),
        "spec": {
            **budget,
            "selector": {"matchLabels": selector_labels(tp.name)},
            "unhealthyPodEvictionPolicy": UNHEALTHY_POD_EVICTION,
        },
    }


def budget_holds_one(deployment: Mapping[str, Any]) -> bool:
    """Whether the pipeline's budget keeps a drain from evicting its pod for good: the Deployment runs one
    replica (the autoscaler's choice, or the spec's) and surges, so its budget is minAvailable 50%."""
    spec = deployment.get("spec") or {}
    return int(spec.get("replicas", 1)) == 1 and surges(spec.get("strategy") or {})


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """The pod is Ready (it serves) and is not being deleted."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return ready and not (pod.get("metadata") or {}).get("deletionTimestamp")


def serving_pods(pods: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(pod, node) of each Ready pod bound to a node."""
    return [
        (p["metadata"]["name"], p["spec"]["nodeName"])
        for p in pods
        if pod_ready(p) and (p.get("spec") or {}).get("nodeName")
    ]


def cordoned(node: Mapping[str, Any] | None) -> bool:
    """The node is cordoned (`kubectl drain` and `kubectl cordon` set spec.unschedulable first)."""
    return bool(((node or {}).get("spec") or {}).get("unschedulable"))


def drain_value(pod: str, node: str) -> str:
    return f"{pod} on {node}"


def replacing(deployment: Mapping[str, Any], pod: str, node: str) -> bool:
    """The Deployment's pods were restarted for this pod's drain already."""
    template = (deployment.get("spec") or {}).get("template") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(DRAIN_ANNOTATION) == drain_value(pod, node))


def drain_restart(deployment: Mapping[str, Any], pod: str, node: str) -> dict[str, Any]:
    """The apply (under its own field manager) that restarts the Deployment's pods for `pod`'s drain: its
    pod template's DRAIN_ANNOTATION, and nothing else of the Deployment."""
    meta = deployment.get("metadata") or {}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "spec": {"template": {"metadata": {"annotations": {DRAIN_ANNOTATION: drain_value(pod, node)}}}},
    }
