"""Real pods on the single-node test bed (e2e/node.py): a Deployment behind a ClusterIP Service.

Everything runs inside a network namespace the harness creates: etcd, kube-apiserver (ServiceAccount
admission on), kube-controller-manager, kube-scheduler, containerd 2 + runc, kubelet and kube-proxy
(iptables). The images are OCI archives packed by e2e/node.py from static Go programs (no registry).
Marker `node`; the session's node comes from tests/node_cluster.py. Skips with the reason when not root
or without `ip netns`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from node_cluster import fresh_netns_run_dir, host_state

pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

APP = "hello"
REPLICAS = 2


@pytest.mark.fresh_host
def test_a_fresh_host_is_left_exactly_as_found(host_before: dict[str, Any], tmp_path: Path) -> None:
    """On a fresh machine the bed's `ip netns add` is the host's first: it creates /run/netns and mounts it
    onto itself. A node started and stopped there leaves the same host snapshot as before, that mount and
    directory gone too (only what the run made: the other node tests see a host where they exist)."""
    from e2e.node import NETNS_RUN_DIR, Node, netns_run_dir_state

    with fresh_netns_run_dir():
        before = host_state()
        assert before["netns_run_dir"] == {"exists": False, "mounted": False}
        node = Node(tmp_path / "node")
        node.start()
        try:
            # else this test would not be on the path it is about
            assert netns_run_dir_state() == {"exists": True, "mounted": True}, "`ip netns add` made no mount"
        finally:
            restored = node.stop().get("restored", [])
        after = host_state()
    changed = {key: (before[key], after[key]) for key in before if after[key] != before[key]}
    assert not changed, f"the host was not restored: {changed}"
    assert f"unmounted {NETNS_RUN_DIR}" in restored and f"removed {NETNS_RUN_DIR}" in restored, restored


def _manifests(image: str) -> str:
    labels = {"app": APP}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": "default"},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": APP,
                            "image": image,
                            "imagePullPolicy": "Never",  # imported, never pulled: no registry here
                            "ports": [{"containerPort": 8080}],
                            "readinessProbe": {
                                "httpGet": {"path": "/", "port": 8080},
                                "periodSeconds": 1,
                            },
                        }
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": APP, "namespace": "default"},
        "spec": {"type": "ClusterIP", "selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [deployment, service]})


def test_deployment_pods_run_and_answer_through_cluster_ip(node: Any) -> None:
    from e2e.node import HELLO_IMAGE, NODE_NAME

    node.kubectl("apply", "-f", "-", input=_manifests(HELLO_IMAGE))
    node.kubectl("rollout", "status", f"deployment/{APP}", "--timeout=120s")
    pods = json.loads(node.kubectl("get", "pods", "-l", f"app={APP}", "-o", "json"))["items"]
    assert len(pods) == REPLICAS
    names = set()
    for pod in pods:
        ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert pod["status"]["phase"] == "Running", pod["status"]
        assert ready["Ready"] == "True", pod["status"]
        assert pod["spec"]["nodeName"] == NODE_NAME
        # ServiceAccount admission on: the pod got the projected API token volume
        assert any(v["name"].startswith("kube-api-access-") for v in pod["spec"]["volumes"])
        names.add(pod["metadata"]["name"])

    cluster_ip = node.kubectl("get", "service", APP, "-o", "jsonpath={.spec.clusterIP}").strip()
    assert cluster_ip.startswith("10.96.")
    # kube-proxy balances over both endpoints: each pod answers with its own name. kube-proxy programs
    # the endpoints a moment after the rollout finished (until then it rejects: "has no endpoints"),
    # so ask for up to 30 s; only the pods may ever answer.
    expected = {f"hello from {name}" for name in names}
    answers: set[str] = set()
    errors: list[str] = []
    deadline = time.monotonic() + 30
    while answers != expected and time.monotonic() < deadline:
        try:
            answers.add(node.fetch(f"http://{cluster_ip}/").strip())
        except OSError as err:
            errors.append(str(err))
        assert answers <= expected, answers
        time.sleep(0.05)
    assert answers == expected, f"answers {answers}; errors {errors[-3:]}"


def test_pod_reaches_the_apiserver_with_its_service_account_token(node: Any) -> None:
    """In-cluster client path: the `kubernetes` Service (kube-proxy to the advertised node address), the
    token kube-apiserver signed for the pod, the CA kube-controller-manager published. Also `kubectl exec`
    (kube-apiserver to the kubelet with its client certificate)."""
    node.kubectl("rollout", "status", f"deployment/{APP}", "--timeout=120s")
    exec_ = ("exec", f"deployment/{APP}", "--", "/bin/hello", "apiserver")
    status, _, body = node.kubectl(*exec_, "/api").partition("\n")
    assert status == "200", body
    assert json.loads(body)["kind"] == "APIVersions"
    # the default ServiceAccount has no rights: the apiserver names the identity it authenticated
    status, _, body = node.kubectl(*exec_, "/api/v1/namespaces/kube-system/secrets").partition("\n")
    assert status == "403", body
    assert 'User "system:serviceaccount:default:default" cannot list' in json.loads(body)["message"]
