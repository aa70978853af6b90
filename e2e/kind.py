"""`make e2e`: the operator on a kind cluster (one control-plane node, two workers), as users try it.

  1. a Docker engine: the running one, or Debian's started here (e2e/docker_engine.py)
  2. kind's node image: the published one when the engine can pull it, else built here from Go modules and
     Debian's mirror (e2e/kind_image.py; KIND_NODE_IMAGE=local forces that, =published forbids it)
  3. the cluster: kind's default CNI replaced by a static ptp configuration per node (one pod /24 each,
     routes between the nodes), the example models mounted at /models/triton on every node
  4. the release in a registry of the run's own (crane's, on the first worker's address; every node's
     containerd pulls from it over plain HTTP): the operator and assembler images (the Dockerfile's two
     targets) pushed by digest and the chart packaged with those digests, as `make release` and the release
     workflow do; a CPU Triton image built here `kind load`ed (also named as the operator's default image)
  5. docs/getting-started/cluster.md run as written (e2e/tutorial.py): the chart installed from the OCI
     registry, `helm test`, models onto a volume, a pipeline Ready and answering, then its Clean up; the
     chart installed again from the registry (`helm install oci://... --version`) for what follows; every
     example applied, Ready, and answering right (e2e/infer.py against its Service, from inside a worker's
     network namespace)
  6. with E2E_SCENARIOS=1 (the default), the pod-level scenario tests on this cluster
  7. a pass/fail table, bench/results/e2e-kind.json; the cluster deleted (also on failure and Ctrl-C), the
     engine stopped when it was started here: the host is left as found

On a machine with an NVIDIA GPU, Docker's nvidia runtime and the container toolkit, `make e2e` runs the GPU
variant instead (e2e/kind-gpu.sh). KEEP_CLUSTER=1 keeps the cluster (and the engine) and says how to reach it.

    .venv/bin/python -m e2e.kind [--workers N] [--no-scenarios | --scenarios FILE,...] [--keep]
    .venv/bin/python -m e2e.kind --prepare      # only the node image and the images (a phase of make test)
    .venv/bin/python -m e2e.kind --down         # what --keep / KEEP_CLUSTER=1 left: deleted, engine stopped
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from e2e.docker_engine import Engine, EngineError
from e2e.host import in_netns_path, read_sysctls, restore_sysctls
from e2e.images import ImageError, all_images
from e2e.kind_image import ImageError as NodeImageError
from e2e.kind_image import ensure_node_binaries, lacks_sys_resource, local_node_image, published_node_image
from e2e.local import Report, Row
from harness.gotools import ensure_tool, tool_path
from harness.helm import Helm
from harness.paths import ROOT
from harness.registry import serve as registry_serve
from tritonpipeline.render.checks import full_reference
from tritonpipeline.render.meta import PIPELINE_LABEL
from tritonpipeline.spec.base import DEFAULT_IMAGE

CLUSTER_NAME = "tritonpipeline-e2e"
POD_SUBNET = "10.244.0.0/16"
MODELS_DIR = "/models"  # on every node; the example models at MODELS_DIR/triton
NAMESPACE = "e2e-examples"  # the scenario tests use their own ("pipelines")
RELEASE, RELEASE_NS = "tp", "triton-system"
RESULTS = ROOT / "bench" / "results" / "e2e-kind.json"
SMALL = {"requests": {"cpu": "100m", "memory": "256Mi"}}
CNI_CONF = "/etc/cni/net.d/10-tritonpipeline.conflist"
# the pod-level scenario tests that run on any cluster given by a kubeconfig (node_cluster.Cluster;
# marker anycluster: tests/unit/test_kind.py checks this list against the marker)
SCENARIO_TESTS = (
    "test_node_pipeline.py",
    "test_node_scenarios.py",
    "test_node_webhook.py",
    "test_node_status.py",
    "test_node_stream_drain.py",
    "test_kind_nodes.py",  # what only several nodes show: replicas spread, a worker drained
    "test_node_storage.py",  # s3:// from MinIO over TLS, outside the cluster
)
READY_TIMEOUT = 300.0
# the release's OCI registry (crane's), on the first worker's address: every node pulls from it over plain
# HTTP (REGISTRY_HOSTS_DIR, containerd's per-registry configuration), the host pushes to it
REGISTRY_PORT = 5000
REGISTRY_HOSTS_DIR = "/etc/containerd/certs.d"
# the tutorial (docs/getting-started/cluster.md), run as written: its time limit and its release
TUTORIAL_TIMEOUT = 1800
TUTORIAL_RELEASE = "triton-pipeline"  # also its namespace
# what the examples' routers run on here: the native router, from the operator image
ROUTER = "native"


def log(msg: str) -> None:
    print(f">> e2e: {msg}", flush=True)


class StepFailed(Exception):
    """A step the rest depends on failed (its row says why): straight to the report and cleanup."""


# ---------------------------------------------------------------------------------------------------
# pure: the cluster's configuration


def cgroup_v1(mountinfo: str) -> bool:
    """Whether /sys/fs/cgroup is a cgroup v1 hierarchy (a tmpfs of controllers), from /proc/self/mountinfo."""
    for line in mountinfo.splitlines():
        pre, _, post = line.partition(" - ")
        if pre.split()[4] == "/sys/fs/cgroup":
            return post.split()[0] != "cgroup2"
    return False


def cluster_config(workers: int, models: Path, *, cgroup_v1: bool, no_sys_resource: bool) -> dict[str, Any]:
    """kind's Cluster: one control-plane node and `workers` workers, each with `models` at MODELS_DIR/triton;
    no default CNI (install_cni); kubelet settings only where the host needs them."""
    mount = {"hostPath": str(models), "containerPath": f"{MODELS_DIR}/triton", "readOnly": True}
    nodes = [{"role": "control-plane", "extraMounts": [mount]}]
    nodes += [{"role": "worker", "extraMounts": [mount]} for _ in range(workers)]
    config: dict[str, Any] = {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "networking": {"disableDefaultCNI": True, "podSubnet": POD_SUBNET},
        "nodes": nodes,
    }
    # the run names the images its nodes pulled from its registry also as the tree's chart names them
    # (KindCluster.pull): a stand-in for the public registry it cannot reach. The kubelet's default since
    # 1.35 (NeverVerifyPreloadedImages, KEP-2535) would re-verify such a name against that registry
    kubelet: dict[str, Any] = {
        "kind": "KubeletConfiguration",
        "imagePullCredentialsVerificationPolicy": "NeverVerify",
    }
    if cgroup_v1:
        kubelet["failCgroupV1"] = False  # kubelet 1.35+ refuses cgroup v1 otherwise
    patches = []
    # containerd reads a hosts.toml per registry there (trust_registry): the release's registry, plain HTTP
    config["containerdConfigPatches"] = [
        f'[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "{REGISTRY_HOSTS_DIR}"'
    ]
    if no_sys_resource:
        # a node may not lower oom_score_adj without CAP_SYS_RESOURCE
        kubelet["oomScoreAdj"] = 0
        patches.append(yaml.safe_dump({"kind": "KubeProxyConfiguration", "oomScoreAdj": 0}))
        config["containerdConfigPatches"].append(
            '[plugins."io.containerd.grpc.v1.cri"]\n  restrict_oom_score_adj = true'
        )
    patches.insert(0, yaml.safe_dump(kubelet))
    if patches:
        config["kubeadmConfigPatches"] = patches
    return config


def cni_conflist(pod_cidr: str) -> dict[str, Any]:
    """The node's CNI configuration: ptp with host-local addresses from its own pod CIDR (what kindnetd
    writes), portmap for hostPort."""
    ipaddress.ip_network(pod_cidr)  # raises on a malformed CIDR
    return {
        "cniVersion": "0.3.1",
        "name": "tritonpipeline",
        "plugins": [
            {
                "type": "ptp",
                "ipMasq": False,
                "mtu": 1500,
                "ipam": {
                    "type": "host-local",
                    "dataDir": "/run/cni-ipam-state",
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "ranges": [[{"subnet": pod_cidr}]],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def node_routes(nodes: dict[str, tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """For each node (name -> (address, pod CIDR)), the routes to every other node's pods: (CIDR, via)."""
    return {
        name: [(cidr, address) for other, (address, cidr) in sorted(nodes.items()) if other != name]
        for name in nodes
    }


