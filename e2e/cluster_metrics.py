"""The autoscaling loop's metric path on a running cluster (`make e2e-autoscaling`: kind), all of it real:

- Prometheus discovers the Triton pods through the kube-apiserver (`kubernetes_sd_configs`, role pod,
  limited to the namespaces given) and scrapes their `metrics` port, labelling every series with
  `namespace` and `pod` as the chart's prometheus-adapter rules expect. Built from its Go module by
  e2e/build-gotool.sh with only Kubernetes discovery compiled in: Debian's package (2.42) is built without
  Kubernetes service discovery (`kubernetes_sd_configs` is an unknown field there);
- prometheus-adapter (built from its Go module by e2e/build-gotool.sh) serves the chart's rules
  (charts/triton-pipeline/files/prometheus-adapter-rules.yaml) as the aggregated custom metrics API:
  an APIService v1beta1.custom.metrics.k8s.io backed by a Service without selector whose EndpointSlice
  points at the adapter, a process on the client's address in the cluster network, serving a certificate
  of a CA of its own (the APIService's caBundle);
- the HPA controller of the cluster's kube-controller-manager reads that API.

Both run as processes in the cluster network (`Cluster.network()`: a kind node's network namespace), ended
by PID, each as a ServiceAccount of its own (a token from `kubectl create token`, as in a pod) that RBAC
grants only what it needs: Prometheus may list and watch pods in the scraped namespaces; the adapter may
read the objects its rules name (namespaces, pods), delegate authentication and authorization
(system:auth-delegator) and read the apiserver's request-header configuration
(extension-apiserver-authentication-reader in kube-system).
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

from harness.pki import issue, make_ca

ROOT = Path(__file__).resolve().parents[1]
ADAPTER_RULES = ROOT / "charts" / "triton-pipeline" / "files" / "prometheus-adapter-rules.yaml"
MONITORING_NS = "monitoring"
ADAPTER_NAME = "prometheus-adapter"
PROMETHEUS_NAME = "prometheus"
ADAPTER_PORT = 6445  # on the client's address in the cluster network
PROMETHEUS_PORT = 9090  # on that network namespace's loopback: the adapter and the test query it there
CUSTOM_METRICS = ("custom.metrics.k8s.io", "v1beta1")
# the label the operator puts on every pod of a pipeline, as Prometheus names pod labels
PIPELINE_POD_LABEL = "__meta_kubernetes_pod_label_serving_tritonpipeline_io_pipeline"


class MetricsError(RuntimeError):
    pass


class ClusterAccess(Protocol):
    """What the metric path needs of a cluster (tests/node_cluster.py's `Cluster`)."""

    kubeconfig: Path

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str: ...

    def network(self) -> contextlib.AbstractContextManager[None]: ...

    def address(self) -> str: ...


def prometheus_config(kubeconfig: Path, namespaces: Sequence[str], interval: str) -> dict[str, Any]:
    """Scrape the `metrics` container port of every pipeline pod in `namespaces`, found through the
    apiserver, with the `namespace` and `pod` target labels the adapter rules select on."""
    meta = "__meta_kubernetes_"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {
                "job_name": "tritonserver",
                "scrape_timeout": interval,
                "kubernetes_sd_configs": [
                    {
                        "role": "pod",
                        "kubeconfig_file": str(kubeconfig),
                        "namespaces": {"names": list(namespaces)},
                    }
                ],
                "relabel_configs": [
                    {"source_labels": [f"{PIPELINE_POD_LABEL}"], "regex": ".+", "action": "keep"},
                    {
                        "source_labels": [f"{meta}pod_container_port_name"],
                        "regex": "metrics",
                        "action": "keep",
                    },
                    {"source_labels": [f"{meta}pod_phase"], "regex": "Running", "action": "keep"},
                    {"source_labels": [f"{meta}namespace"], "target_label": "namespace"},
                    {"source_labels": [f"{meta}pod_name"], "target_label": "pod"},
                ],
            }
        ],
    }


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }


def _binding(
    kind: str, name: str, role_kind: str, role: str, account: str, namespace: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": MONITORING_NS}],
    }


