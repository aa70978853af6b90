"""The whole flow on real pods, as a user runs it: `helm install` of charts/triton-pipeline with the
operator image built from the repository's Dockerfile, the operator as a pod under the chart's
ServiceAccount and RBAC, then a pipeline from a PVC served by Triton pods (CPU Triton image) and
answered through its Service's ClusterIP.

Written against a `Cluster` (kubectl and helm with a kubeconfig, a client inside the cluster network,
images made available, a host directory for the models PV): the node test bed (e2e/node.py) provides one
here; the kind + GPU path can provide another and run the same scenarios. Marker `node`: `make e2e-node`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tritonpipeline.kube.meta import PIPELINE_LABEL

pytestmark = [pytest.mark.node, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[1]
RELEASE, RELEASE_NS = "tp", "triton-system"
NAMESPACE = "pipelines"
CLAIM = "models"
# both namespaces enforce Pod Security "restricted": the chart's and the operator's pods must pass it
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": RESTRICTED}}


HOST_BEFORE: dict[str, Any] = {}


def _host_state() -> dict[str, Any]:
    from e2e.images import BUILDAH_HOST_DIRS
    from e2e.node import host_snapshot

    return {**host_snapshot(), "buildah": {d: Path(d).exists() for d in BUILDAH_HOST_DIRS}}


class NodeCluster:
    """The node test bed as a `Cluster`: everything runs inside its network namespace."""

    def __init__(self, node: Any, images: dict[str, Any]) -> None:
        self.node = node
        self.images = images
        self.kubeconfig = node.kubeconfig
        self.models_dir = node.workdir / "models"  # the hostPath PV's directory (kubelet runs on this host)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return self.node.kubectl(*args, input=input, check=check)

    def run(self, cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """A command inside the cluster network (a client on the node)."""
        from e2e.node import in_netns

        with in_netns(self.node.netns):
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    from e2e.images import ImageError, all_images
    from e2e.node import Node, missing_prerequisite, reap_stale

    reason = missing_prerequisite()
    if reason:
        pytest.skip(f"no node test bed: {reason}")
    reap_stale()
    global HOST_BEFORE
    HOST_BEFORE = _host_state()  # before the image build as well: buildah must leave nothing either
    try:
        images = all_images()
    except ImageError as err:
        pytest.skip(f"images cannot be built here: {err}")
    node = Node(tmp_path_factory.mktemp("node"))
    node.start()
    try:
        for image in images.values():
            t = time.monotonic()
            node.ctr("images", "import", str(image.archive))
            print(f">> imported {image.name} ({image.size_mb:.0f} MB archive) in {time.monotonic() - t:.1f}s")
        yield NodeCluster(node, images)
    finally:
        node.stop()


def _wait(what: str, check: Any, timeout: float, on_fail: Any = None) -> Any:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(1)
    detail = on_fail() if on_fail else ""
    raise AssertionError(f"{what}: not within {timeout:.0f}s\n{detail}")


def _diagnostics(cluster: NodeCluster, namespace: str) -> str:
    parts = [cluster.kubectl("get", "pods,events", "-n", namespace, "-o", "wide", check=False)]
    for pod in json.loads(
        cluster.kubectl("get", "pods", "-n", namespace, "-o", "json", check=False) or "{}"
    ).get("items", []):
        name = pod["metadata"]["name"]
        for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
            logs = cluster.kubectl("logs", "-n", namespace, name, "-c", c["name"], "--tail=30", check=False)
            parts.append(f"--- {name}/{c['name']}\n{logs}")
        parts.append(json.dumps(pod.get("status", {}), indent=1)[-3000:])
    return "\n".join(parts)


@pytest.fixture(scope="module")
def operator(cluster: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`helm install` of the chart as a user does: defaults, the locally built image under its name."""
    from e2e.node import in_netns
    from harness.gotools import ensure_tool
    from harness.helm import Helm

    t = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(_namespace(RELEASE_NS)))
    helm = Helm(ensure_tool("helm"), home=tmp_path_factory.mktemp("helm"), kubeconfig=cluster.kubeconfig)
    with in_netns(cluster.node.netns):
        helm.run(
            "install",
            RELEASE,
            str(ROOT / "charts" / "triton-pipeline"),
            "-n",
            RELEASE_NS,
            "--create-namespace",
        )
    deployment = f"deployment/{RELEASE}-triton-pipeline"
    cluster.kubectl("get", deployment, "-n", RELEASE_NS)
    proc = cluster.kubectl("rollout", "status", deployment, "-n", RELEASE_NS, "--timeout=180s", check=False)
    assert "successfully rolled out" in proc, _diagnostics(cluster, RELEASE_NS)
    print(f">> helm install -> operator pod Ready: {time.monotonic() - t:.1f}s")
    (pod,) = json.loads(cluster.kubectl("get", "pods", "-n", RELEASE_NS, "-o", "json"))["items"]
    return pod


