"""The `Cluster` the pod-level scenarios run against, shared by every scenario module and the benches.

A `Cluster` is kubectl and helm with a kubeconfig, a client inside the cluster network, images already on
its nodes and a directory on the nodes for the models PV: the kind cluster e2e/kind.py starts (`make e2e`),
given to pytest by TRITONPIPELINE_E2E_KUBECONFIG and the other TRITONPIPELINE_E2E_* variables
(`Cluster.from_env`). One `helm install` of the chart per session: starting it is the slow part.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tritonpipeline.render.checks import full_reference
from tritonpipeline.render.meta import PIPELINE_LABEL

ROOT = Path(__file__).resolve().parents[1]

RELEASE, RELEASE_NS = "tp", "triton-system"
NAMESPACE = "pipelines"
CLAIM = "models"
# both namespaces enforce Pod Security "restricted": the chart's and the operator's pods must pass it
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": RESTRICTED}}


KUBECONFIG_ENV = "TRITONPIPELINE_E2E_KUBECONFIG"


@dataclass(frozen=True)
class ImageRef:
    name: str


class Cluster:
    """A running cluster given by a kubeconfig (kind's, in `make e2e`): kubectl, a client inside the cluster
    network, its images (already on its nodes) and the models PV's directory (already holding triton/).
    The client joins the network namespace at `netns` (a path, e.g. /proc/<kind node container's pid>/ns/net)
    where ClusterIPs are routed; without one it runs here, which then has to reach ClusterIPs itself."""

    def __init__(
        self,
        kubeconfig: Path,
        images: dict[str, Any],
        models_dir: Path,
        netns: str | None = None,
        nodes: tuple[str, ...] = (),
    ) -> None:
        self.kubeconfig = kubeconfig
        # "operator", "assembler", "triton" -> an object with `.name` (the image reference)
        self.images = images
        self.models_dir = models_dir  # the hostPath PV's directory as the node sees it
        self.netns = netns
        self.nodes = nodes  # the node containers (kind), for `docker exec`
        self.kubectl_bin = shutil.which("kubectl") or "kubectl"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Cluster:
        """TRITONPIPELINE_E2E_KUBECONFIG (the cluster), _NETNS (the client's network namespace file),
        _TRITON_IMAGE (default NVIDIA's tritonserver), _OPERATOR_IMAGE (default the chart's image),
        _ASSEMBLER_IMAGE (default the one the chart names after the operator image),
        _MODELS_DIR (the node directory holding triton/, default /models as e2e/kind-gpu.sh mounts it),
        _NODES (the node containers, comma-separated: kind's, reached with `docker exec`)."""
        from e2e.images import assembler_of, chart_image

        env = dict(os.environ if env is None else env)
        operator = env.get("TRITONPIPELINE_E2E_OPERATOR_IMAGE") or chart_image()
        images = {
            "operator": ImageRef(operator),
            "assembler": ImageRef(env.get("TRITONPIPELINE_E2E_ASSEMBLER_IMAGE") or assembler_of(operator)),
            "triton": ImageRef(
                env.get("TRITONPIPELINE_E2E_TRITON_IMAGE") or "nvcr.io/nvidia/tritonserver:26.08-py3"
            ),
        }
        models = Path(env.get("TRITONPIPELINE_E2E_MODELS_DIR") or "/models")
        nodes = tuple(n for n in env.get("TRITONPIPELINE_E2E_NODES", "").split(",") if n)
        netns = env.get("TRITONPIPELINE_E2E_NETNS") or None
        return cls(Path(env[KUBECONFIG_ENV]), images, models, netns, nodes)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        from e2e.kind import run_kubectl

        proc = run_kubectl(self.kubectl_bin, self.kubeconfig, args, input)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def network(self) -> contextlib.AbstractContextManager[None]:
        """The calling thread, and what it starts, inside the cluster network (ClusterIPs reachable)."""
        if self.netns is None:
            return contextlib.nullcontext()
        from e2e.host import in_netns_path

        return in_netns_path(self.netns)

    def run(self, cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """A command inside the cluster network (a client on the node)."""
        with self.network():
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)

    def start(self, cmd: list[str]) -> subprocess.Popen[str]:
        """A background command inside the cluster network; its stdout is a pipe (end it by its PID)."""
        with self.network():
            return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def tag_image(self, image: str, alias: str) -> None:
        """`image`, already on every node, also under the name `alias` (no registry: no pull)."""
        if not self.nodes:
            pytest.skip("TRITONPIPELINE_E2E_NODES names no node container to tag an image in")
        tag = ["ctr", "-n", "k8s.io", "images", "tag", "--force", *map(full_reference, (image, alias))]
        for node in self.nodes:
            subprocess.run(["docker", "exec", node, *tag], check=True, capture_output=True)

    def address(self) -> str:
        """The client's address inside the cluster network, where pods reach a server the test starts
        (inside `network()`) as they reach a service outside the cluster: the source address of the
        client's route to the apiserver (a kind node's own address)."""
        server = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        host = urllib.parse.urlsplit(server).hostname or ""
        with self.network(), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 443))  # UDP: no packet is sent, only the route is chosen
            return str(probe.getsockname()[0])


def bench_cluster(target: str) -> Cluster:
    """The cluster a bench of bench/ runs on: the kind cluster `make TARGET` starts for it (`python -m
    e2e.kind --bench MODULE`), given by the TRITONPIPELINE_E2E_* variables. Exits naming the target
    when there is none."""
    if not os.environ.get(KUBECONFIG_ENV):
        raise SystemExit(
            f"no cluster to run on: `make {target}` starts a kind cluster and runs this bench on it "
            f"(or set {KUBECONFIG_ENV} and the other variables of Cluster.from_env)"
        )
    return Cluster.from_env()


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    """The cluster TRITONPIPELINE_E2E_KUBECONFIG names: the kind cluster e2e/kind.py starts and runs these
    scenarios on (`make e2e`, `make test` through tests/cluster/test_kind.py)."""
    if not os.environ.get(KUBECONFIG_ENV):
        pytest.skip(
            f"no cluster: {KUBECONFIG_ENV} is not set. The pod-level scenarios run on a kind cluster: "
            "`make e2e` (all of them), `make e2e-autoscaling`, `make bench-streams`"
        )
    return Cluster.from_env()


def wait(what: str, check: Any, timeout: float, on_fail: Any = None) -> Any:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(1)
    detail = on_fail() if on_fail else ""
    raise AssertionError(f"{what}: not within {timeout:.0f}s\n{detail}")


def diagnostics(cluster: Cluster, namespace: str) -> str:
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
def chart_operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The chart installed as a user does (defaults), with the cluster's operator image when that is not the
    chart's: `helm upgrade --install`, over the release e2e/kind.py installed as README says."""
    return install_chart(cluster, tmp_path_factory.mktemp("helm"))


def install_chart(cluster: Cluster, helm_home: Path, *settings: str) -> dict[str, Any]:
    """The chart installed as RELEASE in RELEASE_NS (with helm `settings`, e.g. "--set", "k=v"); returns
    the active operator pod once the rollout is done."""
    from e2e.images import assembler_of, chart_image
    from harness.gotools import ensure_tool
    from harness.helm import Helm

    t = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(namespace(RELEASE_NS)))
    helm = Helm(ensure_tool("helm"), home=helm_home, kubeconfig=cluster.kubeconfig)
    image = cluster.images["operator"].name
    repository, _, tag = image.rpartition(":")
    chosen = [] if image == chart_image() else ["--set", f"image.repository={repository},image.tag={tag}"]
    assembler = cluster.images["assembler"].name
    if assembler != assembler_of(image):  # else the chart's default
        chosen += ["--set", f"assemblerImage={assembler}"]
    with cluster.network():
        helm.run(
            "upgrade",
            "--install",
            RELEASE,
            str(ROOT / "charts" / "triton-pipeline"),
            "-n",
            RELEASE_NS,
            "--create-namespace",
            *chosen,
            *settings,
        )
    deployment = f"deployment/{RELEASE}-triton-pipeline"
    cluster.kubectl("get", deployment, "-n", RELEASE_NS)
    proc = cluster.kubectl("rollout", "status", deployment, "-n", RELEASE_NS, "--timeout=180s", check=False)
    assert "successfully rolled out" in proc, diagnostics(cluster, RELEASE_NS)
    pod = active_operator_pod(cluster)
    took = time.monotonic() - t
    print(f">> helm install -> operator pods Ready, {pod['metadata']['name']} active: {took:.1f}s")
    return pod


def operator_pods(cluster: Cluster) -> list[dict[str, Any]]:
    """The operator Deployment's pods (every one serves the webhook, one reconciles)."""
    deployment = json.loads(
        cluster.kubectl("get", "deployment", f"{RELEASE}-triton-pipeline", "-n", RELEASE_NS, "-o", "json")
    )
    selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())
    return json.loads(cluster.kubectl("get", "pods", "-n", RELEASE_NS, "-l", selector, "-o", "json"))["items"]