def rbac(namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The two identities, ServiceAccounts, with least privilege (see the module docstring)."""
    prom, adapter = "tritonpipeline-e2e-prometheus", "tritonpipeline-e2e-prometheus-adapter"
    watch_pods = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    read_pods = [{"apiGroups": [""], "resources": ["namespaces", "pods"], "verbs": ["get", "list", "watch"]}]
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MONITORING_NS}},
        *(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": n, "namespace": MONITORING_NS},
            }
            for n in (PROMETHEUS_NAME, ADAPTER_NAME)
        ),
        _cluster_role(prom, watch_pods),
        _cluster_role(adapter, read_pods),
    ]
    objects += [_binding("RoleBinding", prom, "ClusterRole", prom, PROMETHEUS_NAME, ns) for ns in namespaces]
    objects += [
        _binding("ClusterRoleBinding", adapter, "ClusterRole", adapter, ADAPTER_NAME),
        _binding(
            "ClusterRoleBinding", f"{adapter}-auth-delegator", "ClusterRole", "system:auth-delegator",
            ADAPTER_NAME,
        ),
        _binding(
            "RoleBinding", f"{adapter}-auth-reader", "Role", "extension-apiserver-authentication-reader",
            ADAPTER_NAME, "kube-system",
        ),
    ]  # fmt: skip
    return objects


def api_service_objects(ca_bundle: bytes, address: str) -> list[dict[str, Any]]:
    """The adapter behind a Service without selector (an EndpointSlice names `address`, where the
    adapter listens) and the APIService that makes the apiserver proxy custom.metrics.k8s.io to it, its
    certificate checked against `ca_bundle`."""
    group, version = CUSTOM_METRICS
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": ADAPTER_NAME, "namespace": MONITORING_NS},
            "spec": {
                "ports": [{"name": "https", "port": 443, "targetPort": ADAPTER_PORT, "protocol": "TCP"}]
            },
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": ADAPTER_NAME,
                "namespace": MONITORING_NS,
                "labels": {"kubernetes.io/service-name": ADAPTER_NAME},
            },
            "addressType": "IPv4",
            "ports": [{"name": "https", "port": ADAPTER_PORT, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{version}.{group}"},
            "spec": {
                "group": group,
                "version": version,
                "service": {"name": ADAPTER_NAME, "namespace": MONITORING_NS, "port": 443},
                "caBundle": base64.b64encode(ca_bundle).decode(),
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    ]


def token_kubeconfig(admin: dict[str, Any], token: str) -> dict[str, Any]:
    """A kubeconfig for a ServiceAccount's `token`: the server and CA of the `admin` kubeconfig's cluster."""
    cluster = admin["clusters"][0]["cluster"]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "cluster", "user": "sa"}}],
        "current-context": "sa",
    }


def _as_list(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


class ClusterMetrics:
    """Prometheus + prometheus-adapter + the APIService on a running cluster."""

    def __init__(
        self,
        cluster: ClusterAccess,
        binaries: dict[str, Path],
        namespaces: Sequence[str],
        workdir: Path,
        interval: str = "2s",
    ) -> None:
        """`binaries`: the built "prometheus" and "prometheus-adapter" (e2e/build-gotool.sh)."""
        self.cluster = cluster
        self.binaries = binaries
        self.namespaces = list(namespaces)
        self.interval = interval
        self.workdir = workdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.timings: dict[str, float] = {}

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{PROMETHEUS_PORT}"

    def log_path(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def start(self, timeout: float = 90) -> ClusterMetrics:
        self.workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self.cluster.kubectl("apply", "-f", "-", input=_as_list(rbac(self.namespaces)))
        address = self.cluster.address()
        self._start_prometheus()
        self._start_adapter(address)
        deadline = time.monotonic() + timeout
        self._wait(
            "Prometheus ready",
            lambda: self.fetch(f"{self.prometheus_url}/-/ready"),
            deadline,
            PROMETHEUS_NAME,
        )
        self.timings["prometheus-ready"] = time.monotonic() - t0
        self._wait("the APIService Available", self._api_service_available, deadline, ADAPTER_NAME)
        self.timings["custom-metrics-api-available"] = time.monotonic() - t0
        return self

    def _kubeconfig(self, account: str) -> Path:
        token = self.cluster.kubectl("create", "token", account, "-n", MONITORING_NS, "--duration=2h").strip()
        admin = yaml.safe_load(self.cluster.kubeconfig.read_text())
        path = self.workdir / f"{account}.kubeconfig"
        path.write_text(yaml.safe_dump(token_kubeconfig(admin, token), sort_keys=False))
        path.chmod(0o600)
        return path

    def _spawn(self, name: str, cmd: list[str]) -> None:
        with self.cluster.network(), self.log_path(name).open("ab") as out:
            self.procs[name] = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir,
                start_new_session=True,
            )  # fmt: skip

    def _start_prometheus(self) -> None:
        kubeconfig = self._kubeconfig(PROMETHEUS_NAME)
        conf = self.workdir / "prometheus.yml"
        conf.write_text(
            yaml.safe_dump(prometheus_config(kubeconfig, self.namespaces, self.interval), sort_keys=False)
        )
        self._spawn(
            PROMETHEUS_NAME,
            [
                str(self.binaries[PROMETHEUS_NAME]),
                f"--config.file={conf}",
                f"--storage.tsdb.path={self.workdir / 'prometheus-data'}",
                "--storage.tsdb.retention.time=2h",
                f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}",
                "--log.level=warn",
            ],
        )

    def _start_adapter(self, address: str) -> None:
        kubeconfig = self._kubeconfig(ADAPTER_NAME)
        host = f"{ADAPTER_NAME}.{MONITORING_NS}.svc"
        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        make_ca(pki)  # the adapter's own CA: the APIService's caBundle
        crt, key = issue(
            pki,
            ADAPTER_NAME,
            f"/CN={host}",
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage=serverAuth\nsubjectAltName=DNS:{host},IP:{address}\n",
        )
        objects = api_service_objects((pki / "ca.crt").read_bytes(), address)
        self.cluster.kubectl("apply", "-f", "-", input=_as_list(objects))
        self._spawn(
            ADAPTER_NAME,
            [
                str(self.binaries[ADAPTER_NAME]),
                f"--config={ADAPTER_RULES}",
                f"--prometheus-url={self.prometheus_url}/",
                # series found within this long are served; new pods' series appear after one relist
                f"--metrics-relist-interval={self.interval_seconds * 2}s",
                f"--bind-address={address}",
                f"--secure-port={ADAPTER_PORT}",
                f"--tls-cert-file={crt}",
                f"--tls-private-key-file={key}",
                f"--lister-kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--v=1",
            ],
        )

    def stop(self) -> None:
        """Remove the APIService first (an unavailable aggregated API slows every discovery client and
        blocks namespace deletion), then end the adapter and Prometheus by PID, then their objects."""
        group, version = CUSTOM_METRICS
        self.cluster.kubectl("delete", "apiservice", f"{version}.{group}", "--ignore-not-found", check=False)
        for name in (ADAPTER_NAME, PROMETHEUS_NAME):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(15)
        objects = _as_list(rbac(self.namespaces))
        self.cluster.kubectl(
            "delete", "-f", "-", "--ignore-not-found", "--wait=false", input=objects, check=False
        )

    @property
    def interval_seconds(self) -> int:
        return int(self.interval.rstrip("s"))

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.log_path(name)
        text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else ["(no log)"]
        return f"===== {path} =====\n" + "\n".join(text)

    def _wait(self, what: str, check: Any, deadline: float, name: str) -> None:
        last: Any = None
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise MetricsError(f"{name} exited\n{self.log_tail(name)}")
            try:
                last = check()
            except OSError as err:
                last = err
            if last:
                return
            time.sleep(0.5)
        raise MetricsError(f"{what}: not in time ({last!r})\n{self.log_tail(name)}")

    def fetch(self, url: str, timeout: float = 5) -> str:
        """GET `url` from the cluster network (where Prometheus listens)."""
        with self.cluster.network(), urllib.request.urlopen(url, timeout=timeout) as resp:
            return str(resp.read().decode())

    def _api_service_available(self) -> bool:
        group, version = CUSTOM_METRICS
        out = self.cluster.kubectl("get", "apiservice", f"{version}.{group}", "-o", "json", check=False)
        conditions = json.loads(out or "{}").get("status", {}).get("conditions", [])
        return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

    # -- reading ---------------------------------------------------------------------------------------

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant PromQL query; the result vector."""
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        answer = json.loads(self.fetch(url))
        if answer.get("status") != "success":
            raise MetricsError(f"query failed: {answer}\n{expr}")
        return list(answer["data"]["result"])

    def custom_metric(self, namespace: str, metric: str, metric_selector: str = "") -> dict[str, float]:
        """pod -> value, as the HPA controller reads it from the aggregated API (values in milli-units
        are converted: '1500m' -> 1.5)."""
        group, version = CUSTOM_METRICS
        path = f"/apis/{group}/{version}/namespaces/{namespace}/pods/*/{metric}"
        if metric_selector:
            path += "?" + urllib.parse.urlencode({"metricLabelSelector": metric_selector})
        out = self.cluster.kubectl("get", "--raw", path, check=False)
        if not out:
            return {}
        return {i["describedObject"]["name"]: quantity(i["value"]) for i in json.loads(out).get("items", [])}


def quantity(value: str) -> float:
    """A Kubernetes quantity as the custom metrics API writes values ('12', '1500m', '2k')."""
    suffixes = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9}
    if value and value[-1] in suffixes:
        return float(value[:-1]) * suffixes[value[-1]]
    return float(value)
