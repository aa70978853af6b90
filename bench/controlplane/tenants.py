"""`make bench-tenants` (`python -m bench.controlplane.tenants`): does a hostile tenant move another
tenant's admission and reconcile latency? (issue 54 point 3; goal: by less than 20%.)

One operator watches tenants A and B on a real kube-apiserver, with the chart's defaults: its admission
webhook (failurePolicy Fail) and the access review (security.reviewAuthors: a mutating webhook asking the
API server whether the author may reach what the pipeline asks for), and the status poll every second.
With two CPUs or more the operator runs on a CPU of its own and the control plane and this process on
the others (`--no-pin`: all on all), as on a cluster where the operator's pod does not share the API
server's machine. Tenant B (`tenant-b`) is measured:

    admission   a server-side dry-run create of a small pipeline (examples/fanout.yaml), one after
                another: the time the client waits (the apiserver, the webhook's review, its compile)
    reconcile   a create of a small pipeline until its status has SpecValid (the watch event, the
                compile, the children applied, the status written); the pipeline is deleted after

Tenant A (`tenant-a`) is hostile throughout: a Ready pod of its pipeline serves a 20 MB metrics page on
127.0.0.1:8002 (skipped, and said so, when that port is taken), which the status poll reads every
second. In the storm phases, STORM_CLIENTS clients send dry-run creates of a 0.9 MB pipeline, together
RATE a second, each under a new name (a new review every time: no cached verdict helps):

    quiet                no storm
    hostile@RATE         the storm at tenant A: the apiserver and the operator's webhook both work on it
    apiserver_only@RATE  the same storm at tenant C, which no operator watches: what the kube-apiserver's
                         own work on it (decoding, validating, field management) costs B

The phases alternate in ROUNDS (reversed every other round), so drift of the machine falls on all alike;
the report gives each phase's latencies, the processes' CPU and the ratios of each storm phase to quiet
of B's admission and reconcile p50 and p99, and `operator_answer_ms`: the mean time the operator's
handlers took to answer each tenant's reviews (its metric tritonpipeline_operator_admission_duration_
seconds, by webhook), the operator's own part of an admission without the API server's. The same run
measures the operator with 2 compile workers (the chart's default) and with compile_workers 0 (compiles
in the operator's threads, as before).

Before the phases, on the idle apiserver, apiserver_cost.py measures what one large write costs the
kube-apiserver itself, by kind and shape: our CRD's pipelines beside a Deployment and a ConfigMap of the
same size (`--cost-only`: just that)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import http.server
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from harness.controlplane import ControlPlane
from harness.controlplane_binaries import ControlPlaneError, ControlPlaneUnavailable, ensure_binaries
from harness.kubeapi import ensure_namespace, install_generated_crd, write_status
from harness.metrics_page import HugePage
from harness.operator_process import LocalOperator
from harness.paths import ROOT
from tritonpipeline.kube.api_client import Kube, KubeError, path
from tritonpipeline.local.tritonserver import free_port
from tritonpipeline.render.meta import METRICS_PORT, PIPELINE_LABEL
from tritonpipeline.render.webhook_configuration import WEBHOOK_NAME
from tritonpipeline.runtime.metrics import ADMISSION_SECONDS
from tritonpipeline.settings import KIND

from . import apiserver_cost
from .process import proc_stat, self_cpu
from .report import machine_info, write_report
from .stats import summary
from .workload import API, FIELD_MANAGER, HUGE, api_client, cluster_doc, large_doc, now

TENANT_A, TENANT_B, TENANT_C = "tenant-a", "tenant-b", "tenant-c"
ANSWERED = next(iter(ADMISSION_SECONDS.describe())).name  # the histogram's family name
STORMS = {"hostile": TENANT_A, "apiserver_only": TENANT_C}  # a storm phase's kind: where it goes
CONFIGURATION = "tp-bench-tenants"
DENIED = f'admission webhook "{WEBHOOK_NAME}" denied the request'
DRY_RUN = [("dryRun", "All")]
STORM_CLIENTS = 4
VARIANTS = {  # the chart's default, and the compiles in the operator's own threads
    "workers": {"TRITONPIPELINE_COMPILE_WORKERS": "2"},
    "threads": {"TRITONPIPELINE_COMPILE_WORKERS": "0"},
}
GOAL = 1.2
NAME_MARK = "storm-name-to-replace"  # 21 characters: every storm name is as long
RESULTS = ROOT / "bench" / "results" / "tenants.json"
COST_RESULTS = ROOT / "bench" / "results" / "apiserver-cost.json"  # of --cost-only
OPERATOR_CPUS = {max(os.sched_getaffinity(0))}  # with --pin: the operator's CPU, the others the rest's
CONTROL_PLANE_CPUS = set(os.sched_getaffinity(0)) - OPERATOR_CPUS


class Storm:
    """Tenant A's dry-run creates of the huge pipeline from STORM_CLIENTS threads, until stopped. Each
    client sends bytes encoded once (only the name changes) over its own connection and reads the answer
    without decoding it: the storm costs this process little, as it would cost an attacker's machine."""

    def __init__(self, cp: ControlPlane, namespace: str, rate: float) -> None:
        self.cp, self.rate = cp, rate
        doc = large_doc(NAME_MARK, namespace, **HUGE)
        self.body = json.dumps(doc).encode()
        self.url = urllib.parse.urlsplit(cp.url)
        self.target = path(API, KIND, namespace) + "?dryRun=All"
        self.stop_event = threading.Event()
        self.sent = self.refused = self.errors = 0
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def start(self) -> None:
        self.stop_event.clear()
        self.threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(STORM_CLIENTS)
        ]
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(30)

    def _client(self, client: int) -> None:
        assert self.url.hostname is not None
        conn = http.client.HTTPSConnection(
            self.url.hostname, self.url.port, context=self.cp.ssl_context(), timeout=60
        )
        # the clients take turns: together `rate` requests a second (as fast as answered without one)
        i, due = 0, time.monotonic() + (client / self.rate if self.rate > 0 else 0.0)
        try:
            while not self.stop_event.is_set():
                if self.rate > 0:
                    if self.stop_event.wait(max(0.0, due - time.monotonic())):
                        break
                    due += STORM_CLIENTS / self.rate
                i += 1
                body = self.body.replace(NAME_MARK.encode(), f"storm-{client}-{i:06d}".encode(), 1)
                try:
                    conn.request("POST", self.target, body, {"Content-Type": "application/json"})
                    answer = conn.getresponse()
                    text = answer.read()
                    outcome = (
                        "sent" if answer.status < 300 else "refused" if DENIED.encode() in text else "errors"
                    )
                except (OSError, http.client.HTTPException):
                    outcome = "errors"
                    conn.close()
                with self.lock:
                    self.sent += 1
                    if outcome != "sent":
                        setattr(self, outcome, getattr(self, outcome) + 1)
        finally:
            conn.close()