# reconcile/leadership.py's log lines: a pod's role is the last one it logged
ACTIVE_LINE, STANDBY_LINE = "is now the active reconciler", "is standby (it serves the webhook)"


def active_operator_pod(cluster: Cluster, not_uid: str = "", timeout: float = 60) -> dict[str, Any]:
    """The operator pod that reconciles: the one pod (not `not_uid`, a pod being replaced, nor one being
    deleted) whose last role line in its log says active."""

    def active() -> dict[str, Any] | None:
        found = []
        for pod in operator_pods(cluster):
            if pod["metadata"]["uid"] == not_uid or pod["metadata"].get("deletionTimestamp"):
                continue
            name = pod["metadata"]["name"]
            log = cluster.kubectl("logs", "-n", RELEASE_NS, name, check=False)
            if log.rfind(ACTIVE_LINE) > log.rfind(STANDBY_LINE):
                found.append(pod)
        return found[0] if len(found) == 1 else None

    return wait("one active operator pod", active, timeout, lambda: diagnostics(cluster, RELEASE_NS))


def models_claim(cluster: Cluster) -> str:
    """A hostPath PersistentVolume at the nodes' models directory (model_repository/ under triton/, as the
    cluster mounts it), bound to the claim `models`."""
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


def pipeline_doc(
    cluster: Cluster, source: Path | dict[str, Any], uri: str, name: str | None = None
) -> dict[str, Any]:
    """A TritonPipeline (a file of examples/ or a dict) in NAMESPACE, named `name` (default its own), its
    models from `uri`, served on CPU by the cluster's Triton image with small requests."""
    doc = yaml.safe_load(source.read_text()) if isinstance(source, Path) else json.loads(json.dumps(source))
    doc["metadata"] = {"name": name or doc["metadata"]["name"], "namespace": NAMESPACE}
    doc["spec"]["modelRepository"]["uri"] = uri
    doc["spec"].setdefault("server", {}).update(gpus=0, image=cluster.images["triton"].name, resources=SMALL)
    return doc


