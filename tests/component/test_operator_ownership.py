"""A good citizen in a shared namespace, on a real kube-apiserver: the operator writes and deletes only the
objects its pipeline controls (render/ownership.py, reconcile/claim.py). A team's own objects under names a
pipeline would give its children are left exactly as they are, before and after the pipeline, across a
restart and a resync; the pipeline reports them; adopting one is explicit; two pipelines whose children's
names collide do not fight."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import pytest

from component.test_operator import get_cr, rendered, wait_reconciled
from harness.operator_process import LocalOperator
from harness.wait import wait_for
from helpers import cluster_doc, condition
from tritonpipeline.kube.api_client import Kube
from tritonpipeline.render.ownership import ADOPT_ANNOTATION, NAME_TAKEN, OWNED, generated_names

pytestmark = pytest.mark.apiserver

SELECTOR = "serving.tritonpipeline.io/pipeline"


def team_objects(namespace: str, name: str) -> list[dict[str, Any]]:
    """A team's own objects under the names a pipeline `name` would give its children (none of them the
    pipeline's), one of them carrying the pipeline's label as a team might copy it."""
    meta = {"namespace": namespace, "labels": {"team": "a"}}
    pods = {"matchLabels": {"app": "user-app"}}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {**meta, "name": name},
            "spec": {"selector": {"app": "user-app"}, "ports": [{"port": 80}]},
        },
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {**meta, "name": name},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "user-app"},
                "minReplicas": 1,
                "maxReplicas": 3,
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {**meta, "name": name},
            "spec": {"podSelector": pods, "policyTypes": ["Ingress"]},
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {**meta, "name": name},
            "spec": {"selector": pods, "maxUnavailable": 1},
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {**meta, "name": f"{name}-http"},
            "spec": {"defaultBackend": {"service": {"name": "user-app", "port": {"number": 80}}}},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {**meta, "name": f"{name}-settings", "labels": {"team": "a", SELECTOR: name}},
            "data": {"a": "1"},
        },
    ]


def snapshot(kube: Kube, objects: list[dict[str, Any]]) -> dict[str, Any]:
    """Each object as stored now (None when gone): its uid, resourceVersion, owners and spec/data."""
    found = {}
    for obj in objects:
        meta = obj["metadata"]
        live = kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        key = f"{obj['kind']}/{meta['name']}"
        found[key] = None
        if live is not None:
            found[key] = (
                live["metadata"]["uid"],
                live["metadata"]["resourceVersion"],
                live["metadata"].get("ownerReferences"),
                live.get("spec"),
                live.get("data"),
            )
    return found


def header_routed(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """Pipeline `name` with Header routing applied and reconciled: its headless Service (`NAME-headless`,
    a name another pipeline's Service could have) as stored."""
    doc = cluster_doc(name, namespace)
    doc["spec"]["routing"] = {"sessionAffinity": "Header", "header": "x-session", "provider": "ingress-nginx"}
    kube.apply(doc)
    wait_reconciled(kube, namespace, name)
    headless = kube.get("v1", "Service", namespace, f"{name}-headless")
    assert headless is not None
    return headless


def metric(op: LocalOperator, name: str) -> str:
    return "\n".join(line for line in op.get("/metrics")[1].splitlines() if line.startswith(name))


@pytest.fixture
def operator(run_operator: Callable[..., LocalOperator]) -> Callable[..., LocalOperator]:
    """run_operator with /metrics (stops the first when a test starts another)."""
    return lambda env=None: run_operator(env, endpoints=True)


def test_a_teams_objects_under_generated_names_are_left_alone_and_reported(
    kube: Kube, namespace: str, operator: Callable[..., LocalOperator]
) -> None:
    """The team's Service `c` exists before pipeline `c`: the operator neither applies over it nor takes
    it over (its selector still sends the team's traffic to the team's pods, no owner reference, so
    deleting the pipeline does not collect it); the pipeline says so in ObjectsOwned, a Warning event and
    the objects-not-owned metric, and the rest of it is applied. Annotating the Service for the pipeline
    hands it over."""
    team = team_objects(namespace, "c")
    for obj in team:
        kube.create(obj)
    before = snapshot(kube, team)
    op = operator({"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    kube.apply(cluster_doc("c", namespace))
    cr = wait_for("ObjectsOwned", lambda: condition(get_cr(kube, namespace, "c"), OWNED))
    owned = condition(get_cr(kube, namespace, "c"), OWNED)
    assert owned is not None and owned["status"] == "False" and owned["reason"] == NAME_TAKEN, cr
    assert "Service c exists and is not this pipeline's (no controller" in owned["message"]
    assert f"kubectl annotate service c {ADOPT_ANNOTATION}=c" in owned["message"]
    # the rest of the pipeline is applied: its Deployment and ConfigMaps
    assert kube.get("apps/v1", "Deployment", namespace, "c") is not None
    assert kube.list("v1", "ConfigMap", namespace, f"{SELECTOR}=c,app.kubernetes.io/managed-by")
    warning = wait_for(
        "a NameTaken Warning event",
        lambda: [
            e
            for e in kube.list("v1", "Event", namespace, "")
            if e["involvedObject"].get("name") == "c" and e["reason"] == NAME_TAKEN
        ],
    )
    assert "Service c" in warning[0]["message"]
    assert 'tritonpipeline_operator_objects_not_owned{kind="Service"} 1.0' in metric(
        op, "tritonpipeline_operator_objects_not_owned"
    )
    time.sleep(3)  # three resyncs
    assert snapshot(kube, team) == before
    # one Warning for the new problem, none for each resync that finds it again
    taken = [e for e in kube.list("v1", "Event", namespace, "") if e["reason"] == NAME_TAKEN]
    assert len(taken) == 1, taken

    # a restart: the new process knows nothing of the children; nothing of the team's changes either
    op.stop()
    op = operator({"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    wait_for("a resync after the restart", lambda: "reconcile" in op.text())
    time.sleep(3)
    assert snapshot(kube, team) == before

    # adoption is explicit: the Service's owner annotates it for the pipeline
    service = kube.get("v1", "Service", namespace, "c")
    assert service is not None
    kube.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/services/c",
        body={"metadata": {"annotations": {ADOPT_ANNOTATION: "c"}}},
        content_type="application/merge-patch+json",
    )
    wait_for(
        "the Service adopted",
        lambda: "Service c" not in (condition(get_cr(kube, namespace, "c"), OWNED) or {}).get("message", "x"),
    )
    adopted = kube.get("v1", "Service", namespace, "c")
    assert adopted is not None
    assert [r["name"] for r in adopted["metadata"]["ownerReferences"]] == ["c"]
    assert adopted["spec"]["selector"]["app.kubernetes.io/instance"] == "c"
    assert [p["port"] for p in adopted["spec"]["ports"]] == [8000, 8001, 8002]  # the team's port 80 went
    # the adopted Service is the pipeline's like one it made: its fields are the operator's apply alone
    managers = {m["manager"] for m in adopted["metadata"]["managedFields"] if not m.get("subresource")}
    assert managers == {"tritonpipeline-operator"}, managers
    # the others are still the team's, untouched
    rest = [o for o in team if o["kind"] != "Service"]
    assert snapshot(kube, rest) == {k: v for k, v in before.items() if not k.startswith("Service/")}
    wait_for(
        "the metric without the Service",
        lambda: 'kind="Service"' not in metric(op, "tritonpipeline_operator_objects_not_owned"),
    )


def test_a_teams_object_created_after_the_pipeline_is_never_deleted(
    kube: Kube, namespace: str, operator: Callable[..., LocalOperator]
) -> None:
    """Pipeline `a` renders no autoscaler, NetworkPolicy or Ingress; the team creates theirs under those
    names afterwards (and a ConfigMap with the pipeline's label). No resync, no restart and no spec change
    prunes them: only the pipeline's own children are deleted."""
    op = operator({"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    doc = cluster_doc("a", namespace)
    kube.apply(doc)
    wait_reconciled(kube, namespace, "a")
    ours = {f"{o['kind']}/{o['metadata']['name']}" for o in team_objects(namespace, "a")} & {
        f"{kind}/{name}" for _, kind, name in generated_names("a")
    }
    # the names the pipeline's spec renders are its own: the team's objects take the others
    team = [
        o
        for o in team_objects(namespace, "a")
        if kube.get(o["apiVersion"], o["kind"], namespace, o["metadata"]["name"]) is None
    ]
    assert {f"{o['kind']}/{o['metadata']['name']}" for o in team} & ours, "no generated name is left to take"
    for obj in team:
        kube.create(obj)
    before = snapshot(kube, team)
    time.sleep(3)
    assert snapshot(kube, team) == before
    op.stop()
    op = operator({"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    changed = copy.deepcopy(doc)
    changed["spec"]["pipelines"][0]["fanOut"] = "shared"  # a spec change: a fresh render and a prune
    kube.apply(changed)
    wait_reconciled(kube, namespace, "a", 2)
    time.sleep(3)
    assert snapshot(kube, team) == before
    owned = condition(get_cr(kube, namespace, "a"), OWNED)
    assert owned is not None and owned["status"] == "True", owned


def test_a_configmap_of_anothers_stops_the_deployment(
    kube: Kube, namespace: str, operator: Callable[..., LocalOperator]
) -> None:
    """A ConfigMap of another's has the name of the pipeline's first repository part: the Deployment,
    which would mount it, is not applied; Ready says nothing serves and why."""
    doc = cluster_doc("d", namespace)
    taken = rendered(doc).configmaps[0]["metadata"]["name"]
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"namespace": namespace, "name": taken},
            "data": {"config.pbtxt": "name: 'not yours'"},
        }
    )
    operator()
    kube.apply(doc)
    ready = wait_for(
        "Ready=False NameTaken",
        lambda: (lambda c: c if c and c["reason"] == NAME_TAKEN else None)(
            condition(get_cr(kube, namespace, "d"), "Ready")
        ),
    )
    assert f"ConfigMap/{taken}" in ready["message"], ready
    owned = condition(get_cr(kube, namespace, "d"), OWNED)
    assert owned is not None and "Deployment/d" in owned["message"], owned  # not applied, and why
    assert kube.get("apps/v1", "Deployment", namespace, "d") is None
    cm = kube.get("v1", "ConfigMap", namespace, taken)
    assert cm is not None and cm["data"] == {"config.pbtxt": "name: 'not yours'"}


def test_pipelines_whose_children_names_collide_do_not_fight(
    kube: Kube, namespace: str, operator: Callable[..., LocalOperator]
) -> None:
    """Pipeline `b` (Header routing: headless Service `b-headless`) and pipeline `b-headless` (its Service
    `b-headless`): the first to apply keeps the Service, the other reports it and never writes it."""
    op = operator({"TRITONPIPELINE_RESYNC_SECONDS": "1"})
    headless = header_routed(kube, namespace, "b")
    kube.apply(cluster_doc("b-headless", namespace))
    owned = wait_for(
        "b-headless reports its Service",
        lambda: (lambda c: c if c and c["status"] == "False" else None)(
            condition(get_cr(kube, namespace, "b-headless"), OWNED)
        ),
    )
    assert (
        "Service b-headless exists and is not this pipeline's (controlled by TritonPipeline/b)"
        in (owned["message"])
    )
    time.sleep(3)  # three resyncs of both
    now = kube.get("v1", "Service", namespace, "b-headless")
    assert now is not None
    assert now["metadata"]["resourceVersion"] == headless["metadata"]["resourceVersion"]
    assert now["spec"]["selector"]["app.kubernetes.io/instance"] == "b"  # still b's pods
    assert "reconcile error" not in op.text()