def family(pid: int) -> list[int]:
    """`pid` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def pin_family(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` and of its descendants on `cpus` (threads and processes they start later
    inherit it)."""
    for member in family(pid):
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{member}/task").iterdir():
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task.name), cpus)


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by each named process and its children (an operator's compile workers)."""
    out = {}
    for name, pid in pids.items():
        out[name] = sum(c for c in (proc_stat(p)["cpu_s"] for p in family(pid)) if c == c)
    out["bench"] = self_cpu()
    return out


def spec_valid(doc: dict[str, Any] | None) -> bool:
    conditions = ((doc or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "SpecValid" for c in conditions)


class Tenants:
    def __init__(self, cp: ControlPlane, workdir: Path, args: argparse.Namespace) -> None:
        self.cp, self.workdir, self.args = cp, workdir, args
        self.kube = Kube(api_client(cp.kubeconfig, 4), FIELD_MANAGER)
        self.probe_kube = Kube(api_client(cp.kubeconfig, 2), FIELD_MANAGER)
        # the storm at A (the operator reviews it) and the same at C, which no operator watches: what
        # the kube-apiserver's own work on the storm costs B
        self.storms = {
            f"{kind}@{rate:g}": Storm(cp, namespace, rate)
            for rate in args.storm_rates
            for kind, namespace in STORMS.items()
        }
        self.phases = ("quiet", *self.storms)
        self.serial = 0
        self.metrics: http.server.ThreadingHTTPServer | None = None
        self.metrics_note = ""

    # -- set-up --------------------------------------------------------------------------------------

    def install(self) -> None:
        install_generated_crd(self.kube)
        for ns in (TENANT_A, TENANT_B, TENANT_C):
            ensure_namespace(self.kube, ns)

    def start_operator(self, label: str, extra: dict[str, str]) -> LocalOperator:
        env = {
            "TRITONPIPELINE_WEBHOOK_LISTEN": f"127.0.0.1:{free_port()}",
            "TRITONPIPELINE_WEBHOOK_CONFIGURATION": CONFIGURATION,
            "TRITONPIPELINE_WEBHOOK_FAILURE_POLICY": "Fail",
            "TRITONPIPELINE_STATUS_POLL_SECONDS": "1",
            "TRITONPIPELINE_REVIEW_AUTHORS": "1",  # the chart's default (security.reviewAuthors)
            **extra,
        }
        log = self.workdir / f"operator-{label}.log"
        op = LocalOperator(self.cp.kubeconfig, f"{TENANT_A},{TENANT_B}", log, env=env, endpoints=True)
        op.start()
        deadline = time.monotonic() + 90
        while True:
            probe = cluster_doc("probe", TENANT_B)
            probe["spec"]["pipelines"][0]["steps"][1]["inputs"] = {"FEATS_IN_B": "nosuch.OUTPUT"}
            try:
                self.probe_kube.request(
                    "POST", path(API, KIND, TENANT_B), query=DRY_RUN, body=probe, retries=0
                )
                message = ""
            except KubeError as exc:
                message = str(exc)
            if DENIED in message:
                return op
            if time.monotonic() > deadline or not op.alive():
                op.stop()
                raise RuntimeError(f"the webhook never answered; operator log:\n{op.text()[-3000:]}")
            time.sleep(0.3)

    def stop_operator(self, op: LocalOperator) -> None:
        op.stop()
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            with contextlib.suppress(KubeError):  # failurePolicy Fail: one left behind refuses every write
                self.kube.delete("admissionregistration.k8s.io/v1", kind, None, CONFIGURATION)

    def hostile_pod(self) -> None:
        """A's pipeline (reconciled by the operator) and a Ready pod of it on 127.0.0.1, whose metrics
        port serves the huge page."""
        if self.metrics is not None:
            return  # served since an earlier variant: the pod and its page stay
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", METRICS_PORT)) == 0:
                self.metrics_note = f"skipped: 127.0.0.1 port {METRICS_PORT} is in use"
                return
        self.metrics = http.server.ThreadingHTTPServer(("127.0.0.1", METRICS_PORT), HugePage)
        threading.Thread(target=self.metrics.serve_forever, daemon=True).start()
        self.kube.apply(cluster_doc("hostile", TENANT_A))
        deadline = time.monotonic() + 60
        while (deployment := self.kube.get("apps/v1", "Deployment", TENANT_A, "hostile")) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("tenant A's pipeline was never reconciled")
            time.sleep(0.2)
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels[PIPELINE_LABEL] == "hostile"
        meta = {"namespace": TENANT_A, "name": "hostile-0"}
        pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta}
        if self.kube.get("v1", "Pod", TENANT_A, "hostile-0") is None:
            self.kube.create(
                {
                    **pod,
                    "metadata": {**meta, "labels": labels},
                    "spec": {"containers": [{"name": "triton", "image": "triton"}]},
                }
            )
        ready = [{"type": "Ready", "status": "True"}]
        write_status(self.kube, pod, {"phase": "Running", "podIP": "127.0.0.1", "conditions": ready})
        self.metrics_note = (
            f"a Ready pod of tenant A serving {HugePage.PAGE_BYTES} bytes on 127.0.0.1:{METRICS_PORT}"
        )

    # -- B's probes ------------------------------------------------------------------------------------

    def admission(self) -> tuple[list[float], int]:
        latencies, errors = [], 0
        for _ in range(self.args.admissions):
            self.serial += 1
            doc = cluster_doc(f"dry-{self.serial:05d}", TENANT_B)
            t0 = now()
            try:
                self.probe_kube.request("POST", path(API, KIND, TENANT_B), query=DRY_RUN, body=doc, retries=0)
            except KubeError:
                errors += 1
            latencies.append(now() - t0)
            time.sleep(self.args.gap)
        return latencies, errors

    def reconcile(self) -> tuple[list[float], int]:
        latencies, missed = [], 0
        for _ in range(self.args.reconciles):
            self.serial += 1
            name = f"b-{self.serial:05d}"
            t0 = now()
            self.probe_kube.request("POST", path(API, KIND, TENANT_B), body=cluster_doc(name, TENANT_B))
            deadline = t0 + 60
            while not spec_valid(self.probe_kube.get(API, KIND, TENANT_B, name)):
                if now() > deadline:
                    missed += 1
                    break
                time.sleep(0.02)
            else:
                latencies.append(now() - t0)
            self.probe_kube.delete(API, KIND, TENANT_B, name)
            time.sleep(self.args.gap)
        return latencies, missed

    def phase(self, name: str, pids: dict[str, int], op: LocalOperator) -> dict[str, Any]:
        storm = self.storms.get(name)
        sent0 = storm.sent if storm else 0
        if storm:
            storm.start()
            time.sleep(self.args.warm)  # the storm under way before B measures
        t0, cpu0, answers0 = now(), cpu_seconds(pids), answered(op)
        admissions, admission_errors = self.admission()
        reconciles, missed = self.reconcile()
        window, cpu1, answers1 = now() - t0, cpu_seconds(pids), answered(op)
        if storm:
            storm.stop()
        return {
            "admission_s": admissions,
            "admission_errors": admission_errors,
            "reconcile_s": reconciles,
            "reconcile_missed": missed,
            "storm_requests": (storm.sent - sent0) if storm else 0,
            "window_s": round(window, 1),
            "cpu_share": {k: round((cpu1[k] - cpu0[k]) / window, 3) for k in cpu1},
            "answered": {
                key: (total - answers0.get(key, (0.0, 0.0))[0], n - answers0.get(key, (0.0, 0.0))[1])
                for key, (total, n) in answers1.items()
            },
        }

    def variant(self, label: str, extra: dict[str, str]) -> dict[str, Any]:
        op = self.start_operator(label, extra)
        try:
            self.hostile_pod()
            if self.args.pin:
                pin_family(op.pid, OPERATOR_CPUS)
            phases: dict[str, dict[str, list[Any]]] = {name: {} for name in self.phases}
            for rnd in range(self.args.rounds):
                for name in self.phases if rnd % 2 == 0 else self.phases[::-1]:
                    result = self.phase(name, {**self.cp.pids(), "operator": op.pid}, op)
                    print(
                        f"{label} round {rnd + 1} {name:<20}: admission p50 "
                        f"{summary(result['admission_s'])['p50']:.3f} s, reconcile p50 "
                        f"{summary(result['reconcile_s'])['p50'] or 0:.3f} s, storm requests "
                        f"{result['storm_requests']}",
                        flush=True,
                    )
                    for key, value in result.items():
                        phases[name].setdefault(key, []).append(value)
            alive = op.alive()
            scrape_refused = "the page is larger" in op.text()
        finally:
            self.stop_operator(op)
        out: dict[str, Any] = {"operator_alive_after": alive, "metrics_cap_logged": scrape_refused}
        for name, data in phases.items():
            out[name] = {
                "admission_s": summary([x for xs in data["admission_s"] for x in xs]),
                "reconcile_s": summary([x for xs in data["reconcile_s"] for x in xs]),
                "admission_errors": sum(data["admission_errors"]),
                "reconcile_missed": sum(data["reconcile_missed"]),
                "storm_requests": sum(data["storm_requests"]),
                "window_s": round(sum(data["window_s"]), 1),
                # CPU seconds per second of each process (with its children) while B measured
                "cpu_share": {
                    k: round(sum(c[k] for c in data["cpu_share"]) / len(data["cpu_share"]), 3)
                    for k in data["cpu_share"][0]
                },
                "operator_answer_ms": answer_means(data["answered"]),
            }
        out["operator_answer_ratios"] = {
            phase: {
                key: _ratio(mean, out["quiet"]["operator_answer_ms"].get(key))
                for key, mean in out[phase]["operator_answer_ms"].items()
                if key.startswith(TENANT_B)
            }
            for phase in self.phases[1:]
        }
        out["ratios"] = {
            phase: {
                f"{probe}_{stat}": _ratio(out[phase][f"{probe}_s"][stat], out["quiet"][f"{probe}_s"][stat])
                for probe in ("admission", "reconcile")
                for stat in ("p50", "p99")
            }
            for phase in self.phases[1:]
        }
        return out

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.shutdown()
            self.metrics.server_close()


def answered(op: LocalOperator) -> dict[str, tuple[float, float]]:
    """The operator's admission answers so far, from its /metrics: `namespace/webhook` -> (seconds in
    all, how many)."""
    status, text = op.get("/metrics")
    if status != 200:
        raise RuntimeError(f"the operator's /metrics answered {status}")
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != ANSWERED:
            continue
        for sample in family.samples:
            key = f"{sample.labels['namespace']}/{sample.labels['webhook']}"
            if sample.name.endswith("_sum"):
                out.setdefault(key, [0.0, 0.0])[0] = sample.value
            elif sample.name.endswith("_count"):
                out.setdefault(key, [0.0, 0.0])[1] = sample.value
    return {key: (total, n) for key, (total, n) in out.items()}


def answer_means(rounds: list[dict[str, tuple[float, float]]]) -> dict[str, float | None]:
    """Per `namespace/webhook`, the mean answer time in milliseconds over the rounds of a phase."""
    totals: dict[str, list[float]] = {}
    for answers in rounds:
        for key, (seconds, n) in answers.items():
            entry = totals.setdefault(key, [0.0, 0.0])
            entry[0], entry[1] = entry[0] + seconds, entry[1] + n
    return {key: round(1000 * s / n, 2) if n else None for key, (s, n) in sorted(totals.items())}


def operator_part(variant: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per storm rate, B's latencies with the storm at A over the same storm at C: what the operator adds
    to what the kube-apiserver's own work on the storm costs (like for like while the webhook does not
    slow the storm down: the same number of storm requests in both phases)."""
    out = {}
    for phase, ratios in variant["ratios"].items():
        kind, rate = phase.split("@")
        if kind != "hostile":
            continue
        control = variant["ratios"][f"apiserver_only@{rate}"]
        like = variant[phase]["storm_requests"] >= 0.9 * variant[f"apiserver_only@{rate}"]["storm_requests"]
        out[rate] = {k: _ratio(v, control[k]) for k, v in ratios.items()} | {"like_for_like": like}
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2, help="quiet and hostile phases of each (default 2)")
    parser.add_argument("--admissions", type=int, default=40, help="B's dry runs per phase (default 40)")
    parser.add_argument("--reconciles", type=int, default=20, help="B's creates per phase (default 20)")
    parser.add_argument("--gap", type=float, default=0.1, help="seconds between B's probes (default 0.1)")
    parser.add_argument(
        "--storm-rates",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[0.25, 1.0],
        help="tenant A's dry runs per second, a phase of each kind per rate (0: as fast as answered; "
        "default 0.25,1)",
    )
    parser.add_argument("--warm", type=float, default=3.0, help="seconds of storm before B measures")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="workers, threads (default both)")
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="leave every process on every CPU (default: the operator on its own CPU, as on a node of its "
        "own, the control plane and this process on the others)",
    )
    parser.add_argument(
        "--cost-only",
        action="store_true",
        help="only the apiserver's CPU per large write, by kind and shape (apiserver_cost.py; 2 minutes), "
        f"written to {COST_RESULTS.relative_to(ROOT)} unless --out",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    args.out = args.out or (COST_RESULTS if args.cost_only else RESULTS)
    args.pin = args.pin and len(os.sched_getaffinity(0)) >= 2
    if args.pin:
        pin_family(os.getpid(), CONTROL_PLANE_CPUS)  # this process, and the control plane it starts
    workdir = Path(tempfile.mkdtemp(prefix="tp-bench-tenants-"))
    try:
        cp = ControlPlane(workdir / "cluster", ensure_binaries())
        cp.start()
    except (ControlPlaneUnavailable, ControlPlaneError) as err:
        print(f"no control plane: {err}", file=sys.stderr)
        return 2
    print(
        f"control plane up at {cp.url}; operator variants: {[] if args.cost_only else args.variants}",
        flush=True,
    )
    bench = Tenants(cp, workdir, args)
    report: dict[str, Any] = {
        "benchmark": "tenants",
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(cp),
        "config": {**vars(args), "out": str(args.out), "storm_clients": STORM_CLIENTS, "huge": HUGE},
        "goal": f"hostile/quiet below {GOAL} for B's admission p99 and reconcile latency",
        "variants": {},
    }
    try:
        bench.install()
        # first, while nothing else runs: what one large write costs the apiserver itself
        report["apiserver_cost"] = apiserver_cost.measure(cp, bench.kube, TENANT_C)
        for label in [] if args.cost_only else args.variants.split(","):
            report["variants"][label] = bench.variant(label, VARIANTS[label])
            report["variants"][label]["operator_part"] = operator_part(report["variants"][label])
            print(f"{label}: ratios to quiet {report['variants'][label]['ratios']}", flush=True)
        report["metrics"] = bench.metrics_note
        report["storm"] = {
            name: {"sent": storm.sent, "refused": storm.refused, "errors": storm.errors}
            for name, storm in bench.storms.items()
        }
    finally:
        bench.close()
        cp.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    write_report(report, args.out)
    print(json.dumps({k: v["ratios"] for k, v in report["variants"].items()}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