def fanout(cluster: Cluster, uri: str, name: str = "vision") -> dict[str, Any]:
    """examples/fanout.yaml in NAMESPACE, its models from `uri`, served by the CPU Triton image."""
    return pipeline_doc(cluster, ROOT / "examples" / "fanout.yaml", uri, name)


def pods(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    """The pipeline's pods (terminating ones included)."""
    selector = f"{PIPELINE_LABEL}={name}"
    return json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json"))["items"]


def pod_ready(pod: dict[str, Any]) -> bool:
    """The pod's own Ready condition is True."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def condition(cluster: Cluster, name: str, ctype: str) -> dict[str, Any]:
    cr = json.loads(cluster.kubectl("get", "tritonpipeline", name, "-n", NAMESPACE, "-o", "json"))
    return next((c for c in (cr.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def endpoint(cluster: Cluster, name: str) -> str:
    """CLUSTER-IP:PORT of the pipeline's Service (HTTP), reachable inside `cluster.network()`."""
    service = json.loads(cluster.kubectl("get", "service", name, "-n", NAMESPACE, "-o", "json"))
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")
    return f"{service['spec']['clusterIP']}:{port}"


def infer(cluster: Cluster, name: str) -> subprocess.CompletedProcess[str]:
    """The fixed check of the pipeline `name` (e2e/local.py CHECKS) through its Service's ClusterIP."""
    return cluster.run(
        [sys.executable, str(ROOT / "e2e" / "infer.py"), "--url", endpoint(cluster, name), name]
    )


def spec_file(doc: dict[str, Any], directory: Path) -> Path:
    path = directory / f"{doc['metadata']['name']}.json"
    path.write_text(json.dumps(doc))
    return path


def check_pipeline(
    cluster: Cluster, doc: dict[str, Any], directory: Path
) -> subprocess.CompletedProcess[str]:
    """Every pipeline of the CR `doc` checked through its Service's ClusterIP against the reference
    evaluation of its graph (e2e/infer.py --spec); stateful ones with interleaved sequences."""
    url = endpoint(cluster, doc["metadata"]["name"])
    infer_py = str(ROOT / "e2e" / "infer.py")
    return cluster.run([sys.executable, infer_py, "--url", url, "--spec", str(spec_file(doc, directory))])


def children(cluster: Cluster, name: str) -> dict[str, str]:
    """The pipeline's children by its label: KIND/NAME -> uid (pods and ReplicaSets included)."""
    kinds = "deployments,replicasets,pods,services,configmaps,secrets,serviceaccounts,roles,rolebindings"
    items = json.loads(
        cluster.kubectl("get", kinds, "-n", NAMESPACE, "-l", f"{PIPELINE_LABEL}={name}", "-o", "json")
    )["items"]
    return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["uid"] for o in items}


EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _model(name: str, inputs: list[tuple[str, int]], outputs: list[tuple[str, int]]) -> dict[str, Any]:
    def tensors(pairs: list[tuple[str, int]]) -> list[dict[str, Any]]:
        return [{"name": n, "dataType": "FP32", "dims": [d]} for n, d in pairs]

    return {
        "name": name,
        "backend": "python",
        "maxBatchSize": 8,
        "inputs": tensors(inputs),
        "outputs": tensors(outputs),
    }


# the stateless models of model_repository/
MODELS = [
    _model("extractor", [("INPUT_A", 4)], [("FEATS_A", 4)]),
    _model("head_b", [("FEATS_IN_B", 4)], [("OUTPUT_B", 4)]),
    _model("head_c", [("FEATS_IN_C", 4)], [("OUTPUT_C", 1)]),
    _model("join", [("LEFT", 4), ("RIGHT", 1)], [("JOINED", 4)]),
]
IMAGE = [{"name": "IMAGE", "dataType": "FP32", "dims": [4]}]
# graphs no example has, over the stateless models of model_repository/: one CR, three pipelines served
# by one Triton (one pod: each model loads once, which keeps the node's 2 cores free)
NOT_EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "graphs": [
        {  # four steps in a row, one model at two steps
            "name": "chain",
            "inputs": IMAGE,
            "steps": [
                {"name": "a", "model": "extractor", "inputs": {"INPUT_A": "inputs.IMAGE"}},
                {"name": "b", "model": "head_b", "inputs": {"FEATS_IN_B": "a.FEATS_A"}},
                {"name": "c", "model": "head_b", "inputs": {"FEATS_IN_B": "b.OUTPUT_B"}},
                {"name": "d", "model": "head_c", "inputs": {"FEATS_IN_C": "c.OUTPUT_B"}},
            ],
            "outputs": [{"name": "Y", "from": "d.OUTPUT_C"}, {"name": "MID", "from": "b.OUTPUT_B"}],
        },
        {  # one tensor read by three steps and returned (a router), and a join of two branches
            "name": "fanout3",
            "inputs": IMAGE,
            "steps": [
                {"name": "x", "model": "extractor", "inputs": {"INPUT_A": "inputs.IMAGE"}},
                {"name": "b", "model": "head_b", "inputs": {"FEATS_IN_B": "x.FEATS_A"}},
                {"name": "c", "model": "head_c", "inputs": {"FEATS_IN_C": "x.FEATS_A"}},
                {"name": "j", "model": "join", "inputs": {"LEFT": "x.FEATS_A", "RIGHT": "c.OUTPUT_C"}},
            ],
            "outputs": [
                {"name": "FEATS", "from": "x.FEATS_A"},
                {"name": "B", "from": "b.OUTPUT_B"},
                {"name": "J", "from": "j.JOINED"},
            ],
            "fanOut": "router",
        },
        {  # a fan-out with no router: both heads read the extractor's output directly
            "name": "shared",
            "inputs": IMAGE,
            "steps": [
                {"model": "extractor", "inputs": {"INPUT_A": "inputs.IMAGE"}},
                {"model": "head_b", "inputs": {"FEATS_IN_B": "extractor.FEATS_A"}},
                {"model": "head_c", "inputs": {"FEATS_IN_C": "extractor.FEATS_A"}},
            ],
            "outputs": [{"name": "B", "from": "head_b.OUTPUT_B"}, {"name": "C", "from": "head_c.OUTPUT_C"}],
            "fanOut": "shared",
        },
    ],
}


