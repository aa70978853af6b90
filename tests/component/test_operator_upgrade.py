"""Operator upgrades restart no Triton pod: the operator as a real subprocess against a real kube-apiserver,
"upgraded" by starting it again with another init image (what a new chart version changes in every pod
template). No kubelet or controller-manager: a Deployment's status is written as its controller would."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from component.test_operator import get_cr, patch_deployment_status, wait_reconciled
from harness.operator_process import LocalOperator
from harness.wait import wait_for
from helpers import cluster_doc, condition
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.router_choice import choose_router
from tritonpipeline.kube.api_client import Kube
from tritonpipeline.render import pinning
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline

pytestmark = pytest.mark.apiserver

OLD, NEW = "registry.example.com/tritonpipeline:0.1.0", "registry.example.com/tritonpipeline:0.2.0"
INIT_IMAGE_PATH = "template.spec.initContainers[assemble-repository].image"


def operator(control_plane: Any, namespace: str, log: Path, image: str, **env: str) -> LocalOperator:
    extra = {"TRITONPIPELINE_ASSEMBLER_IMAGE": image, "TRITONPIPELINE_RESYNC_SECONDS": "2", **env}
    return LocalOperator(control_plane.kubeconfig, namespace, log, env=extra).start()


def init_image(kube: Kube, namespace: str, name: str) -> str:
    deployment = kube.get("apps/v1", "Deployment", namespace, name)
    assert deployment is not None
    image: str = deployment["spec"]["template"]["spec"]["initContainers"][0]["image"]
    return image


def resyncs(op: LocalOperator) -> int:
    """Reconciles that changed nothing (no pod runs here, so they wait for pods)."""
    return len(re.findall(r"reconcile (unchanged|waiting) ", op.text()))


def up_to_date(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    return condition(get_cr(kube, namespace, name), pinning.UP_TO_DATE)


def wait_up_to_date(kube: Kube, namespace: str, name: str, status: str, reason: str) -> dict[str, Any]:
    def seen() -> dict[str, Any] | None:
        found = up_to_date(kube, namespace, name)
        return found if found and (found["status"], found["reason"]) == (status, reason) else None

    return wait_for(f"{namespace}/{name} {pinning.UP_TO_DATE}={status} ({reason})", seen)


def complete_rollout(kube: Kube, namespace: str, name: str) -> None:
    """The Deployment controller's report that every replica runs the current template."""
    deployment = kube.get("apps/v1", "Deployment", namespace, name)
    assert deployment is not None
    replicas = deployment["spec"]["replicas"]
    patch_deployment_status(
        kube,
        namespace,
        name,
        {
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": replicas,
            "updatedReplicas": replicas,
            "availableReplicas": replicas,
            "readyReplicas": replicas,
        },
    )


def test_an_upgrade_keeps_the_pods_until_the_spec_changes_or_a_roll_is_asked_for(
    control_plane, kube, namespace, tmp_path
) -> None:
    old = operator(control_plane, namespace, tmp_path / "old.log", OLD)
    try:
        doc = cluster_doc("vision", namespace)
        kube.apply(doc)
        wait_reconciled(kube, namespace, "vision")
        wait_up_to_date(kube, namespace, "vision", "True", pinning.CURRENT)
        before = kube.get("apps/v1", "Deployment", namespace, "vision")
        configmaps = kube.list("v1", "ConfigMap", namespace, "serving.tritonpipeline.io/pipeline=vision")
    finally:
        old.stop()
    new = operator(control_plane, namespace, tmp_path / "new.log", NEW)
    try:
        pinned = wait_up_to_date(kube, namespace, "vision", "False", pinning.OPERATOR_UPGRADED)
        assert f'{INIT_IMAGE_PATH} ("{OLD}" -> "{NEW}")' in pinned["message"]
        assert f"{pinning.ROLL_ANNOTATION}=" in pinned["message"]
        wait_for("a few resyncs", lambda: resyncs(new) >= 3)
        after = kube.get("apps/v1", "Deployment", namespace, "vision")
        # no rollout started: the same spec (its generation may count an annotation of the operator's:
        # Kubernetes counts a Deployment's annotations, which it copies to the ReplicaSet, not its pods)
        assert after["spec"] == before["spec"]
        same = kube.list("v1", "ConfigMap", namespace, "serving.tritonpipeline.io/pipeline=vision")
        assert [c["metadata"]["resourceVersion"] for c in same] == [
            c["metadata"]["resourceVersion"] for c in configmaps
        ]
        # the admin asks for this pipeline: its pods get the new rendering
        kube.apply(
            {
                **{k: doc[k] for k in ("apiVersion", "kind")},
                "metadata": {**doc["metadata"], "annotations": {pinning.ROLL_ANNOTATION: "1"}},
            },
            field_manager="admin",
        )
        wait_for("the new init image", lambda: init_image(kube, namespace, "vision") == NEW)
        wait_up_to_date(kube, namespace, "vision", "True", pinning.CURRENT)
        # a spec change after another upgrade rolls as it always did
    finally:
        new.stop()
    newer = operator(control_plane, namespace, tmp_path / "newer.log", OLD)
    try:
        wait_up_to_date(kube, namespace, "vision", "False", pinning.OPERATOR_UPGRADED)
        assert init_image(kube, namespace, "vision") == NEW
        doc["spec"]["server"]["replicas"] = 2
        kube.apply(doc)
        wait_for("the spec change's rendering", lambda: init_image(kube, namespace, "vision") == OLD)
        wait_up_to_date(kube, namespace, "vision", "True", pinning.CURRENT)
    finally:
        newer.stop()


