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
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.controlplane import ControlPlane
from harness.paths import CLI, ROOT

from .process import SampledOperator
from .stats import median_of
from .workload import EXAMPLE, MODEL_REPOSITORY, MODES, NAMESPACES, OP_NS, child_keys, cluster_doc

RESULTS = ROOT / "bench" / "results"
TARGET_RATIO = 1.5  # operator time for N CRs (children + status) / floor time (children)
TARGET_P50_S = 0.5  # single CR p50, apply -> all children exist
TARGET_RSS_MB = 150.0  # operator VmHWM, MB = 10^6 bytes


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
    }


def targets(res: dict[str, Any], crs: int) -> list[dict[str, Any]]:
    ratio = res["ratios"]["operator_vs_floor"]["median"]
    p50 = res["single"]["to_children_s"]["p50"]
    hwm = res["operator_rss"]["vmhwm_mb"]
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
    print()
    for t in res["targets"]:
        print(f"{'PASS' if t['pass'] else 'FAIL'}  {t['name']}: {t['description']} (value {t['value']})")
    if res["problems"]:
        print("\nproblems:\n  " + "\n  ".join(res["problems"]))
    print(f"\nruntime {res['runtime_s']:.0f} s; results in {res['out']}")
