"""Rolls and drains that never take a serving pipeline to zero, on a real kube-apiserver with the operator
as a real subprocess. No kubelet, scheduler or controllers run here: the tests write what they would
(a Deployment's status, pods bound to nodes and their status, a node cordoned as `kubectl drain` does
first), and the operator's answers are read back from the apiserver. The rules:
tests/unit/test_disruption.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from component.test_operator import get_cr, patch_deployment_status, wait_reconciled
from harness.kubeapi import apply_object, write_status
from harness.wait import wait_for
from helpers import cluster_doc, condition
from tritonpipeline.kube.api_client import Kube
from tritonpipeline.render import disruption
from tritonpipeline.render.conditions import DRAIN_WAITING, NO_ROOM, REPLACING_DRAINED
from tritonpipeline.render.meta import MANAGED_BY, PIPELINE_LABEL
from tritonpipeline.settings import FIELD_MANAGER

pytestmark = pytest.mark.apiserver

NO_GPU = "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient nvidia.com/gpu."


def deployment(kube: Kube, ns: str) -> dict[str, Any]:
    found = kube.get("apps/v1", "Deployment", ns, "vision")
    assert found is not None
    return found


def progressing(kube: Kube, ns: str, reason: str) -> dict[str, Any] | None:
    c = condition(get_cr(kube, ns, "vision"), "Progressing")
    return c if c and c["reason"] == reason else None


def rollout_status(kube: Kube, ns: str, replicas: int, updated: int, ready: int) -> None:
    """The Deployment controller's numbers for the Deployment's current generation."""
    generation = deployment(kube, ns)["metadata"]["generation"]
    status = {"observedGeneration": generation, "replicas": replicas, "updatedReplicas": updated,
              "readyReplicas": ready, "availableReplicas": ready}  # fmt: skip
    patch_deployment_status(kube, ns, "vision", status)


def triton_pod(kube: Kube, ns: str, name: str, node: str | None = None) -> dict[str, Any]:
    """A pod of the pipeline as its ReplicaSet makes it (the labels the operator selects by), bound to
    `node` as the scheduler binds it."""
    labels = {**MANAGED_BY, PIPELINE_LABEL: "vision"}
    spec: dict[str, Any] = {"containers": [{"name": "tritonserver", "image": "triton"}]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": ns, "name": name, "labels": labels}}
    kube.create({**pod, "spec": spec})
    if node is not None:
        bind(kube, ns, name, node)
    return pod


def bind(kube: Kube, ns: str, pod: str, node: str) -> None:
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
               "target": {"apiVersion": "v1", "kind": "Node", "name": node}}  # fmt: skip
    kube.request("POST", f"/api/v1/namespaces/{ns}/pods/{pod}/binding", body=binding)


def ready(kube: Kube, pod: dict[str, Any]) -> None:
    conditions = [
        {"type": t, "status": "True"} for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    write_status(kube, pod, {"phase": "Running", "conditions": conditions})


def unschedulable(kube: Kube, pod: dict[str, Any], why: str) -> None:
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why}
    write_status(kube, pod, {"phase": "Pending", "conditions": [scheduled]})


@pytest.fixture
def nodes(kube: Kube, namespace: str) -> Iterator[list[str]]:
    """Two GPU nodes (cluster-scoped: named after the test's namespace, deleted after it)."""
    names = [f"{namespace}-gpu-a", f"{namespace}-gpu-b"]
    for name in names:
        apply_object(kube, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    yield names
    for name in names:
        kube.request("DELETE", f"/api/v1/nodes/{name}")


def test_a_roll_at_one_autoscaled_gpu_replica_surges_and_says_when_it_has_no_room(
    kube, namespace, run_operator
):
    """An autoscaled GPU pipeline at one replica rolled with maxSurge 0 / maxUnavailable 1: to zero for
    the whole model load. Now the new pod comes first; where it cannot be scheduled (no free GPU) the
    pipeline says so, with the scheduler's words and what to do, and `rollout: ReplaceInPlace` is the
    knowing choice of the other way (the apiserver takes both strategies and budgets)."""
    run_operator()
    doc = cluster_doc("vision", namespace)
    doc["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 4}
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision")
    live = deployment(kube, namespace)
    rolling = live["spec"]["strategy"]["rollingUpdate"]
    assert (rolling["maxSurge"], rolling["maxUnavailable"]) == (1, "25%")  # 0 unavailable at one replica
    pdb = kube.get("policy/v1", "PodDisruptionBudget", namespace, "vision")
    assert pdb is not None and pdb["spec"]["minAvailable"] == "50%"
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"

    # a roll (a spec change, an upgrade's roll): the old pod serves, the surge pod finds no GPU
    rollout_status(kube, namespace, replicas=2, updated=1, ready=1)
    old = triton_pod(kube, namespace, "vision-old")
    ready(kube, old)
    new = triton_pod(kube, namespace, "vision-new")
    unschedulable(kube, new, NO_GPU)
    c = wait_for("Progressing=False NoRoomForNewPod", lambda: progressing(kube, namespace, NO_ROOM))
    assert c["status"] == "False"
    assert f"pod vision-new cannot be scheduled: {NO_GPU}" in c["message"]
    assert "the 1 ready pod(s) keep serving" in c["message"]
    assert "set spec.server.rollout: ReplaceInPlace" in c["message"]

    # replace in place, chosen knowingly: no extra GPU, and the budget lets a drain take the only pod
    doc["spec"]["server"]["rollout"] = "ReplaceInPlace"
    kube.apply(doc)
    wait_reconciled(kube, namespace, "vision", 2)
    rolling = deployment(kube, namespace)["spec"]["strategy"]["rollingUpdate"]
    assert (rolling["maxSurge"], rolling["maxUnavailable"]) == (0, 1)
    pdb = kube.get("policy/v1", "PodDisruptionBudget", namespace, "vision")
    assert pdb is not None and pdb["spec"].get("maxUnavailable") == 1 and "minAvailable" not in pdb["spec"]


def test_a_drain_of_the_only_ready_pods_node_replaces_it_elsewhere_first(
    kube, namespace, nodes, run_operator
):
    """`kubectl drain` cordons the node, then evicts. The budget keeps the only ready pod (an eviction
    would take the pipeline to zero for the model load); the operator, seeing its node cordoned at the
    next resync, restarts the pods once, which surges: the new pod starts on another node, and the old
    one goes once the new one is Ready. Where the new pod has no room, the pipeline says the drain waits
    and why."""
    op = run_operator({"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    node_a, node_b = nodes
    kube.apply(cluster_doc("vision", namespace))
    wait_reconciled(kube, namespace, "vision")
    rollout_status(kube, namespace, replicas=1, updated=1, ready=1)
    old = triton_pod(kube, namespace, "vision-old", node_a)
    ready(kube, old)
    wait_for(
        "Ready=True",
        lambda: (condition(get_cr(kube, namespace, "vision"), "Ready") or {}).get("status") == "True",
    )
    time.sleep(3)  # resyncs: a pod on a node nobody drains is left alone
    annotations = deployment(kube, namespace)["spec"]["template"]["metadata"].get("annotations") or {}
    assert disruption.DRAIN_ANNOTATION not in annotations

    # kubectl drain: the node is cordoned first
    apply_object(kube, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_a},
                        "spec": {"unschedulable": True}})  # fmt: skip

    def restarted() -> str | None:
        template = deployment(kube, namespace)["spec"]["template"]["metadata"]
        return (template.get("annotations") or {}).get(disruption.DRAIN_ANNOTATION)

    assert wait_for("the pods restarted for the drain", restarted) == f"vision-old on {node_a}"
    live = deployment(kube, namespace)
    managers = {e["manager"] for e in live["metadata"]["managedFields"]}
    assert FIELD_MANAGER + disruption.DRAIN_MANAGER_SUFFIX in managers  # its own: no later apply removes it
    c = wait_for("Progressing ReplacingDrainedPod", lambda: progressing(kube, namespace, REPLACING_DRAINED))
    assert c["status"] == "True" and f"node {node_a} is being drained" in c["message"]
    assert f"node {node_a} is being drained and holds pod vision-old" in op.text()

    # the Deployment controller surges: the new pod has no room
    rollout_status(kube, namespace, replicas=2, updated=1, ready=1)
    new = triton_pod(kube, namespace, "vision-new")
    unschedulable(kube, new, NO_GPU)
    c = wait_for("Progressing=False DrainWaiting", lambda: progressing(kube, namespace, DRAIN_WAITING))
    assert c["status"] == "False"
    assert c["message"].startswith(f"node {node_a} is being drained (cordoned) and holds pod vision-old")
    assert f"pod vision-new cannot be scheduled: {NO_GPU}" in c["message"]
    assert "set spec.server.rollout: ReplaceInPlace (the drain then evicts the pod" in c["message"]

    # room on the other node: the new pod is bound there and Ready, the controller removes the old one
    bind(kube, namespace, "vision-new", node_b)
    ready(kube, new)
    kube.delete("v1", "Pod", namespace, "vision-old")
    rollout_status(kube, namespace, replicas=1, updated=1, ready=1)
    wait_for("Progressing Complete", lambda: progressing(kube, namespace, "Complete"))
    time.sleep(3)  # resyncs: one restart for one drained pod, none after
    assert restarted() == f"vision-old on {node_a}"
    assert op.text().count("is being drained and holds pod") == 1
