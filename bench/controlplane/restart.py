"""The restart and idle scenarios: N pipelines in place through the operator and through the floor; the
operator stopped (by PID) and started again until every pipeline has been reconciled by the new process,
side by side with the floor re-applying every child of its N pipelines; then the operator left alone with
its N pipelines for a window, at its default resync and status poll, counting its API requests."""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tritonpipeline.settings import Settings

from .apiserver_metrics import api_snapshot, per_cr, per_minute, rates
from .logtail import LogTail
from .process import SampledOperator, proc_stat, self_cpu
from .scenarios import Bench
from .stats import summary
from .workload import NAMESPACES, OP_NS, child_keys, cluster_doc, now

PREFIX = "rs"  # the restart scenario's pipelines: rs-000, rs-001, ... in both namespaces


def default_env() -> dict[str, str]:
    """The operator's own defaults for the resync and the status poll, set explicitly (a value in this
    script's environment would otherwise reach the operator)."""
    defaults = Settings()
    return {
        "TRITONPIPELINE_RESYNC_SECONDS": f"{defaults.resync_seconds:g}",
        "TRITONPIPELINE_STATUS_POLL_SECONDS": f"{defaults.status_poll_seconds:g}",
    }


@dataclasses.dataclass
class Restart:
    """The restart scenario's state: its pipelines, the operator process now running, what was measured."""

    names: list[str]
    setup: dict[str, Any]
    rounds: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    background_per_minute: dict[str, float] = dataclasses.field(default_factory=dict)
    background: dict[str, Any] = dataclasses.field(default_factory=dict)


def docs(n: int, namespace: str) -> list[dict[str, Any]]:
    return [cluster_doc(f"{PREFIX}-{i:03d}", namespace) for i in range(n)]


def cpu(bench: Bench, pid: int | None) -> dict[str, float]:
    """CPU seconds so far of this script, the operator process `pid` (if any), kube-apiserver and etcd."""
    out = {"bench": self_cpu()}
    if pid is not None:
        out["operator"] = proc_stat(pid)["cpu_s"]
    for name, p in bench.cp.pids().items():
        out[name] = proc_stat(p)["cpu_s"]
    return out


def per_cr_cpu(c0: dict[str, float], c1: dict[str, float], n: int) -> dict[str, float]:
    return {k: round((c1[k] - c0[k]) / n, 4) for k in c1 if k in c0}


def set_up(bench: Bench, n: int) -> Restart:
    """N pipelines applied through the operator (children and status written) and N through the floor
    (children applied by this script), then the operator settled."""
    assert bench.operator is not None
    bench.operator.phase = "restart-setup"
    bench.mark("restart set-up")
    operator_docs, floor_docs = docs(n, OP_NS), docs(n, NAMESPACES["floor"])
    out: dict[str, Any] = {"crs": n}
    for mode, batch, task in (
        ("operator", operator_docs, bench.kube.apply),
        ("floor", floor_docs, bench.floor_one),
    ):
        rec = bench.recs[mode]
        keys = {d["metadata"]["name"]: child_keys(d) for d in batch}
        t0 = now()
        with ThreadPoolExecutor(bench.args.threads) as pool:
            list(pool.map(task, batch))

        def complete(rec: Any = rec, keys: Any = keys, mode: str = mode) -> bool:
            if any(rec.children_time(k) is None for k in keys.values()):
                return False
            return mode == "floor" or all(name in rec.status for name in keys)

        if not rec.wait(complete, bench.args.timeout):
            bench.problems.append(f"restart set-up: the {mode} path's {n} pipelines not in place")
        out[f"{mode}_s"] = round(now() - t0, 3)
    out["settle_s"] = round(bench.settle(), 2)
    return Restart(names=[d["metadata"]["name"] for d in operator_docs], setup=out)


