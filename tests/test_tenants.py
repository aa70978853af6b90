"""Safe for many tenants (issue 54), as a tenant who may create TritonPipelines in its own namespace would
try it, on a real kube-apiserver with the operator run as `tritonpipeline run`: one tenant's pipeline
cannot stop the operator for the others."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from harness.kubeapi import CRD_NAME, ensure_namespace, wait_established
from harness.operator_process import LocalOperator
from harness.wait import wait_for
from helpers import condition
from test_crd_upgrade import CRD_PATH
from test_webhook import call, cluster_doc, collection, start_webhook_operator
from tritonpipeline import jsontext
from tritonpipeline.kube.client import Kube
from tritonpipeline.kube.crd import crd
from tritonpipeline.spec.document import NESTED_TOO_DEEP

API = "serving.tritonpipeline.io/v1alpha1"
KIND = "TritonPipeline"
TEAM_A, TEAM_B = "team-a", "team-b"
LEVELS = 1500  # issue 54's affinity: Python's decoder gives up at about 1,000


def permissive_crd() -> dict[str, Any]:
    """This tree's CRD with `server.affinity` keeping any content, as the releases before issue 54 had
    it: still installed where `helm upgrade` left the old CRD (helm never upgrades crds/), or during the
    upgrade's skew window."""
    old = crd()
    spec = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["server"]["properties"]["affinity"] = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    return old


def poisoned(name: str, namespace: str) -> str:
    """A pipeline whose affinity nests LEVELS mappings, as JSON text (Python cannot encode it)."""
    doc = cluster_doc("fanout", name, namespace)
    doc["spec"]["server"]["affinity"] = {"a": "<deep>"}
    return json.dumps(doc).replace('"<deep>"', '{"a":' * LEVELS + "1" + "}" * LEVELS)


@contextmanager
def old_crd_cluster(binaries: Any, workdir: Path) -> Iterator[tuple[Any, Kube]]:
    """A private kube-apiserver + etcd with permissive_crd() and the namespaces of two tenants; team-a
    has stored the poisoned pipeline `deep`."""
    from harness.controlplane import ControlPlane

    with ControlPlane(workdir / "cp", binaries) as cp:
        kube = Kube(cp.api_client(), "test-admin")
        kube.request("POST", CRD_PATH, body=permissive_crd())
        wait_established(kube, CRD_NAME)
        for ns in (TEAM_A, TEAM_B):
            ensure_namespace(kube, ns)
        url = f"/apis/{API}/namespaces/{TEAM_A}/tritonpipelines"
        # YAML is what the client passes on as written (and JSON is YAML)
        kube.request("POST", url, body=poisoned("deep", TEAM_A), content_type="application/yaml")
        yield cp, kube


def reconciled(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The pipeline once the operator applied its children and said SpecValid."""
    obj = kube.get(API, KIND, namespace, name) or {}
    valid = condition(obj, "SpecValid") or {}
    deployment = kube.get("apps/v1", "Deployment", namespace, name)
    return obj if valid.get("status") == "True" and deployment is not None else None


def refused_as_too_deep(kube: Kube) -> dict[str, Any] | None:
    obj = kube.get(API, KIND, TEAM_A, "deep") or {}
    valid = condition(obj, "SpecValid") or {}
    return valid if valid.get("status") == "False" else None


@pytest.mark.apiserver
def test_a_pipeline_nested_too_deep_to_decode_stops_nobody(control_plane: Any, tmp_path: Path) -> None:
    """Issue 54: team-a's pipeline with an affinity 1,500 levels deep (stored under a CRD that keeps any
    affinity) ended kopf's watch with RecursionError; team-b's pipeline created afterwards was never
    reconciled, and a restarted operator failed again on its first list. Now the operator reads it only
    down to jsontext.MAX_DEPTH: team-a's pipeline is reported invalid (naming the field), nothing of it
    is applied, and every other pipeline is reconciled, before and after a restart."""
    with old_crd_cluster(control_plane.binaries, tmp_path) as (cp, kube):
        ops: list[LocalOperator] = []
        try:
            for round, name in enumerate(("first", "after-restart")):
                if ops:
                    ops[-1].stop()
                log = tmp_path / f"operator-{round}.log"
                ops.append(LocalOperator(cp.kubeconfig, TEAM_A, log, args=["-n", TEAM_B]).start())
                kube.apply(cluster_doc("fanout", name, TEAM_B))
                wait_for(f"team-b's {name} reconciled", lambda n=name: reconciled(kube, TEAM_B, n), 60)
                valid = wait_for("team-a's pipeline reported", lambda: refused_as_too_deep(kube), 30)
                assert NESTED_TOO_DEEP in valid["message"], valid
                assert "spec.server.affinity.a.a" in valid["message"], valid
                assert kube.get("apps/v1", "Deployment", TEAM_A, "deep") is None
                assert ops[-1].proc is not None and ops[-1].proc.poll() is None, ops[-1].text()[-3000:]
                assert "RecursionError" not in ops[-1].text(), ops[-1].text()[-3000:]
            stored = kube.get(API, KIND, TEAM_A, "deep")
            assert stored is not None
            # the client reads the stored object as the operator does: no deeper than MAX_DEPTH
            cut = [at[:4] for at in jsontext.cut_paths(stored) if at[0] == "spec"]
            assert cut == [("spec", "server", "affinity", "a")], cut
        finally:
            for op in ops:
                op.stop()


@pytest.mark.apiserver
def test_the_webhook_answers_a_pipeline_too_deep_to_decode_with_a_verdict(
    control_plane: Any, tmp_path: Path
) -> None:
    """Issue 54: the webhook answered such a pipeline 500 (its review could not be decoded), which
    failurePolicy Ignore turned into a stored object. Now it reads the review down to jsontext.MAX_DEPTH
    and denies the pipeline, naming the field; a valid pipeline is still admitted."""
    with old_crd_cluster(control_plane.binaries, tmp_path) as (cp, kube):
        log = tmp_path / "operator.log"
        op = start_webhook_operator(cp.kubeconfig, kube, TEAM_A, log, "tp-webhook-tenants", "Ignore")
        try:
            query = (("dryRun", "All"),)
            body = poisoned("deeper", TEAM_A)
            status, answer, _ = call(kube, "POST", collection(TEAM_A), body, query, "application/yaml")
            assert status == 422, answer
            assert "admission webhook" in answer["message"] and "denied the request" in answer["message"]
            assert "spec.server.affinity.a.a" in answer["message"] and NESTED_TOO_DEEP in answer["message"]
            assert kube.get(API, KIND, TEAM_A, "deeper") is None
            status, answer, _ = call(kube, "POST", collection(TEAM_A), cluster_doc("fanout", "ok", TEAM_A))
            assert status == 201, answer
            assert "RecursionError" not in op.text(), op.text()[-3000:]
        finally:
            op.stop()
