"""The CRD upgrade steps of docs/how-to/upgrade.md, on a real kube-apiserver: pipelines stored under the
previous release's CRD (tests/upgrade/, installed the way helm installs a chart's crds/: a create under
helm's field manager) and reconciled by the previous release's operator (its source at PREVIOUS, from
git), then the current CRD applied with `kubectl apply --server-side --force-conflicts` (the same
request: a server-side apply under kubectl's field manager), then the current operator. The stored
pipelines must stay readable, valid under the new schema and be reconciled, their pods left as the
previous operator made them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.kubeapi import APPLY_PATCH, ensure_namespace, wait_established
from harness.operator_process import LocalOperator, OperatorProcess
from harness.wait import wait_for
from helpers import ROOT, condition
from tritonpipeline.kube.api_client import Kube, KubeError
from tritonpipeline.render.crd import crd
from tritonpipeline.spec import parse_pipeline

pytestmark = pytest.mark.apiserver

UPGRADE = Path(__file__).resolve().parents[1] / "upgrade"
API = "serving.tritonpipeline.io/v1alpha1"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
PREVIOUS = "18e91de"  # the release tests/upgrade/ was taken from (its files say so)


def _previous_operator(workdir: Path, kubeconfig: Path, namespace: str, log: Path) -> OperatorProcess:
    """The previous release's operator: its source at PREVIOUS (`git archive`), run with this venv."""
    if not (ROOT / ".git").exists():
        pytest.skip(f"the previous operator's source comes from git history ({PREVIOUS}); no .git here")
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"], check=False)
    if found.returncode != 0:
        pytest.skip(f"commit {PREVIOUS} (the previous release) is not in this clone's history (shallow?)")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS, "operator"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(workdir)], input=archive, check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONPIPELINE_")}
    env |= {"KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(workdir / "operator")}
    code = "import sys; from tritonpipeline.cli import main; sys.exit(main())"
    return OperatorProcess([sys.executable, "-c", code, "run", "-n", namespace], env, log)


def _previous_crd() -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((UPGRADE / "previous-crd.yaml").read_text()) if d]
    return dict(doc)


def _previous_pipelines(namespace: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((UPGRADE / "previous-pipelines.yaml").read_text()) if d]
    for d in docs:
        d["metadata"]["namespace"] = namespace
    return docs


def _kubectl_server_side_apply(kube: Kube, obj: dict[str, Any], force: bool) -> dict[str, Any]:
    """What `kubectl apply --server-side [--force-conflicts]` sends."""
    query = [("fieldManager", "kubectl"), *([("force", "true")] if force else [])]
    url = f"{CRD_PATH}/{obj['metadata']['name']}"
    return kube.request("PATCH", url, query=query, body=obj, content_type=APPLY_PATCH, retries=0)


def test_pipelines_stored_under_the_previous_crd_survive_the_documented_upgrade(
    control_plane: Any, tmp_path: Path
) -> None:
    from harness.controlplane import ControlPlane

    with ControlPlane(tmp_path / "cp", control_plane.binaries) as cp:
        kube = Kube(cp.api_client(), "test-admin")
        previous = _previous_crd()
        kube.request("POST", CRD_PATH, query=[("fieldManager", "helm")], body=previous)  # helm install
        wait_established(kube, previous["metadata"]["name"])
        ensure_namespace(kube, "ml")
        stored = _previous_pipelines("ml")
        for doc in stored:
            kube.apply(doc, field_manager="kubectl")
        previous_dir = tmp_path / "previous"
        previous_dir.mkdir()
        old = _previous_operator(previous_dir, cp.kubeconfig, "ml", tmp_path / "previous-operator.log")
        with old:
            for doc in stored:
                name = doc["metadata"]["name"]
                wait_for(f"{name} reconciled by the previous operator", lambda n=name: _valid(kube, n), 60)
        assert "Traceback" not in old.text(), old.text()[-3000:]
        # what the previous operator made: each pipeline's Deployment
        before = {d["metadata"]["name"]: _deployment(kube, d["metadata"]["name"]) for d in stored}

        current = crd()
        if current["spec"] != previous["spec"]:
            # without --force-conflicts, kubectl refuses to take the fields helm's create owns
            with pytest.raises(KubeError) as conflict:
                _kubectl_server_side_apply(kube, current, force=False)
            assert conflict.value.status == 409, conflict.value
        _kubectl_server_side_apply(kube, current, force=True)  # docs/how-to/upgrade.md's step
        wait_established(kube, current["metadata"]["name"])
        served = kube.get(
            "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, current["metadata"]["name"]
        )
        assert served is not None and served["spec"]["versions"] == current["spec"]["versions"]

        for doc in stored:
            name = doc["metadata"]["name"]
            obj = kube.get(API, "TritonPipeline", "ml", name)
            assert obj is not None, name
            # valid for this operator, and meaning what was written (the CRD adds its defaults)
            assert parse_pipeline(obj).spec == parse_pipeline(doc).spec, name
            kube.apply({**doc, "metadata": {"name": name, "namespace": "ml"}}, field_manager="kubectl")

        op = LocalOperator(cp.kubeconfig, "ml", tmp_path / "operator.log").start()
        try:
            for doc in stored:
                name = doc["metadata"]["name"]

                # reconciled by this operator: it says whether the pods run its rendering
                wait_for(f"{name} reconciled under the new CRD", lambda n=name: _up_to_date(kube, n), 60)
                after = _deployment(kube, name)
                # the pods stay as the previous operator made them: the same pod template, so the same
                # ReplicaSet and pods (the record annotations this operator adds bump the Deployment's
                # generation, as any annotation change does, but start no rollout)
                assert after["spec"]["template"] == before[name]["spec"]["template"], name
        except BaseException:
            print(f"\n===== operator log =====\n{op.text()[-6000:]}")
            raise
        finally:
            op.stop()


def _valid(kube: Kube, name: str) -> dict[str, Any] | None:
    obj = kube.get(API, "TritonPipeline", "ml", name) or {}
    valid = condition(obj, "SpecValid") if obj.get("status") else None
    return obj if valid and valid["status"] == "True" else None


def _up_to_date(kube: Kube, name: str) -> dict[str, Any] | None:
    obj = _valid(kube, name)
    return obj if obj and condition(obj, "UpToDate") else None


def _deployment(kube: Kube, name: str) -> dict[str, Any]:
    deployment = kube.get("apps/v1", "Deployment", "ml", name)
    assert deployment is not None, name
    return deployment
