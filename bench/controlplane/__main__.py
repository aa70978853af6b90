"""`make bench-controlplane` (`python -m bench.controlplane`): start a control plane, run the scenarios,
write and print the report. See bench/controlplane/__init__.py for what is measured."""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.controlplane import ControlPlane
from harness.controlplane_binaries import ControlPlaneError, ControlPlaneUnavailable, ensure_binaries

from . import __doc__ as DESCRIPTION
from . import restart
from .admission import Admission
from .process import proc_stat
from .report import (
    Measured,
    fmt,
    loadavg,
    machine_info,
    operator_log_stats,
    print_report,
    results,
    results_path,
    run_config,
    targets,
    write_report,
)
from .scenarios import Bench
from .workload import MODES


def start_control_plane(workdir: Path) -> ControlPlane | None:
    """etcd + kube-apiserver under `workdir`, started; None (and why, on stderr) when it cannot run."""
    try:
        cp = ControlPlane(workdir / "cluster", ensure_binaries())
        cp.start()
    except (ControlPlaneUnavailable, ControlPlaneError) as err:
        print(f"no control plane: {err}", file=sys.stderr)
        return None
    print(f"control plane up in {cp.startup_seconds:.1f} s at {cp.url} (workdir {workdir})", flush=True)
    return cp


def throughput_rounds(bench: Bench, rounds: int) -> list[dict[str, Any]]:
    """Each round runs a burst through every path; the order alternates between rounds."""
    out = []
    for rnd in range(1, rounds + 1):
        for mode in MODES if rnd % 2 else MODES[::-1]:
            res = bench.burst(mode, rnd)
            out.append(res)
            print(
                f"round {rnd} {mode:<8}: children {fmt(res['children_s'], ' s')}, "
                f"status {fmt(res['status_s'], ' s')}, total {fmt(res['total_s'], ' s')} "
                f"({res['children_done']}/{res['crs']}; submit {res['submit_s']:.2f} s; "
                f"trailing work {res['trailing_settle_s']:.1f} s)",
                flush=True,
            )
    return out


