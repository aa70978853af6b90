"""No default roll or drain takes a serving pipeline to zero (render/disruption.py; pure).

The strategy and the budget are checked the way Kubernetes reads them, at every replica count an
autoscaler may choose: the Deployment controller rounds a rollout's maxSurge up and its maxUnavailable
down (and makes maxUnavailable 1 when both come to 0); the disruption controller rounds a budget's
percentages up. The operator side of a drain (a real apiserver, a cordoned Node) is in
tests/component/test_operator_disruption.py."""

from __future__ import annotations

import math
from typing import Any

import pytest

from support.pod_spec import cluster_doc
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.errors import SpecError
from tritonpipeline.render import conditions as st
from tritonpipeline.render import disruption, pinning
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline

AUTOSCALED = {"minReplicas": 1, "maxReplicas": 10, "metric": "queueTime", "target": 50}


def _scaled(value: int | str, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: a count as it is, a percentage of `total` rounded."""
    if isinstance(value, int):
        return value
    share = int(value.rstrip("%")) * total / 100
    return math.ceil(share) if round_up else math.floor(share)


def rollout_floor(strategy: dict[str, Any], replicas: int) -> int:
    """The fewest available pods during a roll of `replicas` ready ones (the Deployment controller's
    ResolveFenceposts: maxSurge rounded up, maxUnavailable down, and 1 unavailable when both are 0)."""
    if strategy.get("type", "RollingUpdate") == "Recreate":
        return 0
    rolling = strategy.get("rollingUpdate") or {}
    surge = _scaled(rolling.get("maxSurge", "25%"), replicas, True)
    unavailable = _scaled(rolling.get("maxUnavailable", "25%"), replicas, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return replicas - unavailable


def rollout_surge(strategy: dict[str, Any], replicas: int) -> int:
    return _scaled((strategy.get("rollingUpdate") or {}).get("maxSurge", "25%"), replicas, True)


def evictions_allowed(budget: dict[str, Any], healthy: int) -> int:
    """The disruption controller's disruptionsAllowed for `healthy` Ready pods of as many expected."""
    spec = budget["spec"]
    if "minAvailable" in spec:
        desired = _scaled(spec["minAvailable"], healthy, True)
    else:
        desired = healthy - _scaled(spec["maxUnavailable"], healthy, True)
    return max(healthy - desired, 0)


def rendered(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    tp = parse_pipeline(doc)
    children = render_children(tp, compile_pipeline(tp), Settings())
    return children.deployment["spec"]["strategy"], children.disruption_budget


def gpu_doc(replicas: int = 1, autoscaled: bool = False, **server: Any) -> dict[str, Any]:
    doc = cluster_doc(gpus=1, replicas=replicas, **server)
    if autoscaled:
        doc["spec"]["autoscaling"] = dict(AUTOSCALED)
    return doc


# (the pipeline, the replica counts it may run)
PIPELINES = {
    "one GPU replica": (gpu_doc(), [1]),
    "GPU, autoscaled from minReplicas 1": (gpu_doc(autoscaled=True), list(range(1, 11))),
    "three GPU replicas": (gpu_doc(3), [3]),
    "eight GPU replicas": (gpu_doc(8), [8]),
    "one CPU replica": (cluster_doc(gpus=0, replicas=1), [1]),
    "CPU, autoscaled from minReplicas 1": (
        {**cluster_doc(gpus=0), "spec": {**cluster_doc(gpus=0)["spec"], "autoscaling": AUTOSCALED}},
        list(range(1, 11)),
    ),
}


@pytest.mark.parametrize("name", PIPELINES)
def test_a_default_roll_never_goes_below_one_ready_pod_and_surges_one_pod(name: str) -> None:
    """At one replica the new pod comes first (the old one goes once it is Ready), GPU or not, whatever
    the autoscaler chose: the strategy is static while the replica count is not."""
    doc, counts = PIPELINES[name]
    strategy, _ = rendered(doc)
    for replicas in counts:
        assert rollout_floor(strategy, replicas) >= 1, (name, replicas, strategy)
        assert rollout_surge(strategy, replicas) == 1, (name, replicas, strategy)  # one extra pod, not more
        assert disruption.surges(strategy)


def test_many_gpu_replicas_also_replace_some_in_place_and_cpu_replicas_never() -> None:
    """From four GPU replicas up a quarter goes before its replacement (fewer extra GPUs for a long roll);
    below four, and for CPU pods at any count, the roll never runs fewer pods than the spec asks."""
    gpu, _ = rendered(gpu_doc(autoscaled=True))
    assert [replicas - rollout_floor(gpu, replicas) for replicas in range(1, 10)] == [
        0,
        0,
        0,
        1,
        1,
        1,
        1,
        2,
        2,
    ]
    cpu, _ = rendered(PIPELINES["CPU, autoscaled from minReplicas 1"][0])
    assert all(rollout_floor(cpu, replicas) == replicas for replicas in range(1, 10))


@pytest.mark.parametrize("name", PIPELINES)
def test_a_default_budget_never_lets_a_drain_take_the_last_pod_nor_blocks_several(name: str) -> None:
    """One Ready pod: no eviction (the operator replaces it on another node first: it surges). Several:
    at least one eviction at a time, never all of them. Pods that are not Ready may always go."""
    doc, counts = PIPELINES[name]
    _, budget = rendered(doc)
    assert budget is not None, name
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    for healthy in counts:
        allowed = evictions_allowed(budget, healthy)
        assert allowed < healthy, (name, healthy, budget["spec"])
        assert (allowed == 0) if healthy == 1 else (allowed >= 1), (name, healthy, budget["spec"])


def test_the_budget_selects_exactly_the_pipelines_pods() -> None:
    tp = parse_pipeline(gpu_doc())
    children = render_children(tp, compile_pipeline(tp), Settings())
    pdb = children.disruption_budget
    assert pdb is not None and pdb in children.all()
    assert (pdb["apiVersion"], pdb["kind"], pdb["metadata"]["name"]) == (
        "policy/v1",
        "PodDisruptionBudget",
        "vision",
    )
    pod_labels = children.deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"] == children.deployment["spec"]["selector"]["matchLabels"]
    assert all(pod_labels[k] == v for k, v in pdb["spec"]["selector"]["matchLabels"].items())


def test_a_pipeline_that_always_runs_several_keeps_one_eviction_at_a_time() -> None:
    for doc in (
        gpu_doc(3),
        {**gpu_doc(), "spec": {**gpu_doc()["spec"], "autoscaling": {**AUTOSCALED, "minReplicas": 2}}},
    ):
        _, budget = rendered(doc)
        assert (
            budget is not None
            and budget["spec"]["maxUnavailable"] == 1
            and "minAvailable" not in budget["spec"]
        )


def test_no_budget_for_a_pipeline_of_no_pods() -> None:
    assert rendered(gpu_doc(0))[1] is None


@pytest.mark.parametrize(
    "server",
    [
        {"rollout": "ReplaceInPlace"},
        {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}},
        {"strategy": {"type": "Recreate"}},
    ],
)
def test_replace_in_place_is_a_choice_and_its_budget_lets_a_drain_evict_the_only_pod(server) -> None:
    """Chosen knowingly (no extra GPU; one replica is down while its replacement loads): the roll replaces
    in place at any count, and the budget lets a drain take the only replica too (a budget that forbade it
    would block the drain for good, and nothing replaces the pod first)."""
    doc = gpu_doc(autoscaled=True, **server)
    strategy, budget = rendered(doc)
    assert not disruption.surges(strategy)
    if "rollout" in server:
        assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
        assert rollout_floor(strategy, 1) == 0 and rollout_surge(strategy, 4) == 0
    assert budget is not None and evictions_allowed(budget, 1) == 1
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_rollout_and_strategy_are_one_choice() -> None:
    doc = gpu_doc(rollout="ReplaceInPlace", strategy={"type": "Recreate"})
    with pytest.raises(SpecError) as raised:
        parse_pipeline(doc)
    assert "set one of rollout and strategy" in str(raised.value)
    with pytest.raises(SpecError):
        parse_pipeline(gpu_doc(rollout="InPlace"))
    assert parse_pipeline(gpu_doc(rollout="Surge")).spec.server.rollout == "Surge"


@pytest.mark.parametrize(
    ("strategy", "surges"),
    [
        ({}, True),  # Kubernetes' default: maxSurge 25%, rounded up
        ({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"}}, True),
        ({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "1%"}}, True),
        ({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "0%", "maxUnavailable": 1}}, False),
        ({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}, False),
        ({"type": "Recreate"}, False),
    ],
)
def test_whether_a_live_deployment_surges_at_one_replica(strategy, surges) -> None:
    assert disruption.surges(strategy) is surges
    assert disruption.budget_holds_one({"spec": {"replicas": 1, "strategy": strategy}}) is surges
    assert not disruption.budget_holds_one({"spec": {"replicas": 2, "strategy": strategy}})


def _pod(name: str, node: str | None, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {}),
    }
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": meta,
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": conditions},
    }


