"""The results of a run: what was measured, the targets, the configuration, the JSON file and the table."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.controlplane import ControlPlane
from harness.paths import CLI, ROOT

from .process import SampledOperator
from .restart import default_env
from .stats import median_of
from .workload import (
    EXAMPLE,
    LARGE_MODELS,
    LARGE_PIPELINES,
    LARGE_STEPS,
    LARGE_TENSORS,
    MODEL_REPOSITORY,
    MODES,
    NAMESPACES,
    OP_NS,
    WEBHOOK_NS,
    child_keys,
    cluster_doc,
)

RESULTS = ROOT / "bench" / "results"
TARGET_RATIO = 1.5  # operator time for N CRs (children + status) / floor time (children)
TARGET_P50_S = 0.5  # single CR p50, apply -> all children exist
TARGET_RSS_MB = 150.0  # operator VmHWM, MB = 10^6 bytes
TARGET_RESTART_RATIO = 1.5  # operator restart, N pipelines reconciled again / the floor re-applying them
TARGET_IDLE_REQUESTS = 1.0  # idle API requests per pipeline per minute
TARGET_IDLE_WRITES = 0.0  # idle writes (POST, PUT, PATCH, APPLY, DELETE) per pipeline per minute


@dataclass
class Measured:
    """What the scenarios returned, and the operator's state at the end."""

    warmup: dict[str, float]
    single: dict[str, Any]
    rounds: list[dict[str, Any]]
    rss_after_warmup_mb: float
    end: dict[str, float]  # proc_stat of the operator after the last round
    log_stats: dict[str, Any]
    watch_errors: list[str]
    machine: dict[str, Any]
    restart: dict[str, Any] | None = None  # restart.py: set-up, rounds, background
    idle: dict[str, Any] | None = None  # restart.py idle()
    webhook: dict[str, Any] | None = None  # admission.py
    load_during: list[dict[str, Any]] = field(default_factory=list)  # load average per phase


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def operator_log_stats(text: str) -> dict[str, Any]:
    lines = text.splitlines()

    def count(pattern: str) -> int:
        rx = re.compile(pattern)
        return sum(1 for line in lines if rx.search(line))

    return {
        "lines": len(lines),
        "applied": count(r"applied \d+ objects"),
        "handler_succeeded": count(r"Handler '.*' succeeded"),
        "retries": count(r"will retry|TemporaryError|Retrying"),
        "errors": count(r"\bERROR\b|Traceback"),
        "status_mirror_writes": count(r"replicas ready"),
    }


def machine_info(cp: ControlPlane) -> dict[str, Any]:
    cpu_model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    status, body = cp.get("/version")
    server = json.loads(body) if status == 200 else {}

    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    dirty = git("status", "--porcelain", "--", "operator")
    return {
        "git_commit": git("rev-parse", "HEAD"),
        "operator_code_modified": None if dirty is None else bool(dirty),
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_gb": round(mem_gb, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "kubernetes_version": cp.version,
        "apiserver_git_version": server.get("gitVersion"),
        "etcd_version": cp.binaries.etcd_version,
        "kopf": version("kopf"),
        "kubernetes_client": version("kubernetes"),
        "tritonpipeline": version("tritonpipeline"),
    }


