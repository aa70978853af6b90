"""Operator upgrades restart no Triton pod (render/pinning.py, pure): when the live pod template is kept,
what a fresh rendering would change, and when a roll is over."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from helpers import example
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.render import pinning
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline

OLD, NEW = "registry.example.com/tritonpipeline:0.1.0", "registry.example.com/tritonpipeline:0.2.0"


def rendered(image: str, generation: int = 3, roll: str = "") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    doc = example("fanout")
    doc["metadata"] = {"name": "vision", "namespace": "ml"}
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    tp = parse_pipeline(doc)
    kids = render_children(tp, compile_pipeline(tp), Settings(assembler_image=image))
    return pinning.record(kids.deployment, generation, roll), list(kids.configmaps)


def as_served(deployment: dict[str, Any]) -> dict[str, Any]:
    """The Deployment as the API server returns it: defaults added to the pod template."""
    live = copy.deepcopy(deployment)
    spec = live["spec"]["template"]["spec"]
    spec.update(
        {"dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler", "restartPolicy": "Always"}
    )
    for c in [*spec["initContainers"], *spec["containers"]]:
        c.update({"imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log"})
    return live


def served_configmaps(configmaps: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {cm["metadata"]["name"]: cm for cm in configmaps}


def test_the_same_rendering_is_not_pinned_whatever_the_api_server_added() -> None:
    deployment, cms = rendered(OLD)
    decision = pinning.decide(3, 3, "", deployment, cms, as_served(deployment), served_configmaps(cms))
    assert decision == pinning.Decision(False, ())


def test_a_new_operator_rendering_for_the_same_generation_is_pinned_and_says_what_differs() -> None:
    old, cms = rendered(OLD)
    new, new_cms = rendered(NEW)
    decision = pinning.decide(3, 3, "", new, new_cms, as_served(old), served_configmaps(cms))
    assert decision.pinned
    assert decision.differences == (
        f'template.spec.initContainers[assemble-repository].image ("{OLD}" -> "{NEW}")',
    )
    kept = pinning.pinned_deployment(new, as_served(old))
    assert kept["spec"]["template"] == as_served(old)["spec"]["template"]
    assert kept["spec"]["replicas"] == new["spec"]["replicas"]


@pytest.mark.parametrize(
    ("generation", "roll", "live_roll"),
    [
        (4, "", ""),  # the spec changed
        (3, "2026-11-25T10:00", ""),  # someone asked for a roll
        (3, "b", "a"),  # asked again
    ],
)
def test_a_spec_change_or_a_roll_request_takes_the_new_rendering(generation, roll, live_roll) -> None:
    old, cms = rendered(OLD, 3, live_roll)
    new, new_cms = rendered(NEW, generation, roll)
    decision = pinning.decide(generation, 3, roll, new, new_cms, as_served(old), served_configmaps(cms))
    assert not decision.pinned


def test_a_deployment_of_an_operator_before_the_record_counts_as_this_generations_when_status_says_so() -> (
    None
):
    old, cms = rendered(OLD)
    for key in (pinning.RENDERED_GENERATION, pinning.ROLLED):
        del old["metadata"]["annotations"][key]
    new, new_cms = rendered(NEW)
    live = as_served(old)
    assert pinning.decide(3, 3, "", new, new_cms, live, served_configmaps(cms)).pinned
    assert not pinning.decide(3, 2, "", new, new_cms, live, served_configmaps(cms)).pinned  # not reconciled
    assert not pinning.decide(3, 3, "now", new, new_cms, live, served_configmaps(cms)).pinned


def test_fields_an_earlier_apply_set_and_a_new_rendering_drops_are_differences() -> None:
    """Server-side apply removes a field the operator's earlier apply set and the new rendering leaves out,
    which rolls the pods: each such field is a difference. They are read from the live Deployment's
    managedFields (fieldsV1: `f:NAME` fields, `k:{...}` list items by their merge key, which for a volume
    mount is its mountPath); a field the API server added, which no apply owns, is not one."""
    old, cms = rendered(OLD)
    live = as_served(old)
    container = live["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [*container.get("env", []), {"name": "EXTRA", "value": "1"}]
    container["volumeMounts"].append({"name": "cache", "mountPath": "/cache"})
    owned_container = {
        ".": {},
        "f:name": {},
        "f:env": {'k:{"name":"EXTRA"}': {".": {}, "f:name": {}, "f:value": {}}},
        "f:volumeMounts": {'k:{"mountPath":"/cache"}': {".": {}, "f:mountPath": {}, "f:name": {}}},
    }
    template = {
        "f:spec": {
            "f:securityContext": {"f:runAsUser": {}, "f:fsGroup": {}},
            "f:containers": {'k:{"name":"tritonserver"}': owned_container},
        }
    }
    live["metadata"]["managedFields"] = [
        {"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:status": {}}},
        {
            "manager": pinning.FIELD_MANAGER,
            "operation": "Apply",
            "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": template}},
        },
    ]
    new = copy.deepcopy(old)
    del new["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    decision = pinning.decide(3, 3, "", new, cms, live, served_configmaps(cms))
    assert decision.pinned
    container_path = "template.spec.containers[tritonserver]"
    assert sorted(decision.differences) == sorted(
        [
            "template.spec.securityContext.runAsUser (1000 -> absent)",
            f'{container_path}.env[EXTRA].name ("EXTRA" -> absent)',
            f'{container_path}.env[EXTRA].value ("1" -> absent)',
            f'{container_path}.volumeMounts[cache].mountPath ("/cache" -> absent)',
            f'{container_path}.volumeMounts[cache].name ("cache" -> absent)',
        ]
    )
    # the rendering as the earlier one: nothing dropped, whatever else the apply owns
    assert pinning.decide(
        3, 3, "", old, cms, as_served(old) | {"metadata": live["metadata"]}, served_configmaps(cms)
    ) == (pinning.Decision(False, ()))


def test_generated_configs_that_differ_are_named_and_missing_ones_end_the_pin() -> None:
    """Configs are named by their content: a rendering whose configs differ names ConfigMaps the pods do
    not mount, each a difference; the pinned pods' own ones must be there."""
    old, cms = rendered(OLD)
    doc = example("fanout")
    doc["metadata"] = {"name": "vision", "namespace": "ml"}
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    doc["spec"]["pipelines"][0]["fanOut"] = "shared"  # other generated configs
    tp = parse_pipeline(doc)
    kids = render_children(tp, compile_pipeline(tp), Settings(assembler_image=OLD))
    fresh, changed = pinning.record(kids.deployment, 3, ""), list(kids.configmaps)
    assert not {c["metadata"]["name"] for c in changed} & {c["metadata"]["name"] for c in cms}
    decision = pinning.decide(3, 3, "", fresh, changed, as_served(old), served_configmaps(cms))
    assert decision.pinned
    assert {f"the generated configs (ConfigMap {c['metadata']['name']})" for c in changed} <= set(
        decision.differences
    )
    # the pinned pods read ConfigMaps that are gone: they could not start again, so they take the new ones
    assert not pinning.decide(3, 3, "", old, changed, as_served(old), {}).pinned
    assert pinning.projected_configmaps(old["spec"]["template"]) == [cm["metadata"]["name"] for cm in cms]