def test_only_ready_bound_pods_that_stay_are_held_by_the_budget() -> None:
    pods = [
        _pod("a", "n1"),
        _pod("b", "n2", ready=False),  # a drain may evict it (AlwaysAllow)
        _pod("c", None),  # not bound yet
        _pod("d", "n3", deleting=True),  # going anyway
    ]
    assert disruption.serving_pods(pods) == [("a", "n1")]
    assert disruption.cordoned({"spec": {"unschedulable": True}})
    assert not disruption.cordoned({"spec": {}}) and not disruption.cordoned(None)


def test_the_drain_restart_touches_only_its_annotation_and_is_made_once_per_pod() -> None:
    deployment = {"metadata": {"name": "vision", "namespace": "ml"}, "spec": {"template": {"metadata": {}}}}
    body = disruption.drain_restart(deployment, "vision-7c9-x", "gpu-3")
    assert body == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vision", "namespace": "ml"},
        "spec": {
            "template": {"metadata": {"annotations": {disruption.DRAIN_ANNOTATION: "vision-7c9-x on gpu-3"}}}
        },
    }
    assert not disruption.replacing(deployment, "vision-7c9-x", "gpu-3")
    assert disruption.replacing(body, "vision-7c9-x", "gpu-3")
    assert not disruption.replacing(body, "vision-7c9-y", "gpu-4")


