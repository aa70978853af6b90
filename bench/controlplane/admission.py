"""The webhook scenario: the operator serving its admission webhook (as tests/component/test_webhook.py runs
it: on a free loopback port, registered as a ValidatingWebhookConfiguration for its namespace, failurePolicy
Fail, the default 10 s timeout), and the time of server-side dry runs of a small pipeline through it, one
after another: `update` (an apply of a changed spec to an existing small pipeline: an UPDATE review, the
compile of the spec) and `create` (POST dryRun=All of a new one: a CREATE review, which also checks the
names the pipeline would make against every pipeline of the namespace). In three states, side by side:

    idle_empty    the operator idle, no large pipeline (only the small one the updates target)
    idle_loaded   N large pipelines in the namespace, reconciled and settled, resync at 3600 s (idle)
    busy          the same N large pipelines, resync every few seconds: resyncs run all the time

The large pipelines are created with no webhook registered and no operator running (their creation is not
what is measured); each of the last two states starts an operator process that reconciles all N first."""

from __future__ import annotations

import copy
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tritonpipeline.kube.api_client import Kube, KubeError, path
from tritonpipeline.local.tritonserver import free_port
from tritonpipeline.render.webhook_configuration import WEBHOOK_NAME
from tritonpipeline.runtime import compiling
from tritonpipeline.settings import KIND

from .apiserver_metrics import api_snapshot, by_call, webhook_calls
from .logtail import LogTail
from .process import SampledOperator, proc_stat
from .restart import default_env
from .scenarios import Bench
from .stats import summary
from .workload import (
    API,
    FIELD_MANAGER,
    LARGE_MODELS,
    LARGE_PIPELINES,
    LARGE_STEPS,
    LARGE_TENSORS,
    WEBHOOK_NS,
    api_client,
    cluster_doc,
    large_doc,
    now,
    render,
)

CONFIGURATION = "tp-bench-webhook"  # the ValidatingWebhookConfiguration the operator registers
VWC_API = "admissionregistration.k8s.io/v1"
DENIED = f'admission webhook "{WEBHOOK_NAME}" denied the request'
DRY_RUN = [("dryRun", "All"), ("fieldValidation", "Strict")]
APPLY = "application/apply-patch+yaml"
TARGET = "probe-target"  # the small pipeline the update probes change (dry run: it stays as it is)
KINDS = ("update", "create")
STATES = ("idle_empty", "idle_loaded", "busy")


def invalid_doc(name: str) -> dict[str, Any]:
    """A pipeline the CRD lets through and the webhook refuses (a step reads an unknown step)."""
    doc = cluster_doc(name, WEBHOOK_NS)
    doc["spec"]["pipelines"][0]["steps"][1]["inputs"] = {"FEATS_IN_B": "nosuch.OUTPUT"}
    return doc