def example_doc(path: Path, triton_image: str) -> dict[str, Any]:
    """An example CR in NAMESPACE, its models from the claim `models`, on CPU with small requests."""
    doc = yaml.safe_load(path.read_text())
    doc["metadata"] = {"name": doc["metadata"]["name"], "namespace": NAMESPACE}
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    doc["spec"].setdefault("server", {}).update(gpus=0, image=triton_image, resources=SMALL)
    return doc


# ---------------------------------------------------------------------------------------------------
# the cluster


def run_kubectl(
    binary: str | Path, kubeconfig: str | Path, args: tuple[str, ...], input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl with this kubeconfig, its output captured (the caller decides what a failure means)."""
    return subprocess.run(
        [str(binary), f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        check=False,
    )


class KindCluster:
    def __init__(self, engine: Engine, name: str, workdir: Path, kubectl: str) -> None:
        self.engine = engine
        self.name = name
        self.workdir = workdir
        self.kind = str(tool_path("kind"))
        self.kubeconfig = workdir / "kubeconfig"
        self.kubectl_bin = kubectl
        self.sysctls_file = workdir / "host-sysctls.json"  # the host's, before the cluster

    def run_kind(self, *args: str, timeout: float = 900) -> str:
        proc = subprocess.run(
            [self.kind, *args],
            env=self.engine.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"kind {' '.join(args[:2])} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
            )
        return proc.stdout + proc.stderr

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        proc = run_kubectl(self.kubectl_bin, self.kubeconfig, args, input)
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])} failed: {proc.stderr.strip()[-2000:]}")
        return proc.stdout

    def node_names(self) -> list[str]:
        return self.run_kind("get", "nodes", "--name", self.name).split()

    def address(self, node: str) -> str:
        fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
        return self.engine.docker("inspect", "-f", fmt, node).stdout.strip()

    def netns(self, node: str) -> str:
        """The node container's network namespace (ClusterIPs and pod IPs are routed there)."""
        pid = self.engine.docker("inspect", "-f", "{{.State.Pid}}", node).stdout.strip()
        return f"/proc/{pid}/ns/net"

    def create(self, image: str, config: dict[str, Any]) -> None:
        self.run_kind("delete", "cluster", "--name", self.name)
        # the nodes' kubelets rewrite host-wide sysctls: `delete` puts back the values from before
        if not self.sysctls_file.exists():
            self.sysctls_file.write_text(json.dumps(read_sysctls()))
        path = self.workdir / "kind.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        scratch = self.workdir / "kind-kubeconfig"
        self.run_kind(
            "create", "cluster", "--name", self.name, "--image", image, "--config", str(path),
            "--kubeconfig", str(scratch), "--wait", "0s",
        )  # fmt: skip
        # the API server at the control-plane node's address: the same from the engine's network, the
        # nodes' and (on a Linux host) the host's, unlike the port kind publishes on 127.0.0.1
        kc = yaml.safe_load(scratch.read_text())
        kc["clusters"][0]["cluster"]["server"] = f"https://{self.address(self.name + '-control-plane')}:6443"
        self.kubeconfig.write_text(yaml.safe_dump(kc))
        self.kubeconfig.chmod(0o600)
        scratch.unlink()

    def install_cni(self, timeout: float = 120) -> dict[str, tuple[str, str]]:
        """Each node's pod CIDR (from the controller manager) as a ptp conflist on it, and routes to the
        others' pods; returns name -> (address, CIDR) once every node is Ready."""
        deadline = time.monotonic() + timeout
        nodes: dict[str, tuple[str, str]] = {}
        while time.monotonic() < deadline:
            items = json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
            nodes = {
                n["metadata"]["name"]: (self.address(n["metadata"]["name"]), n["spec"].get("podCIDR", ""))
                for n in items
            }
            if len(nodes) == len(self.node_names()) and all(cidr for _, cidr in nodes.values()):
                break
            time.sleep(1)
        else:
            raise RuntimeError(f"nodes without a pod CIDR after {timeout:.0f}s: {nodes}")
        routes = node_routes(nodes)
        for name, (_, cidr) in nodes.items():
            script = ["sysctl -qw net.ipv4.ip_forward=1"]
            script += [f"ip route replace {dst} via {via}" for dst, via in routes[name]]
            script.append(f"cat > {CNI_CONF}.tmp && mv {CNI_CONF}.tmp {CNI_CONF}")
            proc = subprocess.run(
                ["docker", "exec", "-i", name, "sh", "-ec", "; ".join(script)],
                input=json.dumps(cni_conflist(cidr), indent=2),
                env=self.engine.env,
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"CNI on {name}: {proc.stderr.strip()}")
        self.kubectl("wait", "--for=condition=Ready", "nodes", "--all", f"--timeout={int(timeout)}s")
        return nodes

    def load(self, archive: Path, nodes: list[str]) -> None:
        self.run_kind("load", "image-archive", str(archive), "--name", self.name, "--nodes", ",".join(nodes))

    def trust_registry(self, address: str) -> None:
        """Every node pulls from the plain-HTTP registry at `address` (containerd reads the file per pull)."""
        folder = f"{REGISTRY_HOSTS_DIR}/{address}"
        for node in self.node_names():
            write = f'mkdir -p "{folder}" && printf %s "$0" > "{folder}/hosts.toml"'
            self.engine.docker("exec", node, "sh", "-c", write, registry_hosts_toml(address))

    def pull(self, reference: str, nodes: list[str], alias: str | None = None) -> None:
        """`reference` pulled by the nodes' containerd (crictl, as the kubelet pulls), also named `alias`."""
        for node in nodes:
            self.engine.docker("exec", node, "crictl", "pull", reference, timeout=600)
            if alias:
                self.tag(node, reference, alias)

    def tag(self, node: str, image: str, alias: str) -> None:
        """`image`, already on `node`, also under the name `alias` (no pull)."""
        refs = map(full_reference, (image, alias))
        self.engine.docker("exec", node, "ctr", "-n", "k8s.io", "images", "tag", "--force", *refs)

    def workload_nodes(self) -> list[str]:
        """The nodes pods run on: the workers (kind taints its control plane when it has any)."""
        names = self.node_names()
        return [n for n in names if not n.endswith("-control-plane")] or names

    def delete(self) -> None:
        with_engine = subprocess.run(
            [self.kind, "delete", "cluster", "--name", self.name],
            env=self.engine.env,
            capture_output=True,
            check=False,
        )
        if with_engine.returncode != 0:
            log(f"kind delete cluster failed: {with_engine.stderr.decode(errors='replace').strip()}")
        if not self.sysctls_file.exists():
            return
        others = self.engine.docker("ps", "-q", "--filter", "label=io.x-k8s.kind.role", check=False)
        if others.stdout.strip():
            log("other kind nodes run on this engine: the sysctls their kubelets set are left as they are")
        else:
            for line in restore_sysctls(json.loads(self.sysctls_file.read_text())):
                log(line)
        self.sysctls_file.unlink()


# ---------------------------------------------------------------------------------------------------
# the run


def registry_hosts_toml(address: str) -> str:
    """containerd's hosts.toml for a registry served over plain HTTP at `address` (HOST:PORT)."""
    return f'server = "http://{address}"\n\n[host."http://{address}"]\n  capabilities = ["pull", "resolve"]\n'


def public_charts() -> str:
    """The chart's public OCI repository prefix the docs name (oci://OWNER/charts/), from the chart's
    default image repository as the release workflow publishes both (oci://REGISTRY/OWNER/charts)."""
    from e2e.release import chart_repository

    return f"oci://{chart_repository().rpartition('/')[0]}/"


def helm_mapping(public: str, local: str) -> str:
    """A bash function `helm` that reads a chart reference under `public` (oci://OWNER/) from `local`
    (oci://REGISTRY/OWNER/, plain HTTP) and passes everything else on: the tutorial's commands run as
    written against the run's own registry."""
    return "\n".join([
        "helm() {",
        "  local args=() arg",
        '  for arg in "$@"; do',
        "    case \"$arg\" in",
        f"      {shlex.quote(public)}*) args+=({shlex.quote(local)}\"${{arg#{public}}}\" --plain-http) ;;",
        '      *) args+=("$arg") ;;',
        "    esac",
        "  done",
        '  command helm "${args[@]}"',
        "}",
        "",
    ])  # fmt: skip


def publish_release(registry: str, workdir: Path, built: dict[str, Any]) -> dict[str, Any]:
    """The operator and assembler images (`built`: e2e/images.py's) and the chart as `make release` builds
    them, pushed to `registry` as the release workflow publishes (e2e/release.py publish): the images under
    REGISTRY/OWNER/, the chart with their digests as its defaults under oci://REGISTRY/OWNER/charts."""
    from e2e import release

    version = release.tree_version()
    owner = release.chart_repository().rpartition("/")[0].partition("/")[2]
    out = workdir / "release"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    images = release.build_images(version, f"{registry}/{owner}/operator", out, built=built)
    (out / "images.json").write_text(json.dumps({"version": version, **images}, indent=2) + "\n")
    return release.publish([out], workdir / "published", f"oci://{registry}/{owner}/charts", plain_http=True)


def run_tutorial(cluster: KindCluster, helm: Helm, part: str, local: str, work: Path) -> str:
    """docs/getting-started/cluster.md's runnable blocks (e2e/tutorial.py) of `part` ("before" or
    "clean-up") as written, in one bash session from the repository's root, with this cluster's kubectl
    and helm (its chart references read from the run's registry, `local`). What the page starts in the
    background (a port-forward) is ended with the session's process group."""
    from e2e import tutorial

    before, clean_up = tutorial.blocks(tutorial.PAGE.read_text())
    text = tutorial.script(before if part == "before" else clean_up, python=sys.executable, workdir=work)
    env = {
        **os.environ,
        **helm.env,
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": os.pathsep.join(
            [
                *(str(Path(b).parent) for b in (cluster.kubectl_bin, helm.binary, sys.executable)),
                os.environ["PATH"],
            ]
        ),
    }
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / f"tutorial-{part}.log"
    with log_path.open("w") as out:
        proc = subprocess.Popen(
            ["bash", "-c", helm_mapping(public_charts(), local) + text], cwd=ROOT, env=env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            code = proc.wait(timeout=TUTORIAL_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = -1
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
    logged = log_path.read_text()
    steps = [line for line in logged.splitlines() if line.startswith(f"# {tutorial.PAGE.name}:")]
    if code != 0:
        where = steps[-1][2:] if steps else "before its first block"
        raise RuntimeError(f"failed at {where} (exit {code}): {logged[-1500:]}")
    return f"{len(steps)} blocks ran as written ({log_path})"


def has_gpu_runtime() -> bool:
    if shutil.which("nvidia-smi") is None or shutil.which("docker") is None:
        return False
    info = subprocess.run(
        ["docker", "info", "--format", "{{.DefaultRuntime}}"], capture_output=True, text=True
    )
    return info.returncode == 0 and info.stdout.strip() == "nvidia"


def node_image(engine: Engine, mode: str) -> tuple[str, str]:
    """(image, "published" | "local") per KIND_NODE_IMAGE (auto, local, published)."""
    if mode not in ("auto", "local", "published"):
        raise SystemExit(f"KIND_NODE_IMAGE must be auto, local or published, not {mode!r}")
    if mode != "local":
        found = published_node_image(engine.docker)
        if found:
            return found, "published"
        if mode == "published":
            raise NodeImageError(
                "KIND_NODE_IMAGE=published, and kind's published node image cannot be pulled"
            )
    return local_node_image(engine.docker, engine.env), "local"


def models_claim(cluster: KindCluster) -> None:
    """A hostPath PersistentVolume at MODELS_DIR (the example models on every node) bound to `models`."""
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{NAMESPACE}-models"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "hostPath": {"path": MODELS_DIR, "type": "Directory"},
                "claimRef": {"namespace": NAMESPACE, "name": "models"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "models", "namespace": NAMESPACE},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "volumeName": f"{NAMESPACE}-models",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))