def fleet_docs(cluster: Cluster, uri: str) -> list[dict[str, Any]]:
    """Every example (CR named after its file) and every NOT_EXAMPLES pipeline, ready to apply.

    The streaming example keeps its 2 replicas; its header affinity needs an ingress controller, which a
    bare cluster lacks, so here its sequences stay on one pod through the Service's ClientIP affinity."""
    docs = []
    for path in EXAMPLES:
        doc = pipeline_doc(cluster, path, uri, name=path.stem)
        if doc["spec"].get("routing", {}).get("sessionAffinity") == "Header":
            doc["spec"]["routing"] = {"sessionAffinity": "ClientIP"}
        docs.append(doc)
    for name, pipelines in NOT_EXAMPLES.items():
        cr = {
            "apiVersion": "serving.tritonpipeline.io/v1alpha1",
            "kind": "TritonPipeline",
            "metadata": {"name": name},
            "spec": {"modelRepository": {"uri": uri}, "models": MODELS, "pipelines": pipelines},
        }
        docs.append(pipeline_doc(cluster, cr, uri))
    return docs


class LoadClient:
    """e2e/infer.py --loop inside the cluster network: checked requests until stopped, then its counts."""

    def __init__(self, cluster: Cluster, doc: dict[str, Any], workdir: Path) -> None:
        cmd = [
            sys.executable,
            str(ROOT / "e2e" / "infer.py"),
            "--url",
            endpoint(cluster, doc["metadata"]["name"]),
        ]
        self.proc = cluster.start([*cmd, "--spec", str(spec_file(doc, workdir)), "--loop"])

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=60)
        return dict(json.loads(out.strip().splitlines()[-1]))


def helm_upgrade(cluster: Cluster, helm_home: Path, *settings: str) -> None:
    """`helm upgrade --reuse-values` of the release with `settings`, until the operator's rollout is done."""
    from harness.gotools import ensure_tool
    from harness.helm import Helm

    helm = Helm(ensure_tool("helm"), home=helm_home, kubeconfig=cluster.kubeconfig)
    chart = str(ROOT / "charts" / "triton-pipeline")
    with cluster.network():
        helm.run("upgrade", RELEASE, chart, "-n", RELEASE_NS, "--reuse-values", *settings)
    deployment = f"deployment/{RELEASE}-triton-pipeline"
    proc = cluster.kubectl("rollout", "status", deployment, "-n", RELEASE_NS, "--timeout=180s", check=False)
    assert "successfully rolled out" in proc, diagnostics(cluster, RELEASE_NS)


def deployments(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The namespace's Deployments by name, from one list call (a consistent snapshot: reading them one by
    one could see one pipeline before its rollout ended and the next after its own began)."""
    items = json.loads(cluster.kubectl("get", "deployments", "-n", NAMESPACE, "-o", "json"))["items"]
    return {d["metadata"]["name"]: d for d in items}


def stream_pipeline(cluster: Cluster, name: str, drain_s: int = 120) -> dict[str, Any]:
    """examples/streaming.yaml as `name` with two replicas and `routing.sessionAffinity: Stream` (the mode
    docs/concepts/sequences.md recommends for streams): a leaving pod serves its open streams up to
    `drain_s` seconds."""
    doc = pipeline_doc(cluster, ROOT / "examples" / "streaming.yaml", models_claim(cluster), name)
    doc["spec"]["server"]["replicas"] = 2
    doc["spec"]["routing"] = {"sessionAffinity": "Stream", "streamDrainSeconds": drain_s}
    accumulator = next(m for m in doc["spec"]["models"] if m["name"] == "accumulator")
    accumulator["sequenceBatching"]["maxSequenceIdleMicroseconds"] = 10_000_000
    return doc


def start_streams(cluster: Cluster, name: str, lanes: int, chunks: int, gap: float) -> subprocess.Popen[str]:
    """e2e/sequence_load.py in stream mode against the pipeline's Service (gRPC): `lanes` sequences at a
    time of `chunks` chunks `gap` seconds apart, every running total checked, until SIGTERM."""
    service = json.loads(cluster.kubectl("get", "service", name, "-n", NAMESPACE, "-o", "json"))
    url = f"{service['spec']['clusterIP']}:8001"
    cmd = [sys.executable, "-m", "e2e.sequence_load", "--mode", "stream", "--url", url,
           "--lanes", str(lanes), "--chunks", str(chunks), "--gap", str(gap)]  # fmt: skip
    return cluster.start(cmd)


def stream_results(out: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """From sequence_load's output: every sequence, and the broken ones (an error after the first chunk)."""
    records = [
        r for r in (json.loads(line) for line in out.splitlines() if line.startswith("{")) if "lane" in r
    ]
    return records, [r for r in records if r["error"] and r["sent"] > 0]
