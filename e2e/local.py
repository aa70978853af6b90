"""`make e2e-local`: everything that runs without a GPU or a container runtime, in one command.

  1. a real kube-apiserver + etcd (built from Go modules, harness/controlplane.py)
  2. `helm install` of charts/triton-pipeline (helm built from Go modules)
  3. the operator as a subprocess, run as the chart's Deployment runs it, with the chart's
     ServiceAccount token as its only credential (exactly the chart's RBAC)
  4. every examples/*.yaml applied (modelRepository pvc://models/triton, spec.server.gpus 0)
  5. per pipeline: the ConfigMaps the operator wrote are read back and the Deployment's init container
     (`tritonpipeline assemble`, its own args and volume mounts) runs over model_repository/
  6. the real tritonserver (nvidia-pytriton wheel, CPU) loads the result; inference numbers are checked

Prints a pass/fail table and exits 1 on any failure (with the operator and tritonserver log tails).

    .venv/bin/python -m e2e.local [--namespaced] [--keep] [--workdir DIR] [EXAMPLE ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.infer import CHECKS
from harness.gotools import ensure_tool
from harness.helm import Helm, by_kind, deployment_of
from harness.kubeapi import CRD_NAME, ensure_namespace, service_account_token, wait_established
from harness.kubeconfig import token_kubeconfig
from harness.operator_process import ChartOperator
from harness.paths import CLI, ROOT
from harness.wait import wait_for
from tritonpipeline.compiler.plan_types import NATIVE_ROUTER_LIBRARY
from tritonpipeline.local.native_router import INSTALLED_ENV
from tritonpipeline.local.native_router import build as build_native_router
from tritonpipeline.render.packing import entries_of

API = "serving.tritonpipeline.io/v1alpha1"
SELECTOR = "serving.tritonpipeline.io/pipeline"
NAMESPACE = "e2e"
RELEASE, RELEASE_NS = "tp", "triton-system"


# ----------------------------------------------------------------------------------- the report


@dataclass
class Row:
    step: str
    ok: bool
    seconds: float
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)  # what the step measured (JSON values)


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)

    def run(self, step: str, fn: Callable[[], str | None]) -> bool:
        t0 = time.monotonic()
        print(f">> {step} ...", flush=True)
        try:
            detail = fn() or ""
            ok = True
        except Exception as exc:  # every failure becomes a row; the run goes on where it can
            detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            print(traceback.format_exc(), file=sys.stderr)
            ok = False
        self.rows.append(Row(step, ok, time.monotonic() - t0, detail))
        print(f"   {'ok' if ok else 'FAILED'} ({time.monotonic() - t0:.1f}s) {detail}", flush=True)
        return ok

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)

    def table(self) -> str:
        width = max(len(r.step) for r in self.rows)
        lines = [f"{'step':<{width}}  result  seconds  detail", f"{'-' * width}  ------  -------  ------"]
        for r in self.rows:
            lines.append(f"{r.step:<{width}}  {'PASS' if r.ok else 'FAIL':<6}  {r.seconds:7.1f}  {r.detail}")
        passed = sum(r.ok for r in self.rows)
        lines.append(f"{passed}/{len(self.rows)} passed: {'PASS' if self.ok else 'FAIL'}")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------- the steps


def cluster_doc(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    doc["metadata"] = {"name": doc["metadata"]["name"], "namespace": NAMESPACE}
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    doc["spec"].setdefault("server", {})["gpus"] = 0  # no GPU here: CPU instance groups
    return doc


def condition(cr: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in (cr.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def run_init_container(deployment: dict[str, Any], configmaps: list[dict[str, Any]], pod: Path) -> Path:
    """What kubelet would do for the Deployment's init container, with the same args and mounts: the
    projected ConfigMap volume is written out, the `models` PVC is model_repository/ (under the
    claim's sub-path), the emptyDir is a directory. Returns the assembled repository."""
    spec = deployment["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts: dict[str, Path] = {}
    for m in init["volumeMounts"]:
        local = pod / m["name"]
        vol = volumes[m["name"]]
        if "projected" in vol:
            names = [s["configMap"]["name"] for s in vol["projected"]["sources"]]
            by_name = {c["metadata"]["name"]: c for c in configmaps}
            local.mkdir(parents=True)
            for key, blob in entries_of(by_name[n] for n in names).items():
                (local / key).write_bytes(blob)
        elif "persistentVolumeClaim" in vol:
            # the claim's content: model files under the sub-path the uri names (pvc://models/triton)
            local.mkdir(parents=True)
            (local / "triton").symlink_to(ROOT / "model_repository", target_is_directory=True)
        else:
            local.mkdir(parents=True)
        mounts[m["mountPath"]] = local

    def host(arg: str) -> str:
        for mount_path, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            if arg == mount_path or arg.startswith(mount_path + "/"):
                return str(local) + arg[len(mount_path) :]
        return arg

    assert init["args"][0] == "assemble", init["args"]
    args = [host(a) for a in init["args"]]
    # what the operator image carries for its native routers: the library, built here for this machine
    library = pod / NATIVE_ROUTER_LIBRARY
    library.write_bytes(build_native_router())
    env = {**os.environ, INSTALLED_ENV: str(library)}
    proc = subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=120, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"tritonpipeline {' '.join(args)} failed:\n{proc.stderr}")
    out = Path(args[args.index("--out") + 1])
    print(f"   {proc.stdout.strip()}")
    return out


def serve_and_check(repo: Path, pipeline: str, log: Path) -> str:
    import tritonclient.http as httpclient

    from tritonpipeline.local.tritonserver import LocalTriton

    with LocalTriton(repo, log_file=log, extra_args=["--exit-timeout-secs=5"]) as server:
        server.wait_ready(timeout=180)
        loaded = [m["name"] for m in server.models() if m.get("state") == "READY"]
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            check = CHECKS.get(pipeline)
            detail = check(client, pipeline) if check else "no numeric check for this example"
        finally:
            client.close()
    return f"{len(loaded)} models READY; {detail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("examples", nargs="*", help="example files (default: examples/*.yaml)")
    parser.add_argument("--namespaced", action="store_true", help="install the chart with per-namespace RBAC")
    parser.add_argument("--workdir", type=Path, help="where state and logs go (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    examples = [Path(e) for e in args.examples] or sorted((ROOT / "examples").glob("*.yaml"))
    work = args.workdir or Path(tempfile.mkdtemp(prefix="tritonpipeline-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    report = Report()
    state: dict[str, Any] = {}
    print(f">> work directory: {work}")

    from harness.controlplane import ControlPlane
    from tritonpipeline.kube.api_client import Kube

    if not report.run("build kube-apiserver + etcd + helm", lambda: _build(state)):
        print(report.table())
        return 1
    cp = ControlPlane(work / "controlplane", state["binaries"])
    op: ChartOperator | None = None
    try:

        def start() -> str:
            cp.start()
            state["admin"] = Kube(cp.api_client(), "e2e-admin")
            return f"kube-apiserver {cp.version} at {cp.url} in {cp.startup_seconds:.1f}s"

        if not report.run("start control plane", start):
            return finish(report, work, args.keep, None, cp)
        admin: Kube = state["admin"]
        values = ["rbac.clusterWide=false", f"watchNamespaces={{{NAMESPACE}}}"] if args.namespaced else []

        def install() -> str:
            ensure_namespace(admin, NAMESPACE)
            helm = Helm(state["helm"], work / "helm-home", cp.kubeconfig)
            helm.install(RELEASE, RELEASE_NS, set_values=values)
            wait_established(admin, CRD_NAME)
            state["docs"] = docs = helm.template(RELEASE, RELEASE_NS, set_values=values)
            kinds = sorted({d["kind"] for d in docs})
            return f"release {RELEASE} in {RELEASE_NS}: {len(docs)} objects ({', '.join(kinds)}) + CRD"

        if not report.run(
            f"helm install chart ({'namespaced' if args.namespaced else 'cluster-wide'})", install
        ):
            return finish(report, work, args.keep, None, cp)

        def operator() -> str:
            nonlocal op
            docs = state["docs"]
            sa = by_kind(docs, "ServiceAccount")[0]["metadata"]["name"]
            token = service_account_token(admin, RELEASE_NS, sa)
            kubeconfig = token_kubeconfig(cp, token, work / "operator.kubeconfig")
            op = ChartOperator(deployment_of(docs), kubeconfig, work / "operator.log").start()
            wait_for("the operator's /healthz", lambda: op.healthz() == 200, 60)
            return f"as system:serviceaccount:{RELEASE_NS}:{sa}: {' '.join(op.args[1:])}"

        if not report.run("start operator with the chart's identity", operator):
            return finish(report, work, args.keep, op, cp)

        for path in examples:
            try:
                doc = cluster_doc(path)
            except Exception as exc:  # an unreadable example is a failed row, not a crash
                report.rows.append(Row(f"{path.name}: load", False, 0.0, f"{type(exc).__name__}: {exc}"))
                continue
            name = doc["metadata"]["name"]

            def reconcile(doc: dict[str, Any] = doc, name: str = name) -> str:
                admin.apply(doc)

                def done() -> dict[str, Any] | None:
                    cr = admin.get(API, "TritonPipeline", NAMESPACE, name) or {}
                    ok = condition(cr, "ModelsConfigured")
                    gen = (cr.get("status") or {}).get("observedGeneration")
                    return cr if ok and gen == cr["metadata"]["generation"] else None

                cr = wait_for(f"{name} to be reconciled", done, 60)
                valid = condition(cr, "SpecValid")
                if not valid or valid["status"] != "True":
                    raise AssertionError(f"SpecValid: {valid}")
                state[name] = {
                    "configmaps": admin.list("v1", "ConfigMap", NAMESPACE, f"{SELECTOR}={name}"),
                    "deployment": admin.get("apps/v1", "Deployment", NAMESPACE, name),
                }
                routers = [r["name"] for r in cr["status"]["graph"]["routers"]]
                ready = condition(cr, "Ready") or {}
                return (
                    f"{len(state[name]['configmaps'])} ConfigMap(s), routers {routers or 'none'}, "
                    f"Ready={ready.get('status')}/{ready.get('reason')} (no kubelet)"
                )

            if not report.run(f"{path.name}: apply + reconcile", reconcile):
                continue

            def assemble(name: str = name) -> str:
                kids = state[name]
                repo = run_init_container(kids["deployment"], kids["configmaps"], work / "pods" / name)
                state[name]["repo"] = repo
                files = sorted(p.name for p in repo.iterdir())
                return f"{repo}: {', '.join(files)}"

            if not report.run(f"{path.name}: init container (tritonpipeline assemble)", assemble):
                continue
            report.run(
                f"{path.name}: tritonserver + inference",
                lambda name=name: serve_and_check(state[name]["repo"], name, work / f"triton-{name}.log"),
            )

        def operator_clean() -> str:
            assert op is not None and op.proc is not None and op.proc.poll() is None, "operator exited"
            refused = [ln for ln in op.text().splitlines() if "forbidden" in ln.lower() or " 403" in ln]
            assert not refused, f"refused under the chart's RBAC: {refused[:3]}"
            return "still running, nothing refused under the chart's RBAC"

        report.run("operator log: no 403", operator_clean)
        return finish(report, work, args.keep, op, cp)
    finally:
        if op is not None:
            op.stop()
        cp.stop()


def _build(state: dict[str, Any]) -> str:
    from harness.controlplane_binaries import ensure_binaries

    state["binaries"] = b = ensure_binaries(output=sys.stdout)
    state["helm"] = ensure_tool("helm", output=sys.stdout)
    return f"kube-apiserver {b.kubernetes_version}, etcd {b.etcd_version}, {state['helm']}"


def finish(report: Report, work: Path, keep: bool, op: ChartOperator | None, cp: Any) -> int:
    if not report.ok:
        if op is not None:
            print(f"\n===== operator log ({op.log}) =====\n{op.text()[-6000:]}")
        for log in sorted(work.glob("triton-*.log")):
            print(
                f"\n===== {log.name} =====\n" + "\n".join(log.read_text(errors="replace").splitlines()[-60:])
            )
        print(cp.log_tails(20))
    print("\n" + report.table())
    if keep or not report.ok:
        print(f"\nlogs and state kept in {work}")
    else:
        if op is not None:
            op.stop()
        cp.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