def wait_ready(cluster: KindCluster, name: str, timeout: float = READY_TIMEOUT) -> float:
    t0 = time.monotonic()
    cluster.kubectl(
        "wait",
        "--for=condition=Ready",
        f"tritonpipeline/{name}",
        "-n",
        NAMESPACE,
        f"--timeout={int(timeout)}s",
    )
    return time.monotonic() - t0


def router_note(cluster: KindCluster, name: str) -> str:
    """'; N native routers' for a pipeline whose routers run on the backend the install chose (ROUTER);
    raises when the operator chose another: the pods answering right would then prove nothing about it."""
    tp = json.loads(cluster.kubectl("get", "tritonpipeline", name, "-n", NAMESPACE, "-o", "json"))
    graph = tp.get("status", {}).get("graph", {})
    routers = graph.get("routers", [])
    if not routers:
        return ""
    chosen = graph.get("routerBackend", {})
    if chosen.get("backend") != ROUTER:
        raise RuntimeError(f"{name}: routers on {chosen or 'an unrecorded backend'}, not {ROUTER}")
    return f"; {len(routers)} {ROUTER} router(s)"


def check_example(cluster: KindCluster, doc: dict[str, Any], client_netns: str, work: Path) -> str:
    """Every pipeline of the example checked through its Service against the reference evaluation."""
    name = doc["metadata"]["name"]
    service = json.loads(cluster.kubectl("get", "service", name, "-n", NAMESPACE, "-o", "json"))
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")
    spec = work / f"{name}.json"
    spec.write_text(json.dumps(doc))
    cmd = [sys.executable, str(ROOT / "e2e" / "infer.py"), "--url", f"{service['spec']['clusterIP']}:{port}"]
    with in_netns_path(client_netns):
        proc = subprocess.run([*cmd, "--spec", str(spec)], capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    return proc.stdout.strip().splitlines()[-1][:200] if proc.stdout.strip() else "ok"


def replica_nodes(cluster: KindCluster, name: str) -> dict[str, str]:
    selector = f"{PIPELINE_LABEL}={name}"
    pods = json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json"))["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods}


