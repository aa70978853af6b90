"""A pod always mounts the config its template was rendered for, on a real kube-apiserver: the generated
ConfigMaps are immutable and named by their content; a new repository is a new set, which the Deployment
switches to in one step; an old set stays while a ReplicaSet of the pipeline mounts it. No
kube-controller-manager runs here, so the test writes the ReplicaSet the Deployment controller would."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from component.test_operator import SELECTOR, wait_reconciled
from harness.operator_process import LocalOperator
from harness.wait import wait_for
from helpers import cluster_doc
from tritonpipeline.kube.api_client import Kube, KubeError
from tritonpipeline.render.pinning import projected_configmaps

pytestmark = pytest.mark.apiserver


def generated(kube: Kube, namespace: str, name: str) -> set[str]:
    return {c["metadata"]["name"] for c in kube.list("v1", "ConfigMap", namespace, f"{SELECTOR}={name}")}


def mounted(kube: Kube, namespace: str, name: str) -> set[str]:
    deployment = kube.get("apps/v1", "Deployment", namespace, name)
    assert deployment is not None
    return set(projected_configmaps(deployment["spec"]["template"]))


def replica_set(kube: Kube, deployment: dict[str, Any], name: str) -> dict[str, Any]:
    """The ReplicaSet the Deployment controller makes for the Deployment's current template."""
    template = copy.deepcopy(deployment["spec"]["template"])
    meta = deployment["metadata"]
    owner = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }
    return kube.create(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": template["metadata"]["labels"],
                "ownerReferences": [owner],
            },
            "spec": {"replicas": 0, "selector": deployment["spec"]["selector"], "template": template},
        }
    )


def test_a_new_repository_is_a_new_set_and_the_old_one_stays_with_its_replica_set(
    kube: Kube, namespace: str, run_operator: Callable[..., LocalOperator]
) -> None:
    run_operator({"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    doc = cluster_doc("v", namespace)
    kube.apply(doc)
    wait_reconciled(kube, namespace, "v")
    first = generated(kube, namespace, "v")
    assert first and mounted(kube, namespace, "v") == first
    deployment = kube.get("apps/v1", "Deployment", namespace, "v")
    assert deployment is not None and deployment["spec"]["revisionHistoryLimit"] == 3
    old = replica_set(kube, deployment, "v-old")

    # nobody edits a generated ConfigMap's data: the API server refuses it
    name = sorted(first)[0]
    with pytest.raises(KubeError) as refused:
        kube.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/configmaps/{name}",
            body={"data": {"extra": "edited"}},
            content_type="application/merge-patch+json",
        )
    assert refused.value.status == 422 and "immutable" in refused.value.message

    # a changed repository: a new set, and the Deployment names only the new one
    changed = copy.deepcopy(doc)
    changed["spec"]["pipelines"][0]["fanOut"] = "shared"
    kube.apply(changed)
    wait_reconciled(kube, namespace, "v", 2)
    now = mounted(kube, namespace, "v")
    assert now and not now & first, (now, first)
    # the old set stays: the old ReplicaSet's pods (an eviction, `kubectl rollout undo`) mount it
    wait_for("a resync or two", lambda: generated(kube, namespace, "v") >= first | now)
    assert generated(kube, namespace, "v") == first | now

    # once no ReplicaSet mounts it, the next reconcile deletes it
    kube.delete("apps/v1", "ReplicaSet", namespace, old["metadata"]["name"])
    wait_for("the old set pruned", lambda: generated(kube, namespace, "v") == now)

    # a deleted generated ConfigMap comes back at once, the same
    gone = sorted(now)[0]
    before = kube.get("v1", "ConfigMap", namespace, gone)
    assert before is not None
    kube.delete("v1", "ConfigMap", namespace, gone)
    back = wait_for("the ConfigMap back", lambda: kube.get("v1", "ConfigMap", namespace, gone))
    assert back["data"] == before["data"] and back["immutable"] is True


def test_a_metadata_list_sends_names_and_owners_not_contents(kube: Kube, namespace: str) -> None:
    """What the prune and the webhook list (Kube.list metadata_only): ConfigMaps of a pipeline cost their
    metadata, not their configs; an empty list is a list."""
    labels = {SELECTOR: "meta-only"}
    data = {"config.pbtxt": "x" * 100_000}
    for i in range(3):
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"m-{i}", "namespace": namespace, "labels": labels},
                "data": data,
            }
        )
    full = kube.list("v1", "ConfigMap", namespace, f"{SELECTOR}=meta-only")
    listed = kube.list("v1", "ConfigMap", namespace, f"{SELECTOR}=meta-only", metadata_only=True)
    assert sorted(c["metadata"]["name"] for c in listed) == ["m-0", "m-1", "m-2"]
    assert [c["metadata"]["uid"] for c in listed] == [c["metadata"]["uid"] for c in full]
    assert all("data" in c for c in full) and not any("data" in c for c in listed)
    assert kube.list("v1", "ConfigMap", namespace, f"{SELECTOR}=nothing", metadata_only=True) == []