def test_the_message_names_at_most_four_differences() -> None:
    assert pinning.describe(tuple("abcdef")) == "a, b, c, d and 2 more"
    assert pinning.describe(("a",)) == "a"


@pytest.mark.parametrize(
    ("status", "done"),
    [
        ({"observedGeneration": 5, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}, True),
        ({"observedGeneration": 4, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}, False),
        ({"observedGeneration": 5, "replicas": 3, "updatedReplicas": 2, "availableReplicas": 2}, False),
        ({"observedGeneration": 5, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}, False),
        ({"observedGeneration": 5, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 2}, False),
        ({}, False),
    ],
)
def test_a_rollout_is_done_when_every_replica_runs_the_new_template_and_no_old_pod_is_left(status, done):
    deployment = {"metadata": {"generation": 5}, "spec": {"replicas": 2}, "status": status}
    assert pinning.rollout_done(deployment) is done


@pytest.mark.parametrize(
    ("manager", "fields", "pinned"),
    [
        # kubectl set image / patch / edit: the pod's spec
        ("kubectl-set", {"f:spec": {"f:template": {"f:spec": {"f:containers": {}}}}}, False),
        ("kubectl-patch", {"f:spec": {"f:template": {"f:spec": {"f:nodeSelector": {}}}}}, False),
        # kubectl rollout restart: an annotation of the template's metadata
        ("kubectl-rollout", {"f:spec": {"f:template": {"f:metadata": {"f:annotations": {}}}}}, True),
        ("kube-controller-manager", {"f:spec": {"f:replicas": {}}}, True),  # the HPA, through scale
    ],
)
def test_a_template_edited_by_hand_is_restored_not_kept(manager: str, fields: dict, pinned: bool) -> None:
    """A hand edit of the live template looked like an earlier operator's rendering: the pin kept a
    tampered image (seen: `evil/triton:hacked` stayed, UpToDate said OperatorUpgraded)."""
    old, cms = rendered(OLD)
    new, new_cms = rendered(NEW)
    live = as_served(old)
    entry = {"manager": manager, "operation": "Update", "fieldsV1": fields}
    if manager == "kube-controller-manager":
        entry["subresource"] = "scale"
    live["metadata"]["managedFields"] = [entry]
    decision = pinning.decide(3, 3, "", new, new_cms, live, served_configmaps(cms))
    assert decision.pinned is pinned