def run_scenarios(
    cluster: KindCluster, images: dict[str, str], client_netns: str, files: list[str], report: Report
) -> None:
    """The pod-level scenario tests (tests/cluster/test_node_*.py that take a kubeconfig) on this cluster."""
    env = cluster_env(cluster, images, client_netns)
    junit = cluster.workdir / "scenarios.xml"
    tests = [str(ROOT / "tests" / "cluster" / t) for t in files]
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-m",
        "node",
        f"--junitxml={junit}",
        *tests,
    ]
    subprocess.run(cmd, env=env, cwd=ROOT, check=False)
    if not junit.exists():
        report.rows.append(Row("scenarios", False, 0.0, "pytest wrote no report"))
        return
    report.rows += junit_rows(junit.read_text())


def run_bench(cluster: KindCluster, images: dict[str, str], client_netns: str, module: str) -> str:
    """`python -m MODULE` (a bench of bench/) on this cluster, given to it as to the scenarios."""
    proc = subprocess.run(
        [sys.executable, "-m", module], env=cluster_env(cluster, images, client_netns), cwd=ROOT, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"python -m {module} exited {proc.returncode}")
    return f"python -m {module}: done"


def cluster_env(cluster: KindCluster, images: dict[str, str], client_netns: str) -> dict[str, str]:
    """What node_cluster.Cluster.from_env reads: this cluster, its images, the client's netns."""
    env = {
        **cluster.engine.env,
        "TRITONPIPELINE_E2E_KUBECONFIG": str(cluster.kubeconfig),
        "TRITONPIPELINE_E2E_NODES": ",".join(cluster.workload_nodes()),
        "TRITONPIPELINE_E2E_OPERATOR_IMAGE": images["operator"],
        "TRITONPIPELINE_E2E_ASSEMBLER_IMAGE": images["assembler"],
        "TRITONPIPELINE_E2E_TRITON_IMAGE": images["triton"],
        "TRITONPIPELINE_E2E_MODELS_DIR": MODELS_DIR,
        "TRITONPIPELINE_E2E_NETNS": client_netns,
        "PATH": f"{Path(cluster.kubectl_bin).parent}:{os.environ.get('PATH', '')}",
    }
    env.pop("TRITONPIPELINE_PHASE_LOG", None)  # the caller's pytest session reports this run as one test
    return env