def floor_reapply(bench: Bench, rnd: int, n: int) -> dict[str, Any]:
    """The floor's restart: render every pipeline again and server-side apply every child (unchanged:
    the apiserver writes nothing), from the same thread pool as the bursts."""
    batch = docs(n, NAMESPACES["floor"])
    errors: list[str] = []
    bench.mark(f"restart floor round {rnd}")

    def run(doc: dict[str, Any]) -> None:
        try:
            bench.floor_one(doc)
        except Exception as exc:
            errors.append(f"{doc['metadata']['name']}: {exc!r}"[:300])

    c0, req0 = cpu(bench, None), api_snapshot(bench.cp)
    t0 = now()
    with ThreadPoolExecutor(bench.args.threads) as pool:
        list(pool.map(run, batch))
    total = now() - t0
    c1, req1 = cpu(bench, None), api_snapshot(bench.cp)
    if errors:
        bench.problems.append(f"restart round {rnd}, floor: {len(errors)} apply errors")
    return {
        "mode": "floor",
        "round": rnd,
        "crs": n,
        "complete": not errors,
        "total_s": round(total, 3) if not errors else None,
        "cpu_s_per_cr": per_cr_cpu(c0, c1, n),
        "api_requests_per_cr": per_cr(req0, req1, n, own={}),
        "apply_errors": errors[:5],
    }


def operator_restart(
    bench: Bench, state: Restart, old: SampledOperator, rnd: int, background_s: float
) -> tuple[dict[str, Any], SampledOperator]:
    """Stop `old` by its PID (SIGINT, as kopf stops cleanly; SIGKILL after 20 s), measure the apiserver's
    own requests meanwhile when `background_s` > 0, then start a new operator process (the operator's
    default resync and status poll) and time until each pipeline has an outcome line in its log."""
    names = set(state.names)
    old_pid = old.pid
    old_hwm = proc_stat(old_pid)["hwm_mb"]
    stopped = old.stop()
    if background_s > 0:  # nothing but the apiserver (and this script's idle watches) runs now
        lists0 = bench.own_lists()
        b0, t_b0 = api_snapshot(bench.cp), now()
        time.sleep(background_s)
        b1, t_b1 = api_snapshot(bench.cp), now()
        own = bench.own_lists() - lists0
        state.background_per_minute = {
            call: rate
            for call, rate in per_minute(b0, b1, t_b1 - t_b0).items()
            if rate - own.get(call, 0) * 60 / (t_b1 - t_b0) > 0
        }
        state.background = {
            "window_s": round(t_b1 - t_b0, 1),
            "per_minute": state.background_per_minute,
            "this_script_lists": dict(own),
        }
    bench.mark(f"restart operator round {rnd}")
    log = bench.workdir / f"operator-restart-{rnd}.log"
    op = SampledOperator(bench.cp.kubeconfig, OP_NS, log, default_env())
    bench.extra.append(op)
    tail = LogTail(log, OP_NS).start()
    c0, req0 = cpu(bench, None), api_snapshot(bench.cp)
    t0 = now()
    op.phase = f"restart-{rnd}"
    op.start()
    done = tail.wait(lambda: tail.reconciled(names) == len(names), bench.args.timeout)
    with tail.cond:
        first = {name: tail.first[name] for name in names if name in tail.first}
        started = tail.started
    c1 = {**cpu(bench, None), "operator": proc_stat(op.pid)["cpu_s"]}
    settle_s = bench.settle(pid=op.pid)
    c2, req1 = cpu(bench, op.pid), api_snapshot(bench.cp)
    outcomes = tail.all_outcomes()
    tail.stop()
    n = len(names)
    last = max(first.values()) if first else None
    if not done:
        bench.problems.append(
            f"restart round {rnd}: {len(first)}/{n} pipelines reconciled by the new process"
        )
    c0["operator"] = 0.0
    result = {
        "mode": "operator",
        "round": rnd,
        "crs": n,
        "complete": done,
        "stopped_pid": old_pid,
        "stopped_exit_code": stopped,
        "stopped_vmhwm_mb": round(old_hwm, 1),
        "pid": op.pid,
        "reconciled": len(first),
        # from the new process's spawn: its start-up (interpreter, imports, kopf) included
        "total_s": round(last - t0, 3) if done and last is not None else None,
        "startup_s": round(started - t0, 3) if started is not None else None,
        # from its start-up line (OPERATOR_STARTED): the work of reconciling, as the floor's time is
        "from_started_s": (
            round(last - started, 3) if done and last is not None and started is not None else None
        ),
        "per_pipeline_from_spawn_s": summary([t - t0 for t in first.values()]),
        "outcomes": dict(outcomes),
        "outcome_lines_per_pipeline": round(sum(outcomes.values()) / n, 2),
        "cpu_s_per_cr": per_cr_cpu(c0, c1, n),
        "cpu_s_per_cr_incl_trailing": per_cr_cpu(c0, c2, n),
        "trailing_settle_s": round(settle_s, 2),
        "api_requests_per_cr": per_cr(req0, req1, n, own={}),
        "vmhwm_mb": round(proc_stat(op.pid)["hwm_mb"], 1),
    }
    return result, op