def restart_and_idle(bench: Bench, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The restart rounds on N pipelines (each path), then the idle window of the last operator started."""
    state = restart.set_up(bench, args.crs)
    print(
        f"restart: {args.crs} pipelines in place (operator {state.setup['operator_s']:.1f} s, "
        f"floor {state.setup['floor_s']:.1f} s)",
        flush=True,
    )
    current = restart.rounds(bench, state, args.restart_rounds, args.background_seconds)
    bg = ", ".join(f"{k} {v:g}" for k, v in state.background_per_minute.items()) or "none"
    print(f"apiserver's own requests per minute, no operator running: {bg}", flush=True)
    idle = None
    if args.idle_seconds > 0:
        print(f"idle: {args.idle_seconds:g} s with {args.crs} pipelines, default resync and poll", flush=True)
        idle = restart.idle(bench, state, current, args.idle_seconds)
        print(
            f"idle: {idle['requests_per_pipeline_per_minute']} requests and "
            f"{idle['writes_per_pipeline_per_minute']} writes per pipeline per minute "
            f"({idle['operator_by_call']})",
            flush=True,
        )
    rss = max([r["vmhwm_mb"] for r in state.rounds if r["mode"] == "operator"] + [0.0])
    if idle is not None:
        rss = max(rss, idle["operator_vmhwm_mb"])
    current.stop()
    result = {
        "setup": state.setup,
        "rounds": state.rounds,
        "background": state.background,
        "operator_vmhwm_mb": rss,
    }
    return result, idle


def measure(bench: Bench, args: argparse.Namespace) -> Measured:
    """Install the CRD, start the operator, then the warm-up, the single CRs and the throughput rounds;
    then the restart rounds and the idle window, then the webhook scenario."""
    rounds = args.rounds
    bench.install()
    bench.start_operator()
    assert bench.operator is not None
    warmup = bench.warm_up()
    rss_after_warmup = proc_stat(bench.operator.pid)["rss_mb"]
    print(f"operator up; first CR reconciled {warmup['operator_first_cr_s']:.2f} s after apply", flush=True)
    single = bench.single()
    s = single["to_children_s"]
    print(f"single: p50 {fmt(s['p50'], ' s')} p99 {fmt(s['p99'], ' s')} to children", flush=True)
    done = throughput_rounds(bench, rounds)
    end, log_stats = proc_stat(bench.operator.pid), operator_log_stats(bench.operator.text())
    restarted, idle = restart_and_idle(bench, args) if args.restart_rounds > 0 else (None, None)
    admission = None
    if args.webhook_crs > 0:
        admission = Admission(
            bench,
            args.webhook_crs,
            args.webhook_probes,
            args.webhook_gap,
            args.webhook_cap,
            args.webhook_resync_seconds,
        ).run()
    return Measured(
        warmup=warmup,
        single=single,
        rounds=done,
        rss_after_warmup_mb=rss_after_warmup,
        end=end,
        log_stats=log_stats,
        watch_errors=[e for rec in bench.recs.values() for e in rec.errors],
        machine=machine_info(bench.cp),
        restart=restarted,
        idle=idle,
        webhook=admission,
        load_during=bench.loads,
    )


def run(args: argparse.Namespace) -> int:
    started, load_start = time.monotonic(), loadavg()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tp-bench-controlplane-"))
    workdir.mkdir(parents=True, exist_ok=True)
    cp = start_control_plane(workdir)
    if cp is None:
        return 2
    bench = Bench(cp, args, workdir)
    try:
        measured = measure(bench, args)
    finally:
        exit_code = bench.close()
        cp.stop()
    assert bench.operator is not None
    res = results(measured, bench.operator, exit_code, args.crs)
    out = results_path(args)
    report = {
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "runtime_s": round(time.monotonic() - started, 1),
        "load_average_start": load_start,
        "load_average_end": loadavg(),
        "control_plane_startup_s": round(cp.startup_seconds or 0, 2),
        "machine": measured.machine,
        "config": run_config(args),
        "results": res,
        "targets": targets(res, args.crs),
        "problems": bench.problems,
        "out": str(out),
    }
    write_report(report, out)
    print_report(report)
    if args.keep:
        print(f"kept {workdir} (operator.log, cluster/)")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if bench.problems else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(DESCRIPTION or "").split("\n\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 5 single CRs, 40-CR bursts, 1 round; 40 CRs restarted once, 30 s idle; "
        "20 large pipelines and 40 webhook probes per state",
    )
    p.add_argument("--single", type=int, default=20, help="single-CR runs (default 20)")
    p.add_argument("--single-gap", type=float, default=0.3, help="idle seconds before each single CR")
    p.add_argument("--crs", type=int, default=200, help="CRs per throughput round (default 200)")
    p.add_argument("--threads", type=int, default=16, help="client thread pool size (default 16)")
    p.add_argument("--rounds", type=int, default=2, help="throughput rounds, each floor + operator")
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait for one phase to complete")
    p.add_argument("--startup-timeout", type=float, default=60)
    p.add_argument(
        "--resync-seconds",
        type=float,
        default=3600,
        help="operator drift-repair period (TRITONPIPELINE_RESYNC_SECONDS; the operator's default is 60: "
        "a pass re-reconciles every CR and would land at a random point inside a round)",
    )
    p.add_argument(
        "--restart-rounds",
        type=int,
        default=4,
        help="restart rounds on --crs pipelines, each the floor's re-apply and an operator restart "
        "(0: no restart and no idle scenario)",
    )
    p.add_argument(
        "--background-seconds",
        type=float,
        default=60,
        help="window, with no operator running (first restart round), in which the apiserver's own "
        "requests are counted (taken out of the idle figures)",
    )
    p.add_argument(
        "--idle-seconds",
        type=float,
        default=180,
        help="idle window: the operator alone with --crs pipelines at its default resync (0: none)",
    )
    p.add_argument(
        "--webhook-crs", type=int, default=200, help="large pipelines of the webhook scenario (0: none)"
    )
    p.add_argument(
        "--webhook-probes",
        type=int,
        default=200,
        help="dry runs per series (update, then create) in each webhook state",
    )
    p.add_argument("--webhook-gap", type=float, default=0.05, help="seconds between two dry runs")
    p.add_argument("--webhook-cap", type=float, default=120, help="most seconds of each probe series")
    p.add_argument(
        "--webhook-resync-seconds",
        type=float,
        default=5,
        help="the busy state's resync period (the operator's TRITONPIPELINE_RESYNC_SECONDS)",
    )
    p.add_argument("--out", help="results file (default bench/results/controlplane[-quick].json)")
    p.add_argument(
        "--workdir", help="where the control plane and the operator log live (default: a temp dir)"
    )
    p.add_argument("--keep", action="store_true", help="keep the workdir")
    args = p.parse_args(argv)
    if args.quick:
        args.single, args.crs, args.rounds = 5, 40, 1
        args.restart_rounds = min(args.restart_rounds, 1)
        args.background_seconds = min(args.background_seconds, 10)
        args.idle_seconds = min(args.idle_seconds, 30)
        args.webhook_crs, args.webhook_probes = min(args.webhook_crs, 20), min(args.webhook_probes, 40)
        args.webhook_cap = min(args.webhook_cap, 30)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
