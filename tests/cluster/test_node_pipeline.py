"""The whole flow on real pods, as a user runs it: `helm install` of charts/triton-pipeline with the
operator image built from the repository's Dockerfile, the operator as a pod under the chart's
ServiceAccount and RBAC, then a pipeline from a PVC served by Triton pods (CPU Triton image) and
answered through its Service's ClusterIP.

Written against a `Cluster` (kubectl and helm with a kubeconfig, a client inside the cluster network,
images made available, a host directory for the models PV): the kind cluster of `make e2e` provides one;
the kind + GPU path can provide another and run the same scenarios. Marker `node`: `make e2e`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import Any

import pytest

from node_cluster import (
    NAMESPACE,
    RELEASE,
    RELEASE_NS,
    ROOT,
    Cluster,
    condition,
    diagnostics,
    fanout,
    infer,
    models_claim,
    pod_ready,
    wait,
)
from tritonpipeline.render.meta import PIPELINE_LABEL

pytestmark = [pytest.mark.node, pytest.mark.anycluster, pytest.mark.timeout(1200)]


def test_operator_runs_as_a_pod_under_the_charts_service_account(
    cluster: Cluster, chart_operator: dict[str, Any]
) -> None:
    from e2e.images import chart_image

    spec = chart_operator["spec"]
    assert spec["serviceAccountName"] == f"{RELEASE}-triton-pipeline"
    (container,) = spec["containers"]
    assert container["image"] == chart_image() == cluster.images["operator"].name
    statuses = {s["name"]: s for s in chart_operator["status"]["containerStatuses"]}
    assert statuses[container["name"]]["ready"] is True
    # the operator works with the chart's RBAC only: the token it runs with is its ServiceAccount's
    lines = cluster.kubectl("logs", "-n", RELEASE_NS, chart_operator["metadata"]["name"]).splitlines()
    registered = [i for i, line in enumerate(lines) if "registered in ValidatingWebhookConfiguration" in line]
    assert registered, "\n".join(lines[-40:])
    # a refused call: the operator's "HTTP 403: ..." or the client's "(403)" (not a timestamp's .403Z). Right
    # after `helm install` the chart's new bindings may not have reached the apiserver's authorizer yet: a
    # refusal the operator retried ("; retrying in") before its webhook was registered is that, not RBAC
    refused = [
        line
        for i, line in enumerate(lines)
        if ("Forbidden" in line or re.search(r"HTTP 403\b|\(403\)", line))
        and not (i < registered[0] and "; retrying in" in line)
    ]
    assert not refused, refused


def test_fanout_from_a_pvc_is_served_through_the_cluster_ip(
    cluster: Cluster, chart_operator: dict[str, Any]
) -> None:
    doc = fanout(cluster, models_claim(cluster))
    name = doc["metadata"]["name"]
    t = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))

    def ready() -> bool:
        return condition(cluster, name, "Ready").get("status") == "True"

    wait("TritonPipeline Ready", ready, 240, lambda: diagnostics(cluster, NAMESPACE))
    print(f">> kubectl apply -> TritonPipeline Ready: {time.monotonic() - t:.1f}s")
    pods = json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]
    assert pods and all(
        {c["type"]: c["status"] for c in p["status"]["conditions"]}["Ready"] == "True" for p in pods
    ), diagnostics(cluster, NAMESPACE)
    service = json.loads(cluster.kubectl("get", "service", name, "-n", NAMESPACE, "-o", "json"))
    ip = service["spec"]["clusterIP"]
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")

    def answered() -> subprocess.CompletedProcess[str] | None:
        proc = cluster.run(
            [sys.executable, str(ROOT / "e2e" / "infer.py"), "--url", f"{ip}:{port}", "vision"]
        )
        return proc if proc.returncode == 0 else None

    proc = wait("inference through the ClusterIP", answered, 60, lambda: diagnostics(cluster, NAMESPACE))
    print(f">> first correct answer via ClusterIP {ip}:{port}: {time.monotonic() - t:.1f}s after apply")
    print(proc.stdout)
    assert "PASS vision: FEATURES=2x+1, SCORE_B=3(2x+1)-2" in proc.stdout


def test_missing_model_directory_is_reported_in_the_status(
    cluster: Cluster, chart_operator: dict[str, Any]
) -> None:
    """The init container assembles the repository inside the pod; a model the PVC lacks fails it, and
    the pipeline's Ready condition says which (not only the pod log)."""
    doc = fanout(cluster, models_claim(cluster), name="broken")
    doc["spec"]["models"][1]["name"] = "head_missing"
    doc["spec"]["pipelines"][0]["steps"][1] = {
        "name": "head_b",
        "model": "head_missing",
        "inputs": {"FEATS_IN_B": "extract.FEATS_A"},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))

    def reported() -> dict[str, Any] | None:
        ready = condition(cluster, "broken", "Ready")
        return ready if ready.get("reason") == "InitContainerFailed" else None

    ready = wait("Ready=False InitContainerFailed", reported, 120, lambda: diagnostics(cluster, NAMESPACE))
    assert ready["status"] == "False"
    assert "init container assemble-repository failed" in ready["message"]
    assert "model directory 'head_missing' not found" in ready["message"], ready
    # the pipeline next to it is not disturbed
    assert condition(cluster, "vision", "Ready").get("status") == "True"


