#!/usr/bin/env python3
"""Chaos on real parts (issue 53, point 7), measured: the scenarios of tests/component/test_chaos.py, each on
a real
kube-apiserver + etcd with the operator as real `tritonpipeline run` processes, run by pytest exactly as
`make test` runs them; their numbers and outcomes go to bench/results/chaos.json.

    make bench-chaos                                   (= .venv/bin/python -m bench.chaos)
    .venv/bin/python -m bench.chaos [-k EXPR] [--out PATH]

The scenarios and what each one checks are in tests/component/test_chaos.py. The summary gives the three
numbers the
issue asks for: objects of others changed or deleted (0), the seconds to undo drift after a 60 s apiserver
outage (within one resync period), and writes refused during a rolling upgrade across the CRD skew (0).
Exit status: pytest's (0 when every scenario passed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "chaos.json"
PARTIAL = RESULTS.with_name("chaos-selected.tmp")  # a run of some scenarios only (-k)
TESTS = "tests/component/test_chaos.py"
# where tests/component/test_chaos.py writes what it measured (JSON)
RESULTS_ENV = "TRITONPIPELINE_CHAOS_RESULTS"

# test -> (the scenario's key in the results, the tests that check its parts one at a time)
SCENARIOS = {
    "test_a_teams_objects_under_generated_names_survive_changes_kills_restarts_and_deletion": (
        "others_objects",
        "tests/component/test_operator_ownership.py",
    ),
    "test_pipelines_whose_names_collide_do_not_flap_through_changes_and_a_kill": (
        "colliding_names",
        "tests/component/test_operator_ownership.py::test_pipelines_whose_children_names_collide_do_not_fight",
    ),
    "test_drift_is_undone_within_one_resync_after_a_60s_apiserver_outage": (
        "apiserver_outage_60s",
        "tests/component/test_operator_outage.py::test_drift_after_an_apiserver_outage_is_repaired_within_one_resync",
    ),
    "test_kill_9_mid_apply_leaves_no_half_applied_duplicate_or_orphan_child": (
        "kill_9_mid_apply",
        "tests/component/test_operator.py::test_kill_9_mid_reconcile_then_restart_converges",
    ),
    "test_the_standby_takes_over_under_churn_and_every_pipeline_converges_to_its_last_spec": (
        "failover_under_churn",
        "tests/component/test_operator_ha.py",
    ),
    "test_a_rolling_upgrade_across_the_crd_skew_refuses_no_write_and_marks_no_pipeline_invalid": (
        "rolling_upgrade_across_crd_skew",
        "tests/component/test_crd_skew.py",
    ),
}


def summary(scenarios: dict[str, Any]) -> dict[str, Any]:
    """The issue's three numbers (None where the scenario did not get that far), with the failover's and
    the kill's."""

    def number(key: str, name: str) -> Any:
        return (scenarios.get(key) or {}).get("numbers", {}).get(name)

    others = [
        n.get("others_changed", 0) + n.get("others_deleted", 0)
        for s in scenarios.values()
        if "others_changed" in (n := s["numbers"])
    ]
    return {
        "others_objects_changed_or_deleted": sum(others) if others else None,
        "drift_repair_after_outage_s": number("apiserver_outage_60s", "drift_repair_after_outage_s"),
        "resync_period_s": number("apiserver_outage_60s", "resync_period_s"),
        "writes_refused_in_skew_window": number("rolling_upgrade_across_crd_skew", "writes_refused"),
        "pipelines_marked_invalid_in_skew_window": number(
            "rolling_upgrade_across_crd_skew", "pipelines_marked_invalid"
        ),
        "failover_takeover_s": number("failover_under_churn", "takeover_s"),
        "kill_9_mid_update_converge_s": number("kill_9_mid_apply", "update_converged_after_kill_s"),
        "kill_9_inconsistent_mounts_seen": number("kill_9_mid_apply", "mount_cuts_inconsistent"),
    }


def run(selection: str | None) -> tuple[int, dict[str, Any]]:
    """pytest over the scenarios: its exit status and what the module recorded ({} if it recorded nothing)."""
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        out = Path(tmp) / "chaos.json"
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", TESTS]
        command += ["-k", selection] if selection else []
        proc = subprocess.run(command, cwd=ROOT, env={**os.environ, RESULTS_ENV: str(out)}, check=False)
        return proc.returncode, json.loads(out.read_text()) if out.exists() else {}


def table(result: dict[str, Any]) -> str:
    lines = [f"{'scenario':<34} {'result':<6} {'seconds':>7}  numbers"]
    for key, s in result["scenarios"].items():
        numbers = ", ".join(f"{k}={v}" for k, v in s["numbers"].items())
        lines.append(f"{key:<34} {'PASS' if s['passed'] else 'FAIL':<6} {s['seconds']:>7}  {numbers}")
    lines.append("")
    lines += [f"{k}: {v}" for k, v in result["summary"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="selection", help="only the scenarios pytest's -k EXPR selects")
    parser.add_argument(
        "--out", type=Path, help=f"results file (default {RESULTS}; with -k, {PARTIAL}, which git ignores)"
    )
    args = parser.parse_args(argv)
    args.out = args.out or (PARTIAL if args.selection else RESULTS)
    started, load_start = time.monotonic(), [round(x, 2) for x in os.getloadavg()]
    timestamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    status, recorded = run(args.selection)
    if not recorded:
        print(f"chaos: {TESTS} recorded nothing (pytest exit status {status})", file=sys.stderr)
        return status or 2
    scenarios = {}
    for test, found in recorded["scenarios"].items():
        key, parts = SCENARIOS.get(test, (test, None))
        scenarios[key] = {"test": f"{TESTS}::{test}", "parts_also_tested_in": parts, **found}
    machine = recorded["machine"]
    result = {
        "timestamp": timestamp,
        "runtime_s": round(time.monotonic() - started, 1),
        "load_average_start": load_start,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "git_commit": machine.get("git_commit"),
        "machine": machine,
        "pytest_exit_status": status,
        "passed": status == 0 and all(s["passed"] for s in scenarios.values()),
        "summary": summary(scenarios),
        "scenarios": scenarios,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"results: {args.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
