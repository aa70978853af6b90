"""The Helm chart against the real control plane: helm (built from Go modules), server-side dry runs,
the chart's ServiceAccount identity, and the operator run exactly as the chart's Deployment runs it.

Shared by tests/test_chart.py and e2e/local.py. Nothing here imitates helm or the API server.

    helm = Helm(ensure_tool("helm"), kubeconfig=cp.kubeconfig, home=tmp)
    docs = helm.template("rel", "ops", values=[CHART / "ci" / "namespaced-values.yaml"])
    helm.install("rel", "ops")
    token = service_account_token(kube, "ops", "rel-triton-pipeline")
    op = ChartOperator(deployment_of(docs), token_kubeconfig(cp, token, tmp / "sa.kubeconfig"), log).start()
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from controlplane import find_go, go_env

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CHART = ROOT / "charts" / "triton-pipeline"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
BUILD_TOOL = HERE / "build-gotool.sh"
CRD_NAME = "tritonpipelines.serving.tritonpipeline.io"
SERVICEMONITOR_CRD_NAME = "servicemonitors.monitoring.coreos.com"


class ToolUnavailable(RuntimeError):
    """Go is missing and the tool is not built: tests skip with this message."""


class ToolError(RuntimeError):
    """Building or running a tool failed."""


# --------------------------------------------------------------------------------------------- tools


def tool_path(tool: str) -> Path:
    """Where e2e/build-gotool.sh keeps `tool` (helm, kind, servicemonitor-crd) for its pinned version."""
    out = subprocess.run(
        ["bash", str(BUILD_TOOL), tool, "--print-path"], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


def missing_tool(tool: str) -> str | None:
    """Why `tool` cannot be had here, or None. Exact, so a skip message says what to do."""
    path = tool_path(tool)
    if path.exists():
        return None
    if find_go() is None:
        return (
            f"{tool} is not built ({path} is missing) and Go is not installed (no `go` on PATH or "
            f"/usr/local/go/bin/go) to build it; install Go and run `make helm`"
        )
    return None


def ensure_tool(tool: str, output: Any = None) -> Path:
    """The cached tool, built first with e2e/build-gotool.sh when missing (a few minutes for helm)."""
    reason = missing_tool(tool)
    if reason:
        raise ToolUnavailable(reason)
    path = tool_path(tool)
    if path.exists():
        return path
    proc = subprocess.run(
        ["bash", str(BUILD_TOOL), tool],
        env=go_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = output if output is not None else sys.stdout
    out.write(proc.stdout)
    out.flush()
    if proc.returncode != 0 or not path.exists():
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise ToolError(f"{BUILD_TOOL} {tool} failed (exit {proc.returncode}):\n{tail}")
    return path


# ---------------------------------------------------------------------------------------------- helm


class Helm:
    """The real helm binary with its own config/cache/data directories (nothing under ~ is touched)."""

    def __init__(self, binary: Path, home: Path, kubeconfig: Path | None = None) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        home.mkdir(parents=True, exist_ok=True)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        if kubeconfig is not None:
            self.env["KUBECONFIG"] = str(kubeconfig)

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.binary), *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise ToolError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
        return proc

    @staticmethod
    def _values(values: Sequence[Path | str] = (), set_values: Sequence[str] = ()) -> list[str]:
        args: list[str] = []
        for v in values:
            args += ["-f", str(v)]
        for s in set_values:
            args += ["--set", s]
        return args

    def lint(self, values: Sequence[Path | str] = (), set_values: Sequence[str] = ()) -> str:
        return self.run("lint", "--strict", str(CHART), *self._values(values, set_values)).stdout

    def template(
        self,
        release: str,
        namespace: str,
        values: Sequence[Path | str] = (),
        set_values: Sequence[str] = (),
        check: bool = True,
    ) -> list[dict[str, Any]]:
        proc = self.run(
            "template", release, str(CHART), "--namespace", namespace, *self._values(values, set_values),
            check=check,
        )  # fmt: skip
        if proc.returncode != 0:
            raise ToolError(proc.stderr)
        return [d for d in yaml.safe_load_all(proc.stdout) if d]

    def install(
        self, release: str, namespace: str, values: Sequence[Path | str] = (), set_values: Sequence[str] = ()
    ) -> str:
        return self.run(
            "install", release, str(CHART), "--namespace", namespace, "--create-namespace",
            *self._values(values, set_values),
        ).stdout  # fmt: skip

    def uninstall(self, release: str, namespace: str) -> str:
        return self.run("uninstall", release, "--namespace", namespace, "--wait").stdout

    def status(self, release: str, namespace: str) -> dict[str, Any]:
        return json.loads(self.run("status", release, "--namespace", namespace, "-o", "json").stdout)


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def deployment_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (dep,) = by_kind(docs, "Deployment")
    return dep


# --------------------------------------------------------------------------------- the real apiserver


def dry_run_apply(kube: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply with dryRun=All and strict field validation: the apiserver runs defaulting,
    schema/CEL validation and admission (RBAC escalation checks included) but stores nothing."""
    query = [
        ("dryRun", "All"),
        ("fieldManager", "chart-dry-run"),
        ("fieldValidation", "Strict"),
        ("force", "true"),
    ]
    from kubernetes.client.exceptions import ApiException

    from tritonpipeline.kube.client import KubeError, _message

    try:  # no retries: an invalid object is refused with 4xx, or 500 for an unconvertible one
        return kube._call(
            "PATCH", path_for(obj), query=query, body=obj, content_type="application/apply-patch+yaml"
        )
    except ApiException as exc:
        raise KubeError(exc.status or 0, _message(exc)) from None


