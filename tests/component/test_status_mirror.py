"""The Ready condition mirrors the Deployment as it is when written, not as an event (or an earlier read)
said: on the node a pod event's handler read the Deployment just before it said 1/1, wrote "0/1 ready"
after the Deployment event's handler had written "1/1 ready", and Ready stayed False until the resync.

Real kube-apiserver: the Deployment's status says 1/1 ready; its handler is given a stale event body."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from component.test_operator import patch_deployment_status
from harness.kubeapi import ensure_namespace, install_generated_crd
from harness.kubeconfig import kube_for
from tritonpipeline.render.meta import MANAGED_BY, PIPELINE_LABEL
from tritonpipeline.runtime.state import OperatorState
from tritonpipeline.settings import Settings

pytestmark = pytest.mark.apiserver

ROOT = Path(__file__).resolve().parents[2]
NS = "mirror"


def _state(kube: Any) -> OperatorState:
    return OperatorState(settings=Settings(), kube=kube)


def _deployment(cr: dict[str, Any]) -> dict[str, Any]:
    labels = {**MANAGED_BY, PIPELINE_LABEL: cr["metadata"]["name"]}
    owner = {"apiVersion": cr["apiVersion"], "kind": "TritonPipeline", "name": cr["metadata"]["name"]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": cr["metadata"]["name"],
            "namespace": NS,
            "labels": labels,
            "ownerReferences": [{**owner, "uid": cr["metadata"]["uid"], "controller": True}],
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "triton", "image": "tritonpipeline.local/none:1"}]},
            },
        },
    }


def test_a_stale_deployment_event_does_not_overwrite_ready(control_plane: Any) -> None:
    from tritonpipeline import handlers

    kube = kube_for(control_plane.kubeconfig)
    install_generated_crd(kube)
    ensure_namespace(kube, NS)
    doc = yaml.safe_load((ROOT / "examples" / "fanout.yaml").read_text())
    doc["metadata"]["namespace"] = NS
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    cr = kube.create(doc)
    stale = kube.create(_deployment(cr))  # as an event first showed it: no status yet
    generation = stale["metadata"]["generation"]
    ready = {"observedGeneration": generation, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}
    patch_deployment_status(kube, NS, stale["metadata"]["name"], {**ready, "availableReplicas": 1})

    asyncio.run(handlers.deployment_changed(body=kopf.Body(stale), type="MODIFIED", memo=_state(kube)))

    status = kube.get("serving.tritonpipeline.io/v1alpha1", "TritonPipeline", NS, "vision")["status"]
    assert status["readyReplicas"] == 1, status
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True", status