def rounds(bench: Bench, state: Restart, n_rounds: int, background_s: float) -> SampledOperator:
    """Restart rounds: floor first in odd rounds, the operator first in even ones. Returns the operator
    process now running (the last one started)."""
    assert bench.operator is not None
    current = bench.operator
    for rnd in range(1, n_rounds + 1):
        order = ("floor", "operator") if rnd % 2 else ("operator", "floor")
        for mode in order:
            if mode == "floor":
                res = floor_reapply(bench, rnd, len(state.names))
                line = f"total {fmt_s(res['total_s'])}"
            else:
                res, current = operator_restart(bench, state, current, rnd, background_s if rnd == 1 else 0)
                line = (
                    f"total {fmt_s(res['total_s'])} from spawn, {fmt_s(res['from_started_s'])} from its "
                    f"start-up line ({res['reconciled']}/{res['crs']}; outcomes {res['outcomes']})"
                )
            state.rounds.append(res)
            api = res["api_requests_per_cr"]
            print(
                f"restart round {rnd} {mode:<8}: {line}; {api['total']:.1f} API requests per CR", flush=True
            )
    return current


def idle(bench: Bench, state: Restart, op: SampledOperator, seconds: float) -> dict[str, Any]:
    """The operator with its N pipelines settled, alone for `seconds`: its API requests by verb and
    resource, per pipeline per minute (the apiserver's own background and this script's lists taken
    out), and how many reconciles its resync made meanwhile."""
    n = len(state.names)
    op.phase = "idle"
    tail = LogTail(op.log, OP_NS).start()
    settle_s = bench.settle(pid=op.pid)
    bench.mark("idle")
    lists0, c0 = bench.own_lists(), proc_stat(op.pid)["cpu_s"]
    req0, t0 = api_snapshot(bench.cp), now()
    time.sleep(seconds)
    req1, t1 = api_snapshot(bench.cp), now()
    own = bench.own_lists() - lists0
    c1 = proc_stat(op.pid)
    outcomes = tail.outcomes_between(t0, t1)
    tail.stop()
    out = rates(req0, req1, t1 - t0, n, state.background_per_minute, dict(own))
    defaults = default_env()
    out.update(
        {
            "settle_before_s": round(settle_s, 2),
            "resync_seconds": float(defaults["TRITONPIPELINE_RESYNC_SECONDS"]),
            "status_poll_seconds": float(defaults["TRITONPIPELINE_STATUS_POLL_SECONDS"]),
            "outcome_lines": dict(outcomes),
            "reconciles_per_pipeline": round(sum(outcomes.values()) / n, 2),
            "operator_cpu_s": round(c1["cpu_s"] - c0, 2),
            "operator_cpu_pct": round(100 * (c1["cpu_s"] - c0) / (t1 - t0), 2),
            "operator_rss_mb_end": round(c1["rss_mb"], 1),
            "operator_vmhwm_mb": round(c1["hwm_mb"], 1),
            "pid": op.pid,
        }
    )
    return out


def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f} s"