_PLURAL = {
    "ServiceAccount": "serviceaccounts",
    "Service": "services",
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "Namespace": "namespaces",
    "Deployment": "deployments",
    "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ServiceMonitor": "servicemonitors",
    "CustomResourceDefinition": "customresourcedefinitions",
    "TritonPipeline": "tritonpipelines",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}


def path_for(obj: dict[str, Any], name: bool = True) -> str:
    """REST path of any object this chart renders."""
    api, kind, meta = obj["apiVersion"], obj["kind"], obj.get("metadata") or {}
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    tail = f"/{meta['name']}" if name and meta.get("name") else ""
    return f"{base}{ns}/{_PLURAL[kind]}{tail}"


def get_object(kube: Any, obj: dict[str, Any]) -> dict[str, Any] | None:
    from tritonpipeline.kube.client import KubeError

    try:
        return kube._retry(lambda: kube._call("GET", path_for(obj)))
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


def install_generated_crd(kube: Any) -> str:
    """Apply the TritonPipeline CRD generated from the spec and wait until it is established."""
    from tritonpipeline.kube.crd import crd

    doc = crd()
    kube.apply(doc)
    wait_established(kube, doc["metadata"]["name"])
    return doc["metadata"]["name"]


def wait_established(kube: Any, name: str, timeout: float = 30.0) -> None:
    def established() -> bool:
        obj = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name) or {}
        conds = (obj.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    wait_for(f"CRD {name} to be established", established, timeout)


def install_crd_file(kube: Any, path: Path) -> str:
    """Apply a CRD from a YAML file (server-side, as admin) and wait until it is established."""
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    kube.apply(doc)
    wait_established(kube, doc["metadata"]["name"])
    return doc["metadata"]["name"]


def ensure_namespace(kube: Any, name: str) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


# ------------------------------------------------------------------------- the chart's identity


def service_account_token(kube: Any, namespace: str, name: str, seconds: int = 3600) -> str:
    """A token for the ServiceAccount from the TokenRequest API (the apiserver signs it with its
    service-account key): the identity a pod of the chart's Deployment gets."""
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds},
    }
    url = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    return kube._retry(lambda: kube._call("POST", url, body=body))["status"]["token"]


def token_kubeconfig(cp: Any, token: str, path: Path, user: str = "service-account") -> Path:
    """A kubeconfig that authenticates with `token` only (no client certificate)."""
    import base64

    ca = base64.b64encode((cp.pki / "ca.crt").read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": cp.url, "certificate-authority-data": ca}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "e2e", "user": user}}],
        "current-context": user,
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path


def kube_for(kubeconfig: Path, field_manager: str = "e2e") -> Any:
    from kubernetes import client, config

    from tritonpipeline.kube.client import Kube

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return Kube(client.ApiClient(configuration), field_manager, retries=0)


def http_status(kube: Any, method: str, url: str, body: Any = None) -> int:
    """The HTTP status of one call (no retries): 2xx, or the error status (403 when refused)."""
    from kubernetes.client.exceptions import ApiException

    try:
        kube._call(method, url, body=body)
        return 200
    except ApiException as exc:
        return int(exc.status or 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OperatorProcess:
    """`tritonpipeline run ...` as a subprocess with its log: start, SIGINT stop, SIGKILL, log text."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args = args
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.args, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(2)  # SIGINT: kopf stops cleanly
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.stop()


class ChartOperator(OperatorProcess):
    """The operator container of the rendered Deployment, run here as a subprocess: its command (the
    `tritonpipeline` entry point of this venv), its flags (`-n` per watched namespace), its env, and the
    chart's ServiceAccount token as its only credential. The liveness, metrics and admission webhook
    endpoints move to free loopback ports (0.0.0.0:8080, :8081 and :9443 are a pod's addresses); the
    apiserver calls the webhook at its loopback URL instead of through the Service (no kube-proxy here)."""

    def __init__(self, deployment: dict[str, Any], kubeconfig: Path, log: Path) -> None:
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        command = list(container["command"])
        assert command[0] == "tritonpipeline", command
        self.port = free_port()
        liveness = command.index("--liveness") + 1
        url = command[liveness]
        assert url.startswith("http://0.0.0.0:") and url.endswith("/healthz"), url
        command[liveness] = f"http://127.0.0.1:{self.port}/healthz"
        self.metrics_port = free_port()
        metrics = command.index("--metrics") + 1
        assert command[metrics].startswith("http://0.0.0.0:"), command[metrics]
        command[metrics] = f"http://127.0.0.1:{self.metrics_port}"
        command[0] = str(Path(sys.executable).parent / "tritonpipeline")
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        self.webhook_port: int | None = None
        if "TRITONPIPELINE_WEBHOOK_LISTEN" in env:
            assert env["TRITONPIPELINE_WEBHOOK_LISTEN"].startswith("0.0.0.0:"), env
            self.webhook_port = free_port()
            env["TRITONPIPELINE_WEBHOOK_LISTEN"] = f"127.0.0.1:{self.webhook_port}"
            env.pop("TRITONPIPELINE_WEBHOOK_SERVICE")
        base = {k: v for k, v in os.environ.items() if not k.startswith(("TRITONPIPELINE_", "KUBE"))}
        tmp = os.environ.get("TMPDIR", "/tmp")
        super().__init__(command, {**base, **env, "KUBECONFIG": str(kubeconfig), "TMPDIR": tmp}, log)
        self.container_env = env

    def healthz(self, url: str | None = None) -> int:
        """The status of GET `url` (default: the liveness endpoint); 0 when nothing answers."""
        try:
            with urllib.request.urlopen(url or f"http://127.0.0.1:{self.port}/healthz", timeout=2) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def readyz(self) -> int:
        return self.healthz(f"http://127.0.0.1:{self.metrics_port}/readyz")
