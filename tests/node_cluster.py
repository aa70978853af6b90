"""The node test bed as a `Cluster` for the pod-level scenarios, shared by every `node` test module.

One node (e2e/node.py) and one `helm install` of the chart per session: starting them is the slow part.
A `Cluster` is kubectl and helm with a kubeconfig, a client inside the cluster network, images made
available, and a host directory for the models PV; the kind + GPU path can provide another and run the
same scenarios. At the end of the session the node is stopped and the host must be as it was before the
images were built and the node started (checked in the fixture's teardown).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

RELEASE, RELEASE_NS = "tp", "triton-system"
NAMESPACE = "pipelines"
CLAIM = "models"
# both namespaces enforce Pod Security "restricted": the chart's and the operator's pods must pass it
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": RESTRICTED}}


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


@pytest.fixture(scope="session")
def host_before() -> dict[str, Any]:
    """The host's state before anything of the bed exists; skips when this machine cannot run a node."""
    from e2e.node import missing_prerequisite, reap_stale

    reason = missing_prerequisite()
    if reason:
        pytest.skip(f"no node test bed: {reason}")
    reap_stale()  # what a killed earlier run left is not the host's state
    return _host_state()


@pytest.fixture(scope="session")
def node(host_before: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One running node for the session; at its end, stopped, and the host checked against host_before."""
    from e2e.node import Node

    n = Node(tmp_path_factory.mktemp("node"))
    n.start()
    print(f"node timings: {json.dumps({k: round(v, 1) for k, v in n.timings.items()})}")
    try:
        yield n
    finally:
        n.stop()
    after = _host_state()
    changed = [key for key in host_before if after[key] != host_before[key]]
    assert not changed, f"the host was not restored: {changed}\nbefore {host_before}\nafter {after}"


@pytest.fixture(scope="session")
def cluster(node: Any) -> NodeCluster:
    """The node with the operator and CPU Triton images imported (built from the repository's recipes)."""
    from e2e.images import ImageError, all_images

    try:
        images = all_images()
    except ImageError as err:
        pytest.skip(f"images cannot be built here: {err}")
    for image in images.values():
        t = time.monotonic()
        node.ctr("images", "import", str(image.archive))
        print(f">> imported {image.name} ({image.size_mb:.0f} MB archive) in {time.monotonic() - t:.1f}s")
    return NodeCluster(node, images)


def wait(what: str, check: Any, timeout: float, on_fail: Any = None) -> Any:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(1)
    detail = on_fail() if on_fail else ""
    raise AssertionError(f"{what}: not within {timeout:.0f}s\n{detail}")


def diagnostics(cluster: NodeCluster, namespace: str) -> str:
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


@pytest.fixture(scope="session")
def chart_operator(cluster: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`helm install` of the chart as a user does: defaults, the locally built image under its name."""
    from e2e.node import in_netns
    from harness.gotools import ensure_tool
    from harness.helm import Helm

    t = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(namespace(RELEASE_NS)))
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
    assert "successfully rolled out" in proc, diagnostics(cluster, RELEASE_NS)
    print(f">> helm install -> operator pod Ready: {time.monotonic() - t:.1f}s")
    (pod,) = json.loads(cluster.kubectl("get", "pods", "-n", RELEASE_NS, "-o", "json"))["items"]
    return pod


def models_claim(cluster: NodeCluster) -> str:
    """A hostPath PersistentVolume holding model_repository/ under triton/, bound to the claim `models`."""
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
    ns = namespace(NAMESPACE)
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [ns, pv, pvc]})
    )
    return f"pvc://{CLAIM}/triton"


# small enough that several pipelines fit on a 2-core node (the default request is a whole CPU)
SMALL = {"requests": {"cpu": "100m", "memory": "256Mi"}}


def fanout(cluster: NodeCluster, uri: str, name: str = "vision") -> dict[str, Any]:
    """examples/fanout.yaml in NAMESPACE, its models from `uri`, served by the CPU Triton image."""
    doc = yaml.safe_load((ROOT / "examples" / "fanout.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": NAMESPACE}
    doc["spec"]["modelRepository"]["uri"] = uri
    doc["spec"]["server"].update(gpus=0, image=cluster.images["triton"].name, resources=SMALL)
    return doc


def condition(cluster: NodeCluster, name: str, ctype: str) -> dict[str, Any]:
    cr = json.loads(cluster.kubectl("get", "tritonpipeline", name, "-n", NAMESPACE, "-o", "json"))
    return next((c for c in (cr.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def infer(cluster: NodeCluster, name: str) -> subprocess.CompletedProcess[str]:
    service = json.loads(cluster.kubectl("get", "service", name, "-n", NAMESPACE, "-o", "json"))
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")
    url = f"{service['spec']['clusterIP']}:{port}"
    return cluster.run([sys.executable, str(ROOT / "e2e" / "infer.py"), "--url", url, name])
