"""The validating webhook as a user gets it from `helm install`: served by the operator pod, reached by
the API server through the webhook Service (kube-proxy) with the certificate the operator made. A cyclic
pipeline applied with kubectl is refused with its field path and never stored."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from node_cluster import NAMESPACE, Cluster, namespace
from support.webhook import cyclic

pytestmark = [pytest.mark.node, pytest.mark.anycluster, pytest.mark.timeout(600)]

CYCLE = "spec.pipelines[0].steps[1].inputs: cycle in pipeline"


def _apply(cluster: Cluster, doc: dict[str, Any], *flags: str) -> str:
    """kubectl apply's error text, or '' when the apply was accepted."""
    try:
        cluster.kubectl("apply", *flags, "-f", "-", input=json.dumps(doc))
    except Exception as err:  # the Cluster's kubectl error: its message carries kubectl's stderr
        return str(err)
    return ""


def test_kubectl_apply_of_a_cyclic_pipeline_is_refused_by_the_operator_pod(
    cluster: Cluster, chart_operator: dict[str, Any]
) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(namespace(NAMESPACE)))
    doc = cyclic("cyclic", NAMESPACE)
    # the operator registers its certificate in the ValidatingWebhookConfiguration as it starts; with
    # the default failurePolicy Ignore an apply before that is let through, so ask with dry runs first
    deadline, error = time.monotonic() + 60, ""
    while time.monotonic() < deadline and "denied the request" not in error:
        error = _apply(cluster, doc, "--dry-run=server")
        time.sleep(1)
    assert "denied the request" in error and CYCLE in error, error
    error = _apply(cluster, doc)
    assert "denied the request" in error and CYCLE in error, error
    stored = cluster.kubectl("get", "tritonpipelines", "-n", NAMESPACE, "-o", "name")
    assert "tritonpipeline.serving.tritonpipeline.io/cyclic" not in stored
