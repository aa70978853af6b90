"""The autoscaling loop's metric path on the node test bed (e2e/node.py), all of it real:

- Prometheus discovers the Triton pods through the node's kube-apiserver
  (`kubernetes_sd_configs`, role pod, limited to the namespaces given) and scrapes their `metrics` port,
  labelling every series with `namespace` and `pod` as the chart's prometheus-adapter rules expect.
  Built from its Go module by e2e/build-gotool.sh with only Kubernetes discovery compiled in: Debian's
  package (2.42) is built without Kubernetes service discovery (`kubernetes_sd_configs` is an unknown
  field there);
- prometheus-adapter (built from its Go module by e2e/build-gotool.sh) serves the chart's rules
  (charts/triton-pipeline/files/prometheus-adapter-rules.yaml) as the aggregated custom metrics API:
  an APIService v1beta1.custom.metrics.k8s.io backed by a Service without selector whose EndpointSlice
  points at the adapter, a process on the node address;
- the HPA controller of the node's kube-controller-manager reads that API (e2e/node.py sets its sync
  period to HPA_SYNC_PERIOD).

Both run as processes inside the node's network namespace (Node.spawn: teardown ends them by PID), each
with a client certificate for an identity of its own that RBAC grants only what it needs: Prometheus
may list and watch pods in the scraped namespaces; the adapter may read the objects its rules name
(namespaces, pods), delegate authentication and authorization (system:auth-delegator) and read the
apiserver's request-header configuration (extension-apiserver-authentication-reader in kube-system).
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from e2e.node import NODE_ADDRESS, Node, NodeError
from harness.controlplane import _issue

ROOT = Path(__file__).resolve().parents[1]
ADAPTER_RULES = ROOT / "charts" / "triton-pipeline" / "files" / "prometheus-adapter-rules.yaml"
MONITORING_NS = "monitoring"
ADAPTER_NAME = "prometheus-adapter"
ADAPTER_PORT = 6445  # on the node address (the apiserver has 6443 there)
PROMETHEUS_PORT = 9090  # on the namespace's loopback: the adapter and the test query it there
PROMETHEUS_USER = "tritonpipeline-e2e:prometheus"
ADAPTER_USER = "tritonpipeline-e2e:prometheus-adapter"
CUSTOM_METRICS = ("custom.metrics.k8s.io", "v1beta1")
# the label the operator puts on every pod of a pipeline, as Prometheus names pod labels
PIPELINE_POD_LABEL = "__meta_kubernetes_pod_label_serving_tritonpipeline_io_pipeline"


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
    kind: str, name: str, role_kind: str, role: str, user: str, namespace: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def rbac(namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """Least privilege for the two identities (see the module docstring)."""
    prom, adapter = "tritonpipeline-e2e-prometheus", "tritonpipeline-e2e-prometheus-adapter"
    watch_pods = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    read_pods = [{"apiGroups": [""], "resources": ["namespaces", "pods"], "verbs": ["get", "list", "watch"]}]
    objects = [_cluster_role(prom, watch_pods), _cluster_role(adapter, read_pods)]
    objects += [_binding("RoleBinding", prom, "ClusterRole", prom, PROMETHEUS_USER, ns) for ns in namespaces]
    objects += [
        _binding("ClusterRoleBinding", adapter, "ClusterRole", adapter, ADAPTER_USER),
        _binding(
            "ClusterRoleBinding", f"{adapter}-auth-delegator", "ClusterRole", "system:auth-delegator",
            ADAPTER_USER,
        ),
        _binding(
            "RoleBinding", f"{adapter}-auth-reader", "Role", "extension-apiserver-authentication-reader",
            ADAPTER_USER, "kube-system",
        ),
    ]  # fmt: skip
    return objects


def api_service_objects(ca_bundle: bytes) -> list[dict[str, Any]]:
    """The adapter behind a Service without selector (an EndpointSlice names the node address) and the
    APIService that makes the apiserver proxy custom.metrics.k8s.io to it, its certificate checked."""
    group, version = CUSTOM_METRICS
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MONITORING_NS}},
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
            "endpoints": [{"addresses": [NODE_ADDRESS], "conditions": {"ready": True}}],
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


def _as_list(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


class NodeMetrics:
    """Prometheus + prometheus-adapter + the APIService on a started `Node`."""

    def __init__(
        self, node: Node, binaries: dict[str, Path], namespaces: Sequence[str], interval: str = "2s"
    ) -> None:
        """`binaries`: the built "prometheus" and "prometheus-adapter" (e2e/build-gotool.sh)."""
        self.node = node
        self.binaries = binaries
        self.namespaces = list(namespaces)
        self.interval = interval
        self.workdir = node.workdir / "metrics"
        self.timings: dict[str, float] = {}

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{PROMETHEUS_PORT}"

    def start(self, timeout: float = 90) -> NodeMetrics:
        assert self.node.cp is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self.node.kubectl("apply", "-f", "-", input=_as_list(rbac(self.namespaces)))
        self._start_prometheus(str(self.binaries["prometheus"]))
        self._start_adapter()
        deadline = time.monotonic() + timeout
        self._wait(
            "Prometheus ready", lambda: self._get(f"{self.prometheus_url}/-/ready"), deadline, "prometheus"
        )
        self.timings["prometheus-ready"] = time.monotonic() - t0
        self._wait("the APIService Available", self._api_service_available, deadline, ADAPTER_NAME)
        self.timings["custom-metrics-api-available"] = time.monotonic() - t0
        return self

    def _start_prometheus(self, binary: str) -> None:
        assert self.node.cp is not None
        kubeconfig = self.node.cp.write_kubeconfig(self.workdir / "prometheus.kubeconfig", PROMETHEUS_USER)
        conf = self.workdir / "prometheus.yml"
        conf.write_text(
            yaml.safe_dump(prometheus_config(kubeconfig, self.namespaces, self.interval), sort_keys=False)
        )
        self.node.spawn(
            "prometheus",
            [
                binary,
                f"--config.file={conf}",
                f"--storage.tsdb.path={self.workdir / 'prometheus-data'}",
                "--storage.tsdb.retention.time=2h",
                f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}",
                "--log.level=warn",
            ],
        )

    def _start_adapter(self) -> None:
        cp = self.node.cp
        assert cp is not None
        kubeconfig = cp.write_kubeconfig(self.workdir / "adapter.kubeconfig", ADAPTER_USER)
        host = f"{ADAPTER_NAME}.{MONITORING_NS}.svc"
        crt = cp.pki / f"{ADAPTER_NAME}.crt"
        key = cp.pki / f"{ADAPTER_NAME}.key"
        if not crt.exists():
            crt, key = _issue(
                cp.pki,
                ADAPTER_NAME,
                f"/CN={host}",
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                f"extendedKeyUsage=serverAuth\nsubjectAltName=DNS:{host},IP:{NODE_ADDRESS}\n",
            )
        self.node.kubectl(
            "apply", "-f", "-", input=_as_list(api_service_objects((cp.pki / "ca.crt").read_bytes()))
        )
        self.node.spawn(
            ADAPTER_NAME,
            [
                str(self.binaries[ADAPTER_NAME]),
                f"--config={ADAPTER_RULES}",
                f"--prometheus-url={self.prometheus_url}/",
                # series found within this long are served; new pods' series appear after one relist
                f"--metrics-relist-interval={self.interval_seconds * 2}s",
                f"--bind-address={NODE_ADDRESS}",
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
        blocks namespace deletion), then end the adapter and Prometheus by PID."""
        group, version = CUSTOM_METRICS
        self.node.kubectl("delete", "apiservice", f"{version}.{group}", "--ignore-not-found", check=False)
        for name in (ADAPTER_NAME, "prometheus"):
            self.node.end(name)

    @property
    def interval_seconds(self) -> int:
        return int(self.interval.rstrip("s"))

    def _wait(self, what: str, check: Any, deadline: float, log_name: str) -> None:
        last: Any = None
        while time.monotonic() < deadline:
            pid = self.node.state["pids"].get(log_name)
            if pid and not Path(f"/proc/{pid}").exists():
                raise NodeError(f"{log_name} exited\n{self.node.log_tail(log_name)}")
            try:
                last = check()
            except OSError as err:
                last = err
            if last:
                return
            time.sleep(0.5)
        raise NodeError(f"{what}: not in time ({last!r})\n{self.node.log_tail(log_name)}")

    def _get(self, url: str) -> str:
        return self.node.fetch(url)

    def _api_service_available(self) -> bool:
        group, version = CUSTOM_METRICS
        out = self.node.kubectl("get", "apiservice", f"{version}.{group}", "-o", "json", check=False)
        conditions = json.loads(out or "{}").get("status", {}).get("conditions", [])
        return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

    # -- reading ---------------------------------------------------------------------------------------

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant PromQL query; the result vector."""
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        answer = json.loads(self._get(url))
        if answer.get("status") != "success":
            raise NodeError(f"query failed: {answer}\n{expr}")
        return list(answer["data"]["result"])

    def custom_metric(self, namespace: str, metric: str, metric_selector: str = "") -> dict[str, float]:
        """pod -> value, as the HPA controller reads it from the aggregated API (values in milli-units
        are converted: '1500m' -> 1.5)."""
        group, version = CUSTOM_METRICS
        path = f"/apis/{group}/{version}/namespaces/{namespace}/pods/*/{metric}"
        if metric_selector:
            path += "?" + urllib.parse.urlencode({"metricLabelSelector": metric_selector})
        out = self.node.kubectl("get", "--raw", path, check=False)
        if not out:
            return {}
        return {i["describedObject"]["name"]: quantity(i["value"]) for i in json.loads(out).get("items", [])}


def quantity(value: str) -> float:
    """A Kubernetes quantity as the custom metrics API writes values ('12', '1500m', '2k')."""
    suffixes = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9}
    if value and value[-1] in suffixes:
        return float(value[:-1]) * suffixes[value[-1]]
    return float(value)