def test_an_upgrade_pin_leaves_the_drain_restart_to_its_own_field_manager() -> None:
    """A pinned template is the live one: the drain's annotation stays another manager's, so no later
    rendering takes it for a field the operator stopped setting (as the admin-key restart)."""
    rendered_deployment = {"metadata": {"name": "vision"}, "spec": {"template": {"metadata": {}}}}
    live = {
        "metadata": {"name": "vision"},
        "spec": {
            "template": {"metadata": {"annotations": {disruption.DRAIN_ANNOTATION: "p on n", "keep": "1"}}}
        },
    }
    pinned = pinning.pinned_deployment(rendered_deployment, live)
    assert pinned["spec"]["template"]["metadata"]["annotations"] == {"keep": "1"}


NO_GPU = "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient nvidia.com/gpu."


def test_a_rollouts_new_pod_without_room_is_reported_with_what_to_do() -> None:
    pending = ("vision-5d8f-new", NO_GPU)
    progressing, ready = st.ready_condition(2, 1, 0, 1, 4, pending=pending)
    assert (progressing["status"], progressing["reason"]) == ("False", st.NO_ROOM)
    message = progressing["message"]
    assert "pod vision-5d8f-new cannot be scheduled: " + NO_GPU in message
    assert "the 1 ready pod(s) keep serving" in message
    assert "spec.server.rollout: ReplaceInPlace" in message and "nothing serves" in message
    assert ready["status"] == "False"
    # a scale-up's pending pod is no rollout's: Ready says it (pod_problem), Progressing does not stop
    progressing, _ = st.ready_condition(2, 1, 2, 2, 4, pending=pending)
    assert progressing["reason"] == "Starting"


def test_a_drain_waiting_for_the_only_pods_replacement_says_so_and_why() -> None:
    drained = ("vision-5d8f-old", "gpu-3")
    progressing, _ = st.ready_condition(2, 1, 0, 1, 4, pending=("vision-6a1c-new", NO_GPU), drained=drained)
    assert (progressing["status"], progressing["reason"]) == ("False", st.DRAIN_WAITING)
    message = progressing["message"]
    assert message.startswith("node gpu-3 is being drained (cordoned) and holds pod vision-5d8f-old")
    assert "pod vision-6a1c-new cannot be scheduled: " + NO_GPU in message
    assert "spec.server.rollout: ReplaceInPlace (the drain then evicts the pod" in message
    progressing, _ = st.ready_condition(1, 1, 0, 1, 4, drained=drained)  # the new pod starting
    assert (progressing["status"], progressing["reason"]) == ("True", st.REPLACING_DRAINED)
    assert "the drain completes once the new pod is ready" in progressing["message"]


def test_unschedulable_names_the_pod_and_the_schedulers_words() -> None:
    pending = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": NO_GPU}
    pods = [_pod("a", "n1"), {"metadata": {"name": "b"}, "status": {"conditions": [pending]}}]
    assert st.unschedulable(pods) == ("b", NO_GPU)
    assert st.pod_problem(pods) == ("Unschedulable", f"pod b cannot be scheduled: {NO_GPU}")
    assert st.unschedulable(pods[:1]) is None


def test_every_rollout_reason_is_documented() -> None:
    """The reasons of Progressing are constants, not literals in a condition() call (tests/unit/test_docs.py
    reads
    those): each needs its row in docs/how-to/status.md too."""
    from helpers import docs_page

    section = docs_page("how-to/status.md")
    missing = [r for r in (st.NO_ROOM, st.DRAIN_WAITING, st.REPLACING_DRAINED) if f"`{r}`" not in section]
    assert not missing, missing