class Admission:
    """The webhook scenario on `bench`'s control plane: its own namespace and operator processes."""

    def __init__(self, bench: Bench, crs: int, probes: int, gap_s: float, cap_s: float, resync_s: float):
        self.bench = bench
        self.crs, self.probes, self.gap_s, self.cap_s, self.resync_s = crs, probes, gap_s, cap_s, resync_s
        self.client = Kube(api_client(bench.cp.kubeconfig, 2), FIELD_MANAGER)  # the probes' own connection
        self.names = [f"large-{i:03d}" for i in range(crs)]
        self.results: dict[str, Any] = {}
        self.t_serving = now()  # when the operator last started answered as the webhook

    # -- the operator with its webhook ------------------------------------------------------------------

    def start(self, label: str, resync_s: float) -> tuple[SampledOperator, LogTail, dict[str, Any]]:
        """An operator on WEBHOOK_NS serving the webhook; returned once the apiserver calls it (a
        dry-run create of an invalid pipeline is denied)."""
        bench = self.bench
        log = bench.workdir / f"operator-webhook-{label}.log"
        env = {
            **default_env(),
            "TRITONPIPELINE_RESYNC_SECONDS": f"{resync_s:g}",
            "TRITONPIPELINE_WEBHOOK_LISTEN": f"127.0.0.1:{free_port()}",
            "TRITONPIPELINE_WEBHOOK_CONFIGURATION": CONFIGURATION,
            "TRITONPIPELINE_WEBHOOK_FAILURE_POLICY": "Fail",
        }
        op = SampledOperator(bench.cp.kubeconfig, WEBHOOK_NS, log, env)
        bench.extra.append(op)
        tail = LogTail(log, WEBHOOK_NS).start()
        t0 = now()
        op.phase = f"webhook-{label}"
        op.start()
        if not tail.wait(lambda: tail.registered is not None, bench.args.startup_timeout):
            raise RuntimeError(f"the webhook was not registered; log tail:\n{op.text()[-3000:]}")
        deadline = time.monotonic() + 30
        while True:
            try:
                self.client.request(
                    "POST", path(API, KIND, WEBHOOK_NS), query=DRY_RUN, body=invalid_doc("probe")
                )
                message = ""
            except KubeError as exc:
                message = str(exc)
            if DENIED in message:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the apiserver does not call the webhook; log tail:\n{op.text()[-3000:]}")
            time.sleep(0.2)
        self.t_serving = now()
        return op, tail, {"serving_s": round(self.t_serving - t0, 2)}

    def stop(self, op: SampledOperator, tail: LogTail) -> dict[str, Any]:
        """Stop the operator by its PID and remove its configuration (failurePolicy Fail: a configuration
        left behind would refuse every write of the namespace)."""
        hwm = proc_stat(op.pid)["hwm_mb"]
        code = op.stop()
        tail.stop()
        self.bench.kube.delete(VWC_API, "ValidatingWebhookConfiguration", None, CONFIGURATION)
        return {"vmhwm_mb": round(hwm, 1), "exit_code": code, "pid": op.pid}

    def wait_reconciled(self, op: SampledOperator, tail: LogTail, label: str) -> dict[str, Any]:
        """Until every large pipeline has an outcome line of this process, then until it is quiet."""
        names = set(self.names)
        t0 = self.t_serving
        timeout = max(self.bench.args.timeout, 5.0 * len(names))
        done = tail.wait(lambda: tail.reconciled(names) == len(names), timeout)
        reconciled = now() - t0
        if not done:
            self.bench.problems.append(
                f"webhook {label}: {tail.reconciled(names)}/{len(names)} large pipelines reconciled"
            )
        return {
            "all_reconciled_s": round(reconciled, 1),
            "reconciled": tail.reconciled(names),
            "outcomes": dict(tail.all_outcomes()),
            "webhook_answers": dict(tail.webhook_answers(t0, now())),
            "kopf_retries": tail.retries_between(t0, now()),
            "rss_mb": round(proc_stat(op.pid)["rss_mb"], 1),
        }

    def quiet(self, tail: LogTail, quiet_s: float = 20.0, timeout: float = 180.0) -> dict[str, Any]:
        """Until no outcome line came for `quiet_s` (the start-up's reconciles, and kopf's re-runs of
        them, are over), at most `timeout` s. (The operator's CPU never gets quiet with large pipelines:
        its status poll lists them all every 30 s.)"""
        t0 = now()
        while now() - t0 < timeout:
            last = tail.last_outcome()
            if last is None or now() - last >= quiet_s:
                break
            time.sleep(1.0)
        last = tail.last_outcome()
        return {
            "quiet_wait_s": round(now() - t0, 1),
            "quiet": last is None or now() - last >= quiet_s,
            "outcomes_when_quiet": dict(tail.all_outcomes()),
        }

    # -- what is measured -------------------------------------------------------------------------------

    def probe(self, kind: str, label: str, i: int) -> str | None:
        """One dry-run admission of a small pipeline: `create` POSTs a new one (a CREATE review), `update`
        server-side applies TARGET with a changed spec (an UPDATE review). The error, if any."""
        try:
            if kind == "create":
                doc = cluster_doc(f"probe-{label.replace('_', '-')}-{i:04d}", WEBHOOK_NS)
                self.client.request("POST", path(API, KIND, WEBHOOK_NS), query=DRY_RUN, body=doc, retries=0)
            else:
                doc = cluster_doc(TARGET, WEBHOOK_NS)
                doc["spec"]["server"]["replicas"] = 2  # stored: 1
                query = [*DRY_RUN, ("fieldManager", FIELD_MANAGER), ("force", "true")]
                url = path(API, KIND, WEBHOOK_NS, TARGET)
                self.client.request("PATCH", url, query=query, body=doc, content_type=APPLY, retries=0)
        except KubeError as exc:
            return str(exc)[:300]
        return None

    def series(self, kind: str, label: str, op: SampledOperator, tail: LogTail) -> dict[str, Any]:
        """`probes` dry-run admissions of one kind, one after another (`gap_s` between), for at most
        `cap_s` seconds: their latency as this client sees it, the apiserver's own time calling the
        webhook, and what the operator did meanwhile (outcome lines, CPU)."""
        latencies: list[float] = []
        errors: list[str] = []
        req0 = api_snapshot(self.bench.cp)
        calls0, cpu0 = webhook_calls(self.bench.cp, WEBHOOK_NAME), proc_stat(op.pid)["cpu_s"]
        t_start = now()
        for i in range(self.probes):
            if now() - t_start > self.cap_s:
                break
            t0 = now()
            error = self.probe(kind, label, i)
            latencies.append(now() - t0)
            if error is not None:
                errors.append(error)
            time.sleep(self.gap_s)
        t_end = now()
        calls1, cpu1 = webhook_calls(self.bench.cp, WEBHOOK_NAME), proc_stat(op.pid)
        requests, _ = by_call(req0, api_snapshot(self.bench.cp))
        outcomes = tail.outcomes_between(t_start, t_end)
        window = t_end - t_start
        calls = calls1[0] - calls0[0]
        lat = summary(latencies)
        print(
            f"webhook {label:<11} {kind}: p50 {lat['p50'] or 0:.4f} s, p99 {lat['p99'] or 0:.4f} s, max "
            f"{lat['max'] or 0:.4f} s over {len(latencies)} dry runs ({len(errors)} errors); operator "
            f"{sum(outcomes.values()) / window:.2f} reconciles/s, "
            f"{100 * (cpu1['cpu_s'] - cpu0) / window:.0f}% CPU",
            flush=True,
        )
        return {
            "probes": len(latencies),
            "window_s": round(window, 1),
            "latency_s": lat,
            "errors": len(errors),
            "error_samples": errors[:3],
            "apiserver_webhook_calls": calls,
            "apiserver_webhook_mean_ms": round(1000 * (calls1[1] - calls0[1]) / calls, 2) if calls else None,
            "operator_outcome_lines": dict(outcomes),
            "operator_reconciles_per_s": round(sum(outcomes.values()) / window, 2),
            "operator_cpu_pct": round(100 * (cpu1["cpu_s"] - cpu0) / window, 1),
            "operator_rss_mb": round(cpu1["rss_mb"], 1),
            "webhook_answers": dict(tail.webhook_answers(t_start, t_end)),  # the operator's, by HTTP status
            "kopf_retries": tail.retries_between(t_start, t_end),
            # every client's requests meanwhile, the probes' own included (POST/APPLY tritonpipelines)
            "api_requests": dict(sorted(requests.items(), key=lambda kv: -kv[1])),
            "raw_latency_s": [round(x, 4) for x in latencies],
        }

    def measure(self, label: str, op: SampledOperator, tail: LogTail) -> dict[str, Any]:
        """The update series, then the create series, in one state."""
        self.bench.mark(f"webhook {label}")
        return {kind: self.series(kind, label, op, tail) for kind in KINDS}

    def create_large(self) -> dict[str, Any]:
        """Create the N large pipelines (server-side apply, 4 threads) with no operator and no webhook."""
        errors: list[str] = []

        def run(name: str) -> None:
            try:
                self.bench.kube.apply(large_doc(name, WEBHOOK_NS))
            except Exception as exc:
                errors.append(f"{name}: {exc!r}"[:300])

        t0 = now()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(run, self.names))
        if errors:
            self.bench.problems.append(f"webhook: {len(errors)} large pipelines not created: {errors[0]}")
        return {"created_s": round(now() - t0, 1), "errors": len(errors)}

    def run(self) -> dict[str, Any]:
        """idle_empty, then the large pipelines created, idle_loaded, busy; everything removed after."""
        res: dict[str, Any] = {"large_pipeline": describe_large(), "crs": self.crs, "phases": {}}
        phases = res["phases"]
        self.bench.kube.apply(cluster_doc(TARGET, WEBHOOK_NS))  # no webhook registered yet
        op, tail, info = self.start("idle-empty", 3600)
        self.bench.settle(pid=op.pid)
        phases["idle_empty"] = {**info, **self.measure("idle_empty", op, tail), **self.stop(op, tail)}
        res["create"] = self.create_large()
        print(f"webhook: {self.crs} large pipelines created in {res['create']['created_s']} s", flush=True)
        for label, resync in (("idle_loaded", 3600.0), ("busy", self.resync_s)):
            op, tail, info = self.start(label.replace("_", "-"), resync)
            ready = self.wait_reconciled(op, tail, label)
            if label == "idle_loaded":
                ready.update(self.quiet(tail))
            print(
                f"webhook {label}: every large pipeline reconciled {ready['all_reconciled_s']} s after the "
                f"webhook served (resync {resync:g} s)",
                flush=True,
            )
            phases[label] = {
                "resync_seconds": resync,
                **info,
                "before": ready,
                **self.measure(label, op, tail),
                **self.stop(op, tail),
            }
        self.bench.delete_all(WEBHOOK_NS, with_crs=True)
        res["ratios"] = {}
        for kind in KINDS:
            empty, idle, busy = (phases[state][kind]["latency_s"] for state in STATES)
            res["ratios"][kind] = {
                "busy_vs_idle_loaded_p50": ratio(busy["p50"], idle["p50"]),
                "busy_vs_idle_loaded_p99": ratio(busy["p99"], idle["p99"]),
                "idle_loaded_vs_idle_empty_p99": ratio(idle["p99"], empty["p99"]),
            }
        return res


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def describe_large() -> dict[str, Any]:
    """The large pipeline: its shape, size, and what compiling and rendering it (the operator's work
    per reconcile without its cache) and the webhook's verdict on it cost in this process."""
    doc = large_doc("large-000", WEBHOOK_NS)
    compile_s, verdict_s = [], []
    children = None
    for _ in range(3):
        t0 = now()
        children = render(doc)
        compile_s.append(now() - t0)
        t0 = now()
        compiling.verdict(copy.deepcopy(doc))
        verdict_s.append(now() - t0)
    assert children is not None
    small = cluster_doc("small", WEBHOOK_NS)
    t0 = now()
    compiling.verdict(small)
    small_verdict = now() - t0
    return {
        "models": LARGE_MODELS,
        "pipelines": LARGE_PIPELINES,
        "steps_per_pipeline": LARGE_STEPS,
        "tensors_per_model": LARGE_TENSORS,
        "cr_json_bytes": len(json.dumps(doc)),
        "configmaps": len(children.configmaps),
        "configmap_json_bytes": sum(len(json.dumps(c)) for c in children.configmaps),
        "compile_render_s_median": round(statistics.median(compile_s), 3),
        "webhook_verdict_s_median": round(statistics.median(verdict_s), 3),
        "small_pipeline_verdict_s": round(small_verdict, 4),
    }