def test_roll_outdated_rolls_one_pipeline_at_a_time_each_until_its_rollout_completes(
    control_plane, kube, namespace, tmp_path
) -> None:
    names = ["p1", "p2", "p3"]
    old = operator(control_plane, namespace, tmp_path / "old.log", OLD)
    try:
        for name in names:
            kube.apply(cluster_doc(name, namespace))
        for name in names:
            wait_reconciled(kube, namespace, name)
            wait_up_to_date(kube, namespace, name, "True", pinning.CURRENT)
            complete_rollout(kube, namespace, name)  # their pods run: the new operator's first events say so
    finally:
        old.stop()
    new = operator(control_plane, namespace, tmp_path / "new.log", NEW, TRITONPIPELINE_ROLL_OUTDATED="1")
    try:
        done: list[str] = []
        while len(done) < len(names):
            rolling = wait_for(
                "one more pipeline rolling",
                lambda: [n for n in names if n not in done and init_image(kube, namespace, n) == NEW] or None,
            )
            assert len(rolling) == 1, f"{rolling} roll at once"  # never more than rollOutdated
            waiting = [n for n in names if n not in done and n not in rolling]
            for name in waiting:
                wait_up_to_date(kube, namespace, name, "False", pinning.ROLL_QUEUED)
            seen = resyncs(new)
            wait_for(
                "two more resyncs of every pipeline",
                lambda seen=seen: resyncs(new) >= seen + 2 * len(names),
            )
            assert all(init_image(kube, namespace, n) == OLD for n in waiting)  # still waiting their turn
            (name,) = rolling
            complete_rollout(kube, namespace, name)
            done.append(name)
        for name in names:
            wait_up_to_date(kube, namespace, name, "True", pinning.CURRENT)
    finally:
        new.stop()


def test_an_upgrade_whose_rendering_only_drops_fields_keeps_the_pods_too(
    control_plane, kube, namespace, tmp_path
) -> None:
    """A new rendering may drop a field the earlier one set (here the pods' user and group ids, which an
    operator that leaves them to the platform no longer writes). The live template still holds it, and
    server-side apply would remove it, rolling the pods: it counts as a difference (read from the fields
    the operator's apply owns, as the live template also holds the API server's defaults), and the pods
    keep their template until a roll is asked for."""
    ids = "template.spec.securityContext.runAsUser (1000 -> absent)"
    old = operator(control_plane, namespace, tmp_path / "old.log", OLD)
    try:
        kube.apply(cluster_doc("vision", namespace))
        wait_reconciled(kube, namespace, "vision")
        wait_up_to_date(kube, namespace, "vision", "True", pinning.CURRENT)
        before = kube.get("apps/v1", "Deployment", namespace, "vision")
    finally:
        old.stop()
    new = operator(
        control_plane, namespace, tmp_path / "new.log", OLD, TRITONPIPELINE_ADAPT_SECURITY_CONTEXT="force"
    )
    try:
        pinned = wait_up_to_date(kube, namespace, "vision", "False", pinning.OPERATOR_UPGRADED)
        assert ids in pinned["message"], pinned["message"]
        wait_for("a few resyncs", lambda: resyncs(new) >= 3)
        after = kube.get("apps/v1", "Deployment", namespace, "vision")
        # no rollout started: the same spec (its generation may count an annotation of the operator's:
        # Kubernetes counts a Deployment's annotations, which it copies to the ReplicaSet, not its pods)
        assert after["spec"] == before["spec"]
    finally:
        new.stop()


@pytest.mark.parametrize("source", ["fanout", "streaming", "diamond"])
def test_a_reconciled_pipeline_reads_no_difference_through_resyncs(
    control_plane, kube, namespace, tmp_path, source
) -> None:
    """The fields the operator's apply owns, as the real API server records them (its key fields of list
    items, the defaults it adds), hold no difference from the rendering they came from: a pipeline stays
    `Current` through resyncs, and the rule finds nothing dropped."""
    op = operator(control_plane, namespace, tmp_path / "op.log", OLD)
    try:
        doc = cluster_doc(source, namespace, source)
        kube.apply(doc)
        wait_reconciled(kube, namespace, source)
        wait_up_to_date(kube, namespace, source, "True", pinning.CURRENT)
        wait_for("a few resyncs", lambda: resyncs(op) >= 3)
        assert (up_to_date(kube, namespace, source) or {}).get("reason") == pinning.CURRENT
        live = kube.get("apps/v1", "Deployment", namespace, source)
        assert live is not None
        owned = pinning.owned_paths(live, ("spec", "template"))
        assert len(owned) > 20  # the apply's fields were read
        tp = parse_pipeline(doc)
        settings = Settings(assembler_image=OLD)
        artifacts = compile_pipeline(tp, router=choose_router(tp, settings.router))  # as the operator does
        rendered = render_children(tp, artifacts, settings).deployment
        template = rendered["spec"]["template"]
        assert pinning.template_differences(template, live["spec"]["template"], owned) == []
    finally:
        op.stop()
