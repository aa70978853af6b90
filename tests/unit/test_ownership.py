"""Whose an object is, and what a pipeline may write (render/ownership.py): pure rules, no server. The same
rules on a real kube-apiserver are in tests/component/test_operator_ownership.py; `tritonpipeline validate` of
colliding pipelines is at the end.
Here the pure tests; those on real components are in tests/component/test_ownership.py."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from helpers import example
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.render import ownership
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline

UID = "0f0e0d0c-0000-4000-8000-000000000001"


def obj(
    owners: list[dict[str, Any]] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c", "namespace": "ns", "uid": "x"}
    if owners is not None:
        meta["ownerReferences"] = owners
    if annotations is not None:
        meta["annotations"] = annotations
    meta["managedFields"] = [
        {"manager": "kubectl-client-side-apply", "operation": "Update"},
        {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status"},
    ]
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta}


def ref(kind: str, name: str, uid: str, controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid, "controller": controller}


@pytest.mark.parametrize(
    ("live", "verdict", "owner"),
    [
        (obj([ref("TritonPipeline", "c", UID)]), "ours", "controlled by TritonPipeline/c"),
        # an earlier pipeline of the same name (deleted; the collector has yet to remove its children)
        (obj([ref("TritonPipeline", "c", "old")]), "successor", "controlled by TritonPipeline/c"),
        (obj([ref("TritonPipeline", "b", "other")]), "foreign", "controlled by TritonPipeline/b"),
        (obj([ref("Deployment", "c", "d-uid")]), "foreign", "controlled by Deployment/c"),
        (obj(), "foreign", "no controller; written by kubectl-client-side-apply"),
        # an owner that is not a controller does not make it anyone's to take
        (obj([ref("ConfigMap", "x", "y", controller=False)]), "foreign", "no controller"),
        (obj(annotations={ownership.ADOPT_ANNOTATION: "c"}), "adopt", "no controller"),
        # annotated for another pipeline, or controlled by another: not this one's to take
        (obj(annotations={ownership.ADOPT_ANNOTATION: "d"}), "foreign", "no controller"),
        (obj([ref("Deployment", "x", "y")], {ownership.ADOPT_ANNOTATION: "c"}), "foreign", "Deployment/x"),
    ],
)
def test_holder_says_whose_an_object_is(live: dict[str, Any], verdict: str, owner: str) -> None:
    found = ownership.holder(live, "c", UID)
    assert found.verdict == verdict
    assert owner in found.owner
    assert found.writable == (verdict != "foreign")


def test_names_of_two_pipelines_collide_only_where_one_makes_the_others() -> None:
    assert ownership.collisions("b-headless", ["b", "c", "b-headless"]) == [("b", "Service", "b-headless")]
    assert ownership.collisions("b", ["b-headless"]) == [("b-headless", "Service", "b-headless")]
    assert ownership.collisions("b", ["b", "b-http", "bb", "b-repo-0", "b-admin-key"]) == []


# names built of the generated suffixes, so that many of them collide with one another
NAMES = [
    "".join(parts)
    for parts in itertools.product(
        ["a", "b-headless", "b"], ["", "-headless", "-http", "-admin-key", "-grpc"]
    )
] + ["b-headless-headless", "b-http-headless", "a-grpc-http", "x"]


@pytest.mark.parametrize("pipeline", NAMES)
def test_the_pipelines_that_could_collide_are_all_those_that_do(pipeline: str) -> None:
    """The webhook GETs only the pipelines `could_collide` names: every collision with any other name is
    among them."""
    candidates = ownership.could_collide(pipeline)
    assert candidates is not None and pipeline not in candidates
    assert ownership.collisions(pipeline, NAMES) == ownership.collisions(
        pipeline, [n for n in NAMES if n in candidates]
    )
    assert len(candidates) <= 4  # a GET or a few per review, whatever the namespace holds


def children(name: str = "c", **spec: Any) -> Any:
    doc = example("fanout")
    doc["metadata"] = {"name": name, "namespace": "ns"}
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    doc["spec"].update(spec)
    tp = parse_pipeline(doc)
    return render_children(tp, compile_pipeline(tp), Settings())


def test_what_depends_on_an_object_another_holds_is_not_applied() -> None:
    kids = children(
        autoscaling={"minReplicas": 1, "maxReplicas": 3, "metric": "queueTime", "target": 50},
        routing={"sessionAffinity": "Header", "header": "x-session", "provider": "istio"},
    )
    deployment = ownership.ref_of(kids.deployment)
    hpa = ownership.ref_of(kids.hpa)
    routes = [ownership.ref_of(o) for o in kids.routing.provider_objects]
    assert routes
    # a ConfigMap of another's: the Deployment would mount it, and what acts on the Deployment goes too
    taken = [ownership.ref_of(kids.configmaps[0])]
    skipped = ownership.dependents(kids, taken)
    assert deployment in skipped and hpa in skipped
    assert not set(routes) & set(skipped)
    # another's Deployment: not scaled, not budgeted by the pipeline
    skipped = ownership.dependents(kids, [deployment])
    assert hpa in skipped and deployment not in skipped
    # another's Service: no route sends traffic to it
    assert set(routes) <= set(ownership.dependents(kids, [ownership.ref_of(kids.service)]))
    assert ownership.dependents(kids, []) == []


def test_the_deployment_records_its_optional_children_for_a_later_prune() -> None:
    recorded = ownership.record_optional(
        {"metadata": {"name": "c", "annotations": {"a": "b"}}},
        [("autoscaling/v2", "HorizontalPodAutoscaler", "c"), ("v1", "Service", "c-headless")],
    )
    annotations = recorded["metadata"]["annotations"]
    assert annotations["a"] == "b"
    assert annotations[ownership.RENDERED_OPTIONAL] == "HorizontalPodAutoscaler/c,Service/c-headless"
    assert ownership.recorded_optional(recorded, "c") == {
        ("autoscaling/v2", "HorizontalPodAutoscaler", "c"),
        ("v1", "Service", "c-headless"),
    }
    none = ownership.record_optional({"metadata": {"name": "c"}}, [])
    assert ownership.recorded_optional(none, "c") == set()
    # a Deployment of an operator before the record (or none): every optional name is a candidate
    assert ownership.recorded_optional({"metadata": {"name": "c"}}, "c") == set(ownership.optional_names("c"))
    assert ownership.recorded_optional(None, "c") == set(ownership.optional_names("c"))


def test_an_adopted_or_created_object_keeps_only_the_operators_apply_as_owner() -> None:
    live = {
        "metadata": {
            "managedFields": [
                {"manager": "tritonpipeline-operator", "operation": "Apply"},
                {"manager": "tritonpipeline-operator", "operation": "Update"},  # the create's POST
                {"manager": "kubectl", "operation": "Update"},  # its earlier owner's
                {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status"},
            ]
        }
    }
    kept = ownership.managed_fields_reset(live, "tritonpipeline-operator")
    assert [(m["manager"], m.get("subresource")) for m in kept] == [
        ("tritonpipeline-operator", None),
        ("kube-controller-manager", "status"),
    ]
    operations = ownership.replace_content(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}, "data": {"a": "1"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}, "binaryData": {"b": "AA=="}, "data": {}},
    )
    assert operations == [
        {"op": "add", "path": "/data", "value": {"a": "1"}},
        {"op": "remove", "path": "/binaryData"},
    ]


def test_the_name_taken_message_names_each_holder_and_how_to_resolve_it() -> None:
    message = ownership.taken_message(
        "c",
        {("v1", "Service", "c"): "no controller; written by kubectl", ("v1", "ConfigMap", "c-repo-0"): "x"},
        [("apps/v1", "Deployment", "c")],
    )
    assert "Service c exists and is not this pipeline's (no controller; written by kubectl)" in message
    assert "ConfigMap c-repo-0 exists" in message
    assert "not applied either, as they depend on it: Deployment/c" in message
    assert message.endswith(f"kubectl annotate service c {ownership.ADOPT_ANNOTATION}=c")