def test_operator_runs_as_a_pod_under_the_charts_service_account(
    cluster: NodeCluster, operator: dict[str, Any]
) -> None:
    from e2e.images import chart_image

    spec = operator["spec"]
    assert spec["serviceAccountName"] == f"{RELEASE}-triton-pipeline"
    (container,) = spec["containers"]
    assert container["image"] == chart_image() == cluster.images["operator"].name
    statuses = {s["name"]: s for s in operator["status"]["containerStatuses"]}
    assert statuses[container["name"]]["ready"] is True
    # the operator works with the chart's RBAC only: the token it runs with is its ServiceAccount's
    logs = cluster.kubectl("logs", "-n", RELEASE_NS, operator["metadata"]["name"])
    assert "Forbidden" not in logs and "403" not in logs, logs[-3000:]


def _models_claim(cluster: NodeCluster) -> str:
    """A hostPath PersistentVolume holding model_repository/ under triton/, bound to the claim `models`."""
    import shutil

    target = cluster.models_dir / "triton"
    if not target.exists():
        shutil.copytree(ROOT / "model_repository", target)
    cluster.models_dir.chmod(0o755)
    pv_name = f"{NAMESPACE}-{CLAIM}"
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": "",
            "hostPath": {"path": str(cluster.models_dir), "type": "Directory"},
            "claimRef": {"namespace": NAMESPACE, "name": CLAIM},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "namespace": NAMESPACE},
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    ns = _namespace(NAMESPACE)
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [ns, pv, pvc]})
    )
    return f"pvc://{CLAIM}/triton"


# small enough that several pipelines fit on a 2-core node (the default request is a whole CPU)
SMALL = {"requests": {"cpu": "100m", "memory": "256Mi"}}