def junit_rows(junit: str) -> list[Row]:
    """A report row per test case of pytest's JUnit XML: failed, errored and skipped are not passes (a
    skip proves nothing); the figures are the test's record_property() values."""
    import xml.etree.ElementTree as ET

    rows = []
    for case in ET.fromstring(junit).iter("testcase"):
        problem = next((e for e in (case.find("failure"), case.find("error")) if e is not None), None)
        skipped = case.find("skipped")
        if skipped is not None:  # proves nothing here: not a pass
            problem = skipped
        detail = "" if problem is None else problem.get("message", "")[:150]
        if skipped is not None:
            detail = f"skipped: {detail}"
        row = Row(f"scenario {case.get('name')}", problem is None, float(case.get("time", 0)), detail)
        # what the test measured: its record_property() figures
        row.figures = {prop.get("name", ""): _number(prop.get("value", "")) for prop in case.iter("property")}
        rows.append(row)
    return rows


def _number(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def write_results(path: Path, report: Report, nodes: int, image_kind: str, timings: dict[str, float]) -> None:
    scenarios = {
        r.step: {
            "passed": r.ok,
            "seconds": round(r.seconds, 1),
            **({"detail": r.detail} if r.detail else {}),
            **r.figures,
        }
        for r in report.rows
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "nodes": nodes,
                "node_image": image_kind,
                "scenarios": scenarios,
                "timings": {k: round(v, 1) for k, v in timings.items()},
            },
            indent=2,
        )
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.kind", description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="worker nodes (default 2)")
    parser.add_argument(
        "--no-scenarios", action="store_true", help="only the examples, not the scenario tests"
    )
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIO_TESTS),
        help="the scenario test files of tests/cluster/ to run, comma-separated (default: every anycluster "
        "file; the benches name theirs)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        help=f"where the report goes (default {RESULTS.relative_to(ROOT)} for the default scenarios, else "
        "e2e-kind.json in the workdir: a bench's run keeps the committed report)",
    )
    parser.add_argument(
        "--bench",
        metavar="MODULE",
        help="after the examples, run `python -m MODULE` on the cluster instead of the scenarios "
        "(make bench-e2e-node, bench-upgrade)",
    )
    parser.add_argument("--keep", action="store_true", default=os.environ.get("KEEP_CLUSTER") == "1")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "tritonpipeline-kind")
    parser.add_argument(
        "--prepare", action="store_true", help="only build (or find) the node image and the images, then stop"
    )
    parser.add_argument(
        "--down", action="store_true", help="delete a cluster kept with KEEP_CLUSTER=1 and stop its engine"
    )
    args = parser.parse_args(argv)
    if args.prepare:
        return prepare(args.workdir)
    if args.down:
        return down(args.workdir)
    off = args.no_scenarios or bool(args.bench) or os.environ.get("E2E_SCENARIOS", "1") == "0"
    scenarios = [] if off else args.scenarios.split(",")
    if args.results is None:
        default = not args.bench and (off or scenarios == list(SCENARIO_TESTS))
        args.results = RESULTS if default else args.workdir / "e2e-kind.json"
    unknown = [t for t in scenarios if not (ROOT / "tests" / "cluster" / t).is_file()]
    if unknown:
        parser.error(f"--scenarios: no such test file in tests/: {', '.join(unknown)}")
    if has_gpu_runtime():
        log("an NVIDIA GPU and Docker's nvidia runtime are here: the GPU variant (e2e/kind-gpu.sh)")
        os.execvp("bash", ["bash", str(ROOT / "e2e" / "kind-gpu.sh")])
    if os.geteuid() != 0:
        print(
            "make e2e: the test client runs inside a kind node's network namespace (ClusterIPs are routed "
            "there), which needs root: sudo -E make e2e",
            file=sys.stderr,
        )
        return 2

    def interrupted(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    # also where the caller started us with SIGINT ignored (a background job of a non-interactive shell, as
    # CI runs make): Ctrl-C and SIGTERM always end in the cleanup below
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    report = Report()
    timings: dict[str, float] = {}
    t_all = time.monotonic()
    args.workdir.mkdir(parents=True, exist_ok=True)
    engine: Engine | None = None
    cluster: KindCluster | None = None
    image_kind = "none"
    try:
        t = time.monotonic()
        try:
            engine = Engine.find_or_start(args.workdir / "docker")
        except EngineError as err:
            print(f"make e2e: {err}", file=sys.stderr)
            return 2
        timings["engine"] = time.monotonic() - t
        t = time.monotonic()
        image, image_kind = node_image(engine, os.environ.get("KIND_NODE_IMAGE", "auto"))
        timings["node_image"] = time.monotonic() - t
        if not report.run("Docker engine: privileged containers", lambda: engine.check_privileged(image)):
            raise StepFailed
        t = time.monotonic()
        images = all_images()
        timings["images"] = time.monotonic() - t
        kubectl = ensure_node_binaries()["kubectl"]
        helm = Helm(ensure_tool("helm"), home=args.workdir / "helm", kubeconfig=args.workdir / "kubeconfig")
        config = cluster_config(
            args.workers,
            ROOT / "model_repository",
            cgroup_v1=cgroup_v1(Path("/proc/self/mountinfo").read_text()),
            no_sys_resource=lacks_sys_resource(),
        )
        crane = ensure_tool("crane")
        with engine.inside(), contextlib.ExitStack() as stack:
            cluster = KindCluster(engine, CLUSTER_NAME, args.workdir, kubectl)

            def create() -> str:
                t = time.monotonic()
                cluster.create(image, config)
                timings["kind_create"] = time.monotonic() - t
                nodes = cluster.install_cni()
                timings["cluster_ready"] = time.monotonic() - t
                return f"{len(nodes)} nodes Ready ({image_kind} node image): " + ", ".join(
                    f"{n} {cidr}" for n, (_, cidr) in sorted(nodes.items())
                )

            if not report.run(f"kind cluster: 1 control plane + {args.workers} workers", create):
                raise StepFailed

            client_netns = cluster.netns(cluster.workload_nodes()[0])
            published: dict[str, Any] = {}

            def registry() -> str:
                # the release as `make release` builds it and the release workflow publishes it, into a
                # registry of the run's own that every node pulls from
                t = time.monotonic()
                with in_netns_path(client_netns):  # crane's process lives in the first worker's namespace
                    where = stack.enter_context(
                        registry_serve(
                            crane, args.workdir, host=cluster.address(cluster.workload_nodes()[0]),
                            port=REGISTRY_PORT,
                        )
                    )  # fmt: skip
                cluster.trust_registry(where)
                published.update(
                    publish_release(where, args.workdir, {r: images[r] for r in ("operator", "assembler")}),
                    registry=where,
                )
                timings["publish"] = time.monotonic() - t
                chart = published["chart"]
                return (
                    f"{where}: chart {chart['reference']}:{chart['version']} ({chart['digest'][:19]}), "
                    f"operator {published['images']['operator']['reference']}"
                )

            def load() -> str:
                # Triton is not ours to release: loaded, and also named as the operator's default image
                t = time.monotonic()
                triton = images["triton"]
                cluster.load(triton.archive, cluster.workload_nodes())
                for node in cluster.workload_nodes():
                    cluster.tag(node, triton.name, DEFAULT_IMAGE)
                timings["kind_load"] = time.monotonic() - t
                return f"{triton.name} ({triton.size_mb:.0f} MB), also named {DEFAULT_IMAGE}"

            def tutorial(part: str) -> str:
                owner = published["images"]["operator"]["repository"].rpartition("/")[0]
                return run_tutorial(cluster, helm, part, f"oci://{owner}/", args.workdir / "tutorial")

            def install() -> str:
                t = time.monotonic()
                chart = published["chart"]
                # every router on the native router, carried by the operator image (the scenarios'
                # `helm upgrade --install` goes back to the chart's default: the Python router)
                helm.run(
                    "install", RELEASE, chart["reference"], "--version", chart["version"], "--plain-http",
                    "-n", RELEASE_NS, "--create-namespace", "--set", f"operator.router={ROUTER}",
                    "--wait", "--timeout", "5m",
                )  # fmt: skip
                timings["helm_install"] = time.monotonic() - t
                # the scenarios install the chart of the tree, which names the images as e2e/images.py
                # built them: the same images, pulled by digest, under those names on every node
                for role in ("operator", "assembler"):
                    ref = published["images"][role]["reference"]
                    cluster.pull(ref, cluster.workload_nodes(), alias=images[role].name)
                return (
                    f"{RELEASE}-triton-pipeline from {chart['reference']}:{chart['version']} rolled out in "
                    f"{timings['helm_install']:.0f}s, its images pulled by digest"
                )

            if not report.run("OCI registry: the release's images and chart pushed", registry):
                raise StepFailed
            # the results say where the chart and the images came from
            report.rows[-1].figures.update(
                chart=f"{published['chart']['reference']}:{published['chart']['version']}@"
                f"{published['chart']['digest']}",
                **{role: entry["reference"] for role, entry in published["images"].items()},
            )
            if not report.run("kind load: the CPU Triton image", load):
                raise StepFailed
            tutorial_ok = report.run("docs/getting-started/cluster.md as written (before Clean up)",
                                     lambda: tutorial("before"))  # fmt: skip
            cleaned = report.run("docs/getting-started/cluster.md: Clean up", lambda: tutorial("clean-up"))
            if not (tutorial_ok and cleaned):  # no second operator beside the one installed next

                def uninstall() -> str:
                    args_ = (
                        "uninstall",
                        TUTORIAL_RELEASE,
                        "-n",
                        TUTORIAL_RELEASE,
                        "--ignore-not-found",
                        "--wait",
                    )
                    return helm.run(*args_).stdout.strip()

                # a failure here is a row and ends the run through its cleanup, like every other step
                if not report.run(
                    f"helm uninstall {TUTORIAL_RELEASE} (the tutorial did not clean up)", uninstall
                ):
                    raise StepFailed
            if not report.run("helm install from the OCI registry", install):
                raise StepFailed
            models_claim(cluster)
            work = args.workdir / "specs"
            work.mkdir(exist_ok=True)
            for example in sorted((ROOT / "examples").glob("*.yaml")):
                doc = example_doc(example, images["triton"].name)
                name = doc["metadata"]["name"]

                def apply_and_check(doc: dict[str, Any] = doc, name: str = name) -> str:
                    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
                    ready = wait_ready(cluster, name)
                    timings[f"ready_{name}"] = ready
                    answer = check_example(cluster, doc, client_netns, work)
                    where = sorted(set(replica_nodes(cluster, name).values()))
                    return f"Ready {ready:.0f}s on {', '.join(where)}; {answer}{router_note(cluster, name)}"

                report.run(f"example {example.name}: Ready and answering right", apply_and_check)
            names = {k: v.name for k, v in images.items()}
            if scenarios or args.bench:
                # the examples' pods leave the CPU to the scenarios
                cluster.kubectl("delete", "namespace", NAMESPACE, "--timeout=120s", check=False)
            if scenarios:
                t = time.monotonic()
                run_scenarios(cluster, names, client_netns, scenarios, report)
                timings["scenarios"] = time.monotonic() - t
            if args.bench:
                bench = args.bench
                report.run(f"bench {bench}", lambda: run_bench(cluster, names, client_netns, bench))
    except StepFailed:
        pass
    except (ImageError, NodeImageError) as err:
        report.rows.append(Row("node image and images", False, 0.0, str(err).splitlines()[0][:300]))
        print(str(err), file=sys.stderr)
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        report.rows.append(Row("interrupted", False, 0.0, "Ctrl-C or SIGTERM"))
    finally:
        timings["total"] = time.monotonic() - t_all
    return finish(report, args, timings, image_kind, engine, cluster)


def down(workdir: Path) -> int:
    """What KEEP_CLUSTER=1 left: the cluster deleted, the engine stopped when a run started it."""
    engine = Engine.saved(workdir / "docker") or Engine(dict(os.environ))
    KindCluster(engine, CLUSTER_NAME, workdir, "kubectl").delete()
    for line in engine.stop():
        log(line)
    log(f"cluster {CLUSTER_NAME} deleted")
    return 0


def prepare(workdir: Path) -> int:
    """What a run needs before its cluster (`make test` does it as a phase of its own): the node image in
    the engine (started and stopped here when it is ours) and the operator and Triton images."""
    if os.geteuid() != 0 and shutil.which("docker") is None:
        log("not root and no Docker engine: the kind test will skip")
        return 0
    try:
        engine = Engine.find_or_start(workdir / "docker")
    except EngineError as err:
        log(f"{err}: the kind test will skip")
        return 0
    try:
        image, image_kind = node_image(engine, os.environ.get("KIND_NODE_IMAGE", "auto"))
        all_images()
        ensure_tool("crane")  # the release's registry
        log(f"ready: the {image_kind} node image {image} and the operator and CPU Triton images")
    finally:
        for line in engine.stop():
            log(line)
    return 0


def finish(
    report: Report, args: argparse.Namespace, timings: dict[str, float], image_kind: str,
    engine: Engine | None, cluster: KindCluster | None,
) -> int:  # fmt: skip
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # cleanup is not interrupted
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        if args.keep and cluster is not None:
            where = f"nsenter --net=/run/netns/{engine.netns} " if engine and engine.netns else ""
            log(f"kept: {where}{cluster.kubectl_bin} --kubeconfig {cluster.kubeconfig} get nodes")
            log(f"delete it with: .venv/bin/python -m e2e.kind --down --workdir {args.workdir}")
        else:
            t = time.monotonic()
            if cluster is not None:
                cluster.delete()
            for line in engine.stop() if engine else []:
                log(line)
            timings["teardown"] = time.monotonic() - t
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if report.rows:
        print(report.table())
        write_results(args.results, report, args.workers + 1, image_kind, timings)
        rounded = {k: round(v) for k, v in timings.items()}
        log(f"results: {args.results}; timings {json.dumps(rounded)}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