def by_mode(rounds: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {mode: [x for x in rounds if x["mode"] == mode] for mode in MODES}


def ratios(rounds: dict[str, list[dict[str, Any]]], num: str, den: str) -> dict[str, Any]:
    """total_s of path `num` / path `den`, per round and their median (None unless every round completed)."""
    per_round = [
        round(a["total_s"] / b["total_s"], 3) if a["total_s"] and b["total_s"] else None
        for a, b in zip(rounds[num], rounds[den], strict=True)
    ]
    valid = [x for x in per_round if x is not None]
    ok = valid and len(valid) == len(per_round)
    return {"per_round": per_round, "median": round(statistics.median(valid), 3) if ok else None}


def median_cpu(rs: list[dict[str, Any]]) -> dict[str, float]:
    keys = rs[0]["cpu_s_per_cr_incl_trailing"].keys() if rs else []
    return {
        k: round(statistics.median(r["cpu_s_per_cr_incl_trailing"][k] for r in rs) * 1000, 1) for k in keys
    }


def results(m: Measured, operator: SampledOperator, exit_code: int | None, crs: int) -> dict[str, Any]:
    rounds = by_mode(m.rounds)
    totals = {mode: median_of(rounds[mode], "total_s") for mode in MODES}
    return {
        "warmup": m.warmup,
        "single": m.single,
        "rounds": m.rounds,
        "total_s_median": totals,
        "operator_children_s_median": median_of(rounds["operator"], "children_s"),
        "ratios": {
            "operator_vs_floor": ratios(rounds, "operator", "floor"),
            "cr_floor_vs_floor": ratios(rounds, "cr_floor", "floor"),
            "operator_vs_cr_floor": ratios(rounds, "operator", "cr_floor"),
        },
        "throughput_crs_per_s": {mode: round(crs / t, 2) if t else None for mode, t in totals.items()},
        "api_requests_per_cr": {
            mode: rs[-1]["api_requests_per_cr"] if rs else {} for mode, rs in rounds.items()
        },
        "cpu_ms_per_cr": {mode: median_cpu(rounds[mode]) for mode in MODES},
        "operator_rss": {
            "vmhwm_mb": round(m.end["hwm_mb"], 1),
            "sampled_max_mb": round(operator.rss_max_mb, 1),
            "samples": operator.rss_samples,
            "after_warmup_mb": round(m.rss_after_warmup_mb, 1),
            "end_mb": round(m.end["rss_mb"], 1),
            "per_phase_max": operator.phase_peaks(),
        },
        "operator_log": m.log_stats,
        "operator_exit_code": exit_code,
        "watch_errors": m.watch_errors[:10],
        "restart": restart_results(m.restart),
        "idle": m.idle,
        "webhook": m.webhook,
        "load_average_per_phase": m.load_during,
    }


def restart_results(r: dict[str, Any] | None) -> dict[str, Any] | None:
    """The restart rounds summed up: medians per path, the ratios (per round and median), the API
    requests per CR of the last round of each path."""
    if r is None:
        return None
    floor = [x for x in r["rounds"] if x["mode"] == "floor"]
    op = [x for x in r["rounds"] if x["mode"] == "operator"]

    def ratio(key: str) -> dict[str, Any]:
        per_round = [
            round(o[key] / f["total_s"], 3) if o[key] and f["total_s"] else None
            for o, f in zip(op, floor, strict=True)
        ]
        valid = [x for x in per_round if x is not None]
        ok = valid and len(valid) == len(per_round)
        return {"per_round": per_round, "median": round(statistics.median(valid), 3) if ok else None}

    return {
        **r,
        "total_s_median": {
            "floor": median_of(floor, "total_s"),
            "operator_from_spawn": median_of(op, "total_s"),
            "operator_from_started": median_of(op, "from_started_s"),
            "operator_startup": median_of(op, "startup_s"),
        },
        "ratios": {
            "operator_vs_floor": ratio("from_started_s"),
            "operator_from_spawn_vs_floor": ratio("total_s"),
        },
        "api_requests_per_cr": {
            "floor": floor[-1]["api_requests_per_cr"] if floor else {},
            "operator": op[-1]["api_requests_per_cr"] if op else {},
        },
    }


def targets(res: dict[str, Any], crs: int) -> list[dict[str, Any]]:
    ratio = res["ratios"]["operator_vs_floor"]["median"]
    p50 = res["single"]["to_children_s"]["p50"]
    hwm = res["operator_rss"]["vmhwm_mb"]
    return [*burst_targets(ratio, p50, hwm, crs), *restart_targets(res, crs)]


def restart_targets(res: dict[str, Any], crs: int) -> list[dict[str, Any]]:
    out = []
    restart, idle = res.get("restart"), res.get("idle")
    if restart is not None:
        ratio = restart["ratios"]["operator_vs_floor"]["median"]
        hwm = restart["operator_vmhwm_mb"]
        out += [
            {
                "name": "restart_within_1.5x_of_floor",
                "description": f"operator restarted with {crs} pipelines: from its start-up line until "
                f"every pipeline has an outcome line of the new process / the floor re-rendering and "
                f"re-applying every child of its {crs} pipelines (median over rounds) <= "
                f"{TARGET_RESTART_RATIO}",
                "value": ratio,
                "pass": ratio is not None and ratio <= TARGET_RESTART_RATIO,
            },
            {
                "name": "restart_operator_peak_rss",
                "description": f"VmHWM of every restarted operator process, through its restart and the "
                f"idle window, <= {TARGET_RSS_MB:.0f} MB (10^6 bytes)",
                "value": hwm,
                "pass": 0 < hwm <= TARGET_RSS_MB,
            },
        ]
    if idle is not None:
        req, writes = idle["requests_per_pipeline_per_minute"], idle["writes_per_pipeline_per_minute"]
        out += [
            {
                "name": "idle_requests_per_pipeline_per_minute",
                "description": f"operator alone with {idle['pipelines']} settled pipelines for "
                f"{idle['window_s']:.0f} s (resync {idle['resync_seconds']:g} s, status poll "
                f"{idle['status_poll_seconds']:g} s): API requests per pipeline per minute <= "
                f"{TARGET_IDLE_REQUESTS:g}",
                "value": req,
                "pass": req <= TARGET_IDLE_REQUESTS,
            },
            {
                "name": "idle_writes_per_pipeline_per_minute",
                "description": "the same window: writes (POST, PUT, PATCH, APPLY, DELETE) per pipeline per "
                f"minute == {TARGET_IDLE_WRITES:g}",
                "value": writes,
                "pass": writes <= TARGET_IDLE_WRITES,
            },
        ]
    return out


def burst_targets(ratio: float | None, p50: float | None, hwm: float, crs: int) -> list[dict[str, Any]]:
    return [
        {
            "name": "operator_within_1.5x_of_floor",
            "description": f"time for {crs} CRs to have children and status / floor time for the "
            f"same children (median over rounds) <= {TARGET_RATIO}",
            "value": ratio,
            "pass": ratio is not None and ratio <= TARGET_RATIO,
        },
        {
            "name": "single_cr_p50_to_children",
            "description": f"single CR, p50 of apply -> all children exist <= {TARGET_P50_S} s",
            "value": p50,
            "pass": p50 is not None and p50 <= TARGET_P50_S,
        },
        {
            "name": "operator_peak_rss",
            "description": f"operator VmHWM over the whole run <= {TARGET_RSS_MB:.0f} MB (10^6 bytes)",
            "value": hwm,
            "pass": hwm <= TARGET_RSS_MB,
        },
    ]


def run_config(args: argparse.Namespace) -> dict[str, Any]:
    """The configuration of the run, as the report records it."""
    return {
        "example": str(EXAMPLE.relative_to(ROOT)),
        "model_repository_uri": MODEL_REPOSITORY,
        "children_per_cr": sorted(
            f"{kind}/{name}" for kind, name in child_keys(cluster_doc("vision", OP_NS))
        ),
        "single_runs": args.single,
        "single_gap_s": args.single_gap,
        "crs": args.crs,
        "threads": args.threads,
        "rounds": args.rounds,
        "round_order": [", ".join(MODES if r % 2 else MODES[::-1]) for r in range(1, args.rounds + 1)],
        "timeout_s": args.timeout,
        "operator_command": f"{CLI.name} run -n {OP_NS}",
        "operator_env": {"TRITONPIPELINE_RESYNC_SECONDS": str(args.resync_seconds)},
        "namespaces": NAMESPACES,
        "modes": {
            "floor": "this script renders each pipeline and server-side applies its children "
            "(no CR, no status): the target's denominator",
            "cr_floor": "informational: this script applies the CR, its children (owned by the CR) and "
            "writes its status once; the least API work any operator causes per CR",
            "operator": "this script applies the CRs; the operator subprocess does the rest",
        },
        "completion": "watch events (children: metadata-only) received by this script",
        "status_written": "status.observedGeneration == metadata.generation and a SpecValid condition",
        "restart": {
            "crs": args.crs,
            "rounds": args.restart_rounds,
            "round_order": [
                "floor, operator" if r % 2 else "operator, floor" for r in range(1, args.restart_rounds + 1)
            ],
            "operator_env": default_env(),
            "floor": "this script renders each of its N pipelines again and server-side applies every child "
            "(unchanged), 16 threads",
            "operator": "the running operator stopped by its PID (SIGINT), a new `tritonpipeline run` "
            "started; done when each pipeline has an outcome line (`reconcile <outcome> (generation N)`) "
            "in the new process's log; timed from the spawn and from its start-up line",
            "background_window_s": args.background_seconds,
        },
        "idle": {
            "window_s": args.idle_seconds,
            "what": "the last restarted operator alone with its N settled pipelines at its default resync "
            "and status poll; API requests from apiserver_request_total, less the apiserver's own "
            "(measured with no operator running) and this script's watch re-lists",
        },
        "webhook": {
            "crs": args.webhook_crs,
            "large_pipeline": {
                "models": LARGE_MODELS,
                "pipelines": LARGE_PIPELINES,
                "steps_per_pipeline": LARGE_STEPS,
                "tensors_per_model": LARGE_TENSORS,
            },
            "probes_per_series": args.webhook_probes,
            "gap_s": args.webhook_gap,
            "cap_s": args.webhook_cap,
            "busy_resync_seconds": args.webhook_resync_seconds,
            "namespace": WEBHOOK_NS,
            "failure_policy": "Fail",
            "states": "idle_empty (no large pipeline), idle_loaded (N large, resync 3600 s), busy (N large, "
            "resync every busy_resync_seconds); each series: update probes (dry-run apply of a changed spec "
            "to a small pipeline), then create probes (dry-run POST of a new small pipeline)",
        },
    }


def results_path(args: argparse.Namespace) -> Path:
    return (
        Path(args.out)
        if args.out
        else RESULTS / ("controlplane-quick.json" if args.quick else "controlplane.json")
    )


def write_report(report: dict[str, Any], out: Path) -> None:
    """Write the JSON report at once (a temporary file renamed over `out`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(out)


def fmt(x: float | None, unit: str = "", digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}{unit}"


def print_report(res: dict[str, Any]) -> None:
    m, c, r = res["machine"], res["config"], res["results"]
    single = r["single"]
    print()
    print(
        f"control plane: kube-apiserver {m['kubernetes_version']}, etcd {m['etcd_version']}; "
        f"{m['nproc']} CPUs, load average {res['load_average_start']} (start) -> "
        f"{res['load_average_end']} (end); kopf {m['kopf']}; git {(m['git_commit'] or '?')[:7]}"
        + (" (operator/ modified)" if m["operator_code_modified"] else "")
    )
    head = f"single CR, one at a time (n={single['completed']}/{single['runs']})"
    print(f"\n{head:<48}{'p50':>10}{'p99':>10}{'max':>10}")
    for label, key in (
        ("apply -> all children exist", "to_children_s"),
        ("apply -> status written", "to_status_s"),
    ):
        x = single[key]
        print(f"  {label:<46}{fmt(x['p50'], ' s'):>10}{fmt(x['p99'], ' s'):>10}{fmt(x['max'], ' s'):>10}")
    rounds = r["rounds"]
    n, threads = c["crs"], c["threads"]
    print(
        f"\n{f'throughput: {n} CRs from {threads} threads':<48}"
        + "".join(f"{'round ' + str(i + 1):>10}" for i in range(c["rounds"]))
        + f"{'median':>10}"
    )
    by_mode = {mode: [x for x in rounds if x["mode"] == mode] for mode in MODES}
    rows = [
        ("floor: all children (script applies them)", "floor", "total_s"),
        ("cr_floor: CR + children + 1 status write", "cr_floor", "total_s"),
        ("operator: all children", "operator", "children_s"),
        ("operator: all children + status", "operator", "total_s"),
    ]
    for label, mode, key in rows:
        rs = by_mode[mode]
        cells = "".join(f"{fmt(x.get(key), ' s'):>10}" for x in rs)
        print(f"  {label:<46}{cells}{fmt(median_of(rs, key), ' s'):>10}")
    for label, key in (
        ("ratio operator / floor  (target)", "operator_vs_floor"),
        ("ratio cr_floor / floor  (info)", "cr_floor_vs_floor"),
        ("ratio operator / cr_floor  (info)", "operator_vs_cr_floor"),
    ):
        q = r["ratios"][key]
        cells = "".join(f"{fmt(x, 'x', 2):>10}" for x in q["per_round"])
        print(f"  {label:<46}{cells}{fmt(q['median'], 'x', 2):>10}")
    rate = r["throughput_crs_per_s"]
    print("  rate: " + ", ".join(f"{mode} {fmt(rate[mode], ' CR/s', 1)}" for mode in MODES))
    for label, key in (("children", "cr_created_to_children_s"), ("status", "cr_created_to_status_s")):
        lags = [x[key] for x in by_mode["operator"] if x[key]["n"]]
        if lags:
            p50 = statistics.median(x["p50"] for x in lags)
            p99 = statistics.median(x["p99"] for x in lags)
            print(
                f"  operator, per CR: CR ADDED -> {label:<8} p50 {p50:.3f} s, p99 {p99:.3f} s "
                "(median over rounds)"
            )
    api = r["api_requests_per_cr"]
    print(
        f"\nAPI requests per CR (apiserver_request_total, last {n}-CR round; this script's CR applies "
        "excluded;\n  POST ipaddresses is the apiserver allocating a Service ClusterIP)"
    )
    for mode in MODES:
        a = api[mode]
        calls = ", ".join(f"{k} {v:g}" for k, v in a["by_call"].items())
        print(f"  {mode:<9}{a['total']:>5.1f}: {calls}")
        if a["non_2xx"]:
            print(f"  {'':<9}       non-2xx: {a['non_2xx']}")
    print(
        "  apiserver request time per CR (apiserver_request_duration_seconds, all requests): "
        + ", ".join(f"{mode} {api[mode]['apiserver_request_ms_per_cr_total']:.0f} ms" for mode in MODES)
    )
    cpu = r["cpu_ms_per_cr"]
    print("\nCPU ms per CR (median over rounds, trailing work included)")
    procs = ("operator", "kube-apiserver", "etcd", "bench")
    print(f"  {'':<9}" + "".join(f"{p:>16}" for p in procs))
    for mode in MODES:
        print(f"  {mode:<9}" + "".join(f"{fmt(cpu[mode].get(p), '', 1):>16}" for p in procs))
    rss = r["operator_rss"]
    print(
        f"\noperator memory: peak RSS (VmHWM) {rss['vmhwm_mb']:.1f} MB; sampled VmRSS max "
        f"{rss['sampled_max_mb']:.1f} MB ({rss['samples']} samples); after warm-up "
        f"{rss['after_warmup_mb']:.1f} MB, at the end {rss['end_mb']:.1f} MB"
    )
    print("  per phase, max VmRSS MB / open sockets / threads:")
    print(
        "    "
        + "; ".join(
            f"{phase} {p.get('rss_mb', 0):.0f}/{p.get('sockets', 0):.0f}/{p.get('threads', 0):.0f}"
            for phase, p in rss["per_phase_max"].items()
        )
    )
    print_restart(r.get("restart"), r.get("idle"))
    print_webhook(r.get("webhook"))
    print()
    for t in res["targets"]:
        print(f"{'PASS' if t['pass'] else 'FAIL'}  {t['name']}: {t['description']} (value {t['value']})")
    hook = r.get("webhook")
    if hook:
        ph, q = hook["phases"], hook["ratios"]
        for kind in ("update", "create"):
            print(
                f"INFO  webhook_{kind}_p99_while_resyncing: dry-run {kind} p99 "
                f"{fmt(ph['busy'][kind]['latency_s']['p99'], ' s')} "
                f"with {hook['crs']} large pipelines resyncing every {ph['busy']['resync_seconds']:g} s, "
                f"{fmt(ph['idle_loaded'][kind]['latency_s']['p99'], ' s')} with them idle "
                f"({fmt(q[kind]['busy_vs_idle_loaded_p99'], 'x', 2)}), "
                f"{fmt(ph['idle_empty'][kind]['latency_s']['p99'], ' s')} with none"
            )
    if res["problems"]:
        print("\nproblems:\n  " + "\n  ".join(res["problems"]))
    print(f"\nruntime {res['runtime_s']:.0f} s; results in {res['out']}")


def calls_line(calls: dict[str, float], digits: int = 3) -> str:
    return ", ".join(f"{k} {v:.{digits}g}" for k, v in calls.items()) or "none"


def print_restart(restart: dict[str, Any] | None, idle: dict[str, Any] | None) -> None:
    if restart is not None:
        floor = [x for x in restart["rounds"] if x["mode"] == "floor"]
        op = [x for x in restart["rounds"] if x["mode"] == "operator"]
        n = restart["setup"]["crs"]
        print(
            f"\n{f'restart: {n} pipelines reconciled again':<48}"
            + "".join(f"{'round ' + str(i + 1):>10}" for i in range(len(op)))
            + f"{'median':>10}"
        )
        rows = [
            ("floor: re-render + re-apply every child", floor, "total_s"),
            ("operator: spawn -> start-up line", op, "startup_s"),
            ("operator: start-up line -> all reconciled", op, "from_started_s"),
            ("operator: spawn -> all reconciled", op, "total_s"),
        ]
        for label, rs, key in rows:
            cells = "".join(f"{fmt(x.get(key), ' s'):>10}" for x in rs)
            print(f"  {label:<46}{cells}{fmt(median_of(rs, key), ' s'):>10}")
        for label, key in (
            ("ratio operator / floor  (target)", "operator_vs_floor"),
            ("ratio from spawn / floor  (info)", "operator_from_spawn_vs_floor"),
        ):
            q = restart["ratios"][key]
            cells = "".join(f"{fmt(x, 'x', 2):>10}" for x in q["per_round"])
            print(f"  {label:<46}{cells}{fmt(q['median'], 'x', 2):>10}")
        print("  outcome lines of the new process: " + "; ".join(str(x["outcomes"]) for x in op))
        api = restart["api_requests_per_cr"]
        print("  API requests per CR (last round):")
        for mode in ("floor", "operator"):
            a = api[mode]
            if a:
                print(f"    {mode:<9}{a['total']:>5.1f}: {calls_line(a['by_call'])}")
                if a["non_2xx"]:
                    print(f"    {'':<9}       non-2xx: {a['non_2xx']}")
        print(
            "  restarted operator peak RSS (VmHWM, restart and idle): "
            f"{restart['operator_vmhwm_mb']:.1f} MB; "
            "CPU ms per CR (operator, apiserver, etcd): "
            + "; ".join(
                "/".join(
                    f"{1000 * x['cpu_s_per_cr_incl_trailing'].get(k, 0):.1f}"
                    for k in ("operator", "kube-apiserver", "etcd")
                )
                for x in op
            )
        )
    if idle is not None:
        print(
            f"\nidle: {idle['pipelines']} pipelines, {idle['window_s']:.0f} s, "
            f"resync {idle['resync_seconds']:g} s, "
            f"status poll {idle['status_poll_seconds']:g} s; {idle['reconciles_per_pipeline']} outcome lines "
            f"per pipeline ({idle['outcome_lines']}), operator CPU {idle['operator_cpu_pct']}%"
        )
        print(
            f"  per pipeline per minute: {idle['requests_per_pipeline_per_minute']} requests, "
            f"{idle['writes_per_pipeline_per_minute']} writes"
        )
        print(f"  operator's requests in the window: {calls_line(idle['operator_by_call'], 4)}")
        print(f"  apiserver's own, taken out: {calls_line(idle['background_by_call'])}")
        if idle["non_2xx"]:
            print(f"  non-2xx: {idle['non_2xx']}")


def print_webhook(hook: dict[str, Any] | None) -> None:
    if hook is None:
        return
    large = hook["large_pipeline"]
    print(
        f"\nwebhook: dry runs of a small pipeline, one at a time; {hook['crs']} large pipelines "
        f"({large['cr_json_bytes'] / 1000:.0f} KB each: {large['models']} models, {large['pipelines']} x "
        f"{large['steps_per_pipeline']} steps; compile+render {large['compile_render_s_median']:.2f} s, "
        f"verdict {large['webhook_verdict_s_median']:.2f} s here)"
    )
    print(
        f"  {'state':<12}{'probe':<8}{'n':>5}{'p50':>10}{'p99':>10}{'max':>10}{'webhook':>10}"
        f"{'recs/s':>8}{'op CPU':>8}{'err':>5}"
    )
    for label, ph in hook["phases"].items():
        for kind in ("update", "create"):
            x = ph[kind]
            lat, mean = x["latency_s"], x["apiserver_webhook_mean_ms"]
            print(
                f"  {label:<12}{kind:<8}{x['probes']:>5}"
                f"{fmt(lat['p50'], ' s'):>10}{fmt(lat['p99'], ' s'):>10}"
                f"{fmt(lat['max'], ' s'):>10}{fmt(mean / 1000 if mean is not None else None, ' s'):>10}"
                f"{x['operator_reconciles_per_s']:>8}{x['operator_cpu_pct']:>7}%{x['errors']:>5}"
            )
    print(
        "  (webhook: the apiserver's mean time calling it; recs/s: the operator's outcome lines per second; "
        "err: refused, e.g. the webhook's timeout)"
    )
    for label, ph in hook["phases"].items():
        answers = {kind: ph[kind]["webhook_answers"] for kind in ("update", "create")}
        retries = sum(ph[kind]["kopf_retries"] for kind in ("update", "create"))
        print(f"  {label}: the webhook's HTTP answers during the probes {answers}; kopf retries {retries}")
        if "before" in ph:
            b = ph["before"]
            print(
                f"  {label}: all {b['reconciled']} large pipelines reconciled "
                f"{b['all_reconciled_s']} s after the webhook served ({b['outcomes']}); "
                f"operator VmHWM {ph['vmhwm_mb']:.0f} MB"
            )