def _fanout(cluster: NodeCluster, uri: str, name: str = "vision") -> dict[str, Any]:
    """examples/fanout.yaml in NAMESPACE, its models from `uri`, served by the CPU Triton image."""
    doc = yaml.safe_load((ROOT / "examples" / "fanout.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": NAMESPACE}
    doc["spec"]["modelRepository"]["uri"] = uri
    doc["spec"]["server"].update(gpus=0, image=cluster.images["triton"].name, resources=SMALL)
    return doc


def _condition(cluster: NodeCluster, name: str, ctype: str) -> dict[str, Any]:
    cr = json.loads(cluster.kubectl("get", "tritonpipeline", name, "-n", NAMESPACE, "-o", "json"))
    return next((c for c in (cr.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def test_fanout_from_a_pvc_is_served_through_the_cluster_ip(
    cluster: NodeCluster, operator: dict[str, Any]
) -> None:
    doc = _fanout(cluster, _models_claim(cluster))
    name = doc["metadata"]["name"]
    t = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))

    def ready() -> bool:
        return _condition(cluster, name, "Ready").get("status") == "True"

    _wait("TritonPipeline Ready", ready, 240, lambda: _diagnostics(cluster, NAMESPACE))
    print(f">> kubectl apply -> TritonPipeline Ready: {time.monotonic() - t:.1f}s")
    pods = json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]
    assert pods and all(
        {c["type"]: c["status"] for c in p["status"]["conditions"]}["Ready"] == "True" for p in pods
    ), _diagnostics(cluster, NAMESPACE)
    service = json.loads(cluster.kubectl("get", "service", name, "-n", NAMESPACE, "-o", "json"))
    ip = service["spec"]["clusterIP"]
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")

    def answered() -> subprocess.CompletedProcess[str] | None:
        proc = cluster.run(
            [sys.executable, str(ROOT / "e2e" / "infer.py"), "--url", f"{ip}:{port}", "vision"]
        )
        return proc if proc.returncode == 0 else None

    proc = _wait("inference through the ClusterIP", answered, 60, lambda: _diagnostics(cluster, NAMESPACE))
    print(f">> first correct answer via ClusterIP {ip}:{port}: {time.monotonic() - t:.1f}s after apply")
    print(proc.stdout)
    assert "PASS vision: FEATURES=2x+1, SCORE_B=3(2x+1)-2" in proc.stdout


def test_missing_model_directory_is_reported_in_the_status(
    cluster: NodeCluster, operator: dict[str, Any]
) -> None:
    """The init container assembles the repository inside the pod; a model the PVC lacks fails it, and
    the pipeline's Ready condition says which (not only the pod log)."""
    doc = _fanout(cluster, _models_claim(cluster), name="broken")
    doc["spec"]["models"][1]["name"] = "head_missing"
    doc["spec"]["pipelines"][0]["steps"][1] = {
        "name": "head_b",
        "model": "head_missing",
        "inputs": {"FEATS_IN_B": "extract.FEATS_A"},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))

    def reported() -> dict[str, Any] | None:
        ready = _condition(cluster, "broken", "Ready")
        return ready if ready.get("reason") == "InitContainerFailed" else None

    ready = _wait("Ready=False InitContainerFailed", reported, 120, lambda: _diagnostics(cluster, NAMESPACE))
    assert ready["status"] == "False"
    assert "init container assemble-repository failed" in ready["message"]
    assert "model directory 'head_missing' not found" in ready["message"], ready
    # the pipeline next to it is not disturbed
    assert _condition(cluster, "vision", "Ready").get("status") == "True"


def _infer(cluster: NodeCluster, name: str) -> subprocess.CompletedProcess[str]:
    service = json.loads(cluster.kubectl("get", "service", name, "-n", NAMESPACE, "-o", "json"))
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")
    url = f"{service['spec']['clusterIP']}:{port}"
    return cluster.run([sys.executable, str(ROOT / "e2e" / "infer.py"), "--url", url, name])


def test_killed_triton_pod_is_replaced_and_the_service_recovers(
    cluster: NodeCluster, operator: dict[str, Any]
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
        fresh = [p for p in pods if p["metadata"]["uid"] != old["metadata"]["uid"]]
        return bool(fresh) and _condition(cluster, "vision", "Ready").get("status") == "True"

    _wait("a new Ready pod for vision", replaced, 120, lambda: _diagnostics(cluster, NAMESPACE))
    proc = _wait(
        "inference after the replacement", lambda: (p := _infer(cluster, "vision")).returncode == 0 and p, 60
    )
    assert "PASS vision" in proc.stdout
    # recovered: every following request answers
    for _ in range(5):
        assert _infer(cluster, "vision").returncode == 0


def test_deleting_the_pipeline_lets_the_garbage_collector_remove_every_child(
    cluster: NodeCluster, operator: dict[str, Any]
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

    _wait("every child of the deleted pipeline removed", gone, 90, lambda: _diagnostics(cluster, NAMESPACE))
    assert _condition(cluster, "vision", "Ready").get("status") == "True"  # the other pipeline untouched


def test_teardown_restores_host(cluster: NodeCluster) -> None:
    """Last: the node stopped, the host is as it was before the images were built and the node started."""
    cluster.node.stop()
    after = _host_state()
    for key in HOST_BEFORE:
        assert after[key] == HOST_BEFORE[key], key