def test_a_kept_template_leaves_the_admin_key_restart_to_its_own_field_manager() -> None:
    """The restart for a new admin key is applied under a field manager of its own; a kept template
    applied by the operator carried it too, so the operator co-owned it, and a later rendering listed
    it as a field the operator stops setting (a difference server-side apply would not make)."""
    from tritonpipeline.render.access import ADMIN_KEY_CREATED

    old, _ = rendered(OLD)
    new, _ = rendered(NEW)
    live = as_served(old)
    live["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {})[ADMIN_KEY_CREATED] = "t"
    kept = pinning.pinned_deployment(new, live)
    assert ADMIN_KEY_CREATED not in (kept["spec"]["template"]["metadata"].get("annotations") or {})
    assert kept["spec"]["template"]["spec"] == live["spec"]["template"]["spec"]


def _entry(manager: str, pod_spec: dict[str, Any], operation: str = "Update", **extra: Any) -> dict[str, Any]:
    fields = {"f:spec": {"f:template": {"f:spec": pod_spec}}}
    return {"manager": manager, "operation": operation, "fieldsV1": fields, **extra}


TRITON = 'k:{"name":"tritonserver"}'


def test_only_a_manager_owning_pod_spec_fields_the_operator_does_not_is_foreign() -> None:
    """What a server-side apply of the operator would leave behind: the fields another manager owns alone.
    A manager that co-owns the operator's fields (a server-side apply of the same image) leaves nothing."""
    ours = _entry(
        "tritonpipeline",
        {"f:containers": {TRITON: {".": {}, "f:name": {}, "f:image": {}}}},
        operation="Apply",
    )
    set_env = _entry(
        "kubectl-set",
        {"f:containers": {TRITON: {"f:env": {'k:{"name":"LD_PRELOAD"}': {".": {}, "f:value": {}}}}}},
    )
    same_image = _entry(
        "kubectl", {"f:containers": {TRITON: {".": {}, "f:name": {}, "f:image": {}}}}, operation="Apply"
    )
    scale = _entry("kube-controller-manager", {"f:containers": {}}, subresource="scale")
    restart = {
        "manager": "kubectl-rollout",
        "operation": "Update",
        "fieldsV1": {
            "f:spec": {
                "f:template": {"f:metadata": {"f:annotations": {"f:kubectl.kubernetes.io/restartedAt": {}}}}
            }
        },
    }

    def foreign(*entries: dict[str, Any]) -> list[str]:
        return pinning.foreign_pod_spec_fields(
            {"metadata": {"managedFields": list(entries)}}, "tritonpipeline"
        )

    whole_struct = _entry("flux", {"f:containers": {TRITON: {".": {}, "f:name": {}}}})  # over our fields
    whole_struct["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"][TRITON]["f:image"] = {}
    assert foreign(ours, whole_struct) == []
    assert foreign(ours, _entry("flux", {"f:containers": {}})) == []  # the list itself, whose items we own
    assert foreign(ours, set_env, same_image, scale, restart) == ["kubectl-set"]
    assert foreign(ours, same_image, scale, restart) == []
    assert foreign(same_image) == ["kubectl"]  # the operator owns nothing yet
