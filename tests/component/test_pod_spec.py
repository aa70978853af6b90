"""The Triton pods as real clusters want them: Pod Security "restricted", requests, pull secrets, a
service account, the startup budget, and MIG limits (renderers pure; admission on the real apiserver).
Here the tests on real components; the pure ones are in tests/unit/test_pod_spec.py."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest

from support.pod_spec import cluster_doc, pod_spec
from tritonpipeline.kube.api_client import Kube, KubeError
from tritonpipeline.settings import Settings


@pytest.mark.apiserver
def test_pods_are_admitted_by_pod_security_restricted(kube: Kube) -> None:
    """On the real apiserver: a namespace enforcing Pod Security "restricted" admits a Pod made from the
    Deployment's template, and refuses the same Pod without the security contexts (what the operator
    rendered before), so the check is real."""
    ns = f"restricted-{uuid.uuid4().hex[:6]}"
    label = {"pod-security.kubernetes.io/enforce": "restricted"}
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": label}})
    doc = cluster_doc()
    doc["metadata"]["namespace"] = ns
    spec = pod_spec(doc)

    def pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}

    created = kube.apply(pod("triton", spec))
    assert created["metadata"]["name"] == "triton"
    # a user's securityContext merged over the defaults stays admitted
    doc["spec"]["server"]["podSecurityContext"] = {"runAsUser": 2000, "fsGroup": 2000}
    doc["spec"]["server"]["securityContext"] = {"readOnlyRootFilesystem": True}
    assert kube.apply(pod("merged", pod_spec(doc)))["metadata"]["name"] == "merged"
    # and with no ids, as on OpenShift (the kubelet then checks that the image's user is not root)
    platform = pod_spec(cluster_doc(), Settings(adapt_security_context="force"))
    assert kube.apply(pod("platform", platform))["metadata"]["name"] == "platform"
    bare = copy.deepcopy(spec)
    bare.pop("securityContext")
    for c in [*bare["initContainers"], *bare["containers"]]:
        c.pop("securityContext")
    with pytest.raises(KubeError, match="violates PodSecurity"):
        kube.apply(pod("bare", bare))