def test_killed_triton_pod_is_replaced_and_the_service_recovers(
    cluster: Cluster, chart_operator: dict[str, Any]
) -> None:
    selector = f"{PIPELINE_LABEL}=vision"
    (old,) = json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json"))[
        "items"
    ]
    cluster.kubectl("delete", "pod", "-n", NAMESPACE, old["metadata"]["name"], "--grace-period=0", "--force")

    def replaced() -> bool:
        pods = json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json"))[
            "items"
        ]
        # the new pod itself Ready and the killed one gone (a force delete removes the object at once,
        # while its container may still answer for a while), not only the CR's Ready, which can still
        # be the one from before the kill
        fresh = [p for p in pods if p["metadata"]["uid"] != old["metadata"]["uid"]]
        return (
            len(fresh) == len(pods) == 1
            and pod_ready(fresh[0])
            and condition(cluster, "vision", "Ready").get("status") == "True"
        )

    wait("a new Ready pod for vision", replaced, 120, lambda: diagnostics(cluster, NAMESPACE))
    proc = wait(
        "inference after the replacement", lambda: (p := infer(cluster, "vision")).returncode == 0 and p, 60
    )
    assert "PASS vision" in proc.stdout
    # recovered: every following request answers
    for _ in range(5):
        assert infer(cluster, "vision").returncode == 0


def test_deleting_the_pipeline_lets_the_garbage_collector_remove_every_child(
    cluster: Cluster, chart_operator: dict[str, Any]
) -> None:
    selector = f"{PIPELINE_LABEL}=broken"
    kinds = "deployments,replicasets,pods,services,configmaps"
    assert cluster.kubectl("get", kinds, "-n", NAMESPACE, "-l", selector, "-o", "name").split()
    cluster.kubectl("get", "secret", "broken-admin-key", "-n", NAMESPACE)
    cluster.kubectl("delete", "tritonpipeline", "broken", "-n", NAMESPACE, "--wait=false")

    def gone() -> bool:
        left = cluster.kubectl("get", kinds, "-n", NAMESPACE, "-l", selector, "-o", "name").split()
        secret = cluster.kubectl("get", "secret", "broken-admin-key", "-n", NAMESPACE, check=False)
        return not left and not secret

    wait("every child of the deleted pipeline removed", gone, 90, lambda: diagnostics(cluster, NAMESPACE))
    assert condition(cluster, "vision", "Ready").get("status") == "True"  # the other pipeline untouched
