"""The scenarios: a warm-up, single CRs one at a time, and bursts of N CRs through each path (the
operator, the floor that applies the children itself, the CR floor that also writes a status)."""

from __future__ import annotations

import argparse
import copy
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness.controlplane import ControlPlane
from harness.kubeapi import ensure_namespace, install_generated_crd
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.router_choice import choose_router
from tritonpipeline.kube.api_client import Kube, path
from tritonpipeline.reconcile.apply import owned
from tritonpipeline.render import conditions as st
from tritonpipeline.render.manifests import endpoint, owner_reference, render_children
from tritonpipeline.settings import KIND, Settings
from tritonpipeline.spec import parse_pipeline

from .apiserver_metrics import api_snapshot, per_cr
from .process import SampledOperator, proc_stat, self_cpu
from .stats import summary
from .watch import Recorder
from .workload import (
    API,
    CHILD_KINDS,
    FIELD_MANAGER,
    NAMESPACES,
    OP_NS,
    WEBHOOK_NS,
    api_client,
    child_keys,
    cluster_doc,
    now,
    render,
)


class Bench:
    """One control plane, the operator subprocess watching its namespace, a Recorder per path, and the
    scenarios run against them."""

    def __init__(self, cp: ControlPlane, args: argparse.Namespace, workdir: Path) -> None:
        self.cp = cp
        self.args = args
        self.workdir = workdir
        self.kube = Kube(api_client(cp.kubeconfig, 64), FIELD_MANAGER)
        self.operator: SampledOperator | None = None  # the one of the warm-up, single CRs and bursts
        self.extra: list[SampledOperator] = []  # those started later (restarts, the webhook scenario)
        self.recs: dict[str, Recorder] = {}
        self.problems: list[str] = []
        self.loads: list[dict[str, Any]] = []  # the host's load average as each phase started
        self.t0 = time.monotonic()

    def mark(self, phase: str) -> None:
        """Note the 1/5/15-minute load average as `phase` starts."""
        self.loads.append(
            {
                "phase": phase,
                "at_s": round(time.monotonic() - self.t0, 1),
                "loadavg": [round(x, 2) for x in os.getloadavg()],
            }
        )

    # -- cluster state ---------------------------------------------------------------------------------

    def install(self) -> None:
        install_generated_crd(self.kube)
        for ns in [*NAMESPACES.values(), WEBHOOK_NS]:
            ensure_namespace(self.kube, ns)

    def cpu(self) -> dict[str, float]:
        out = {"bench": self_cpu()}
        assert self.operator is not None
        out["operator"] = proc_stat(self.operator.pid)["cpu_s"]
        for name, pid in self.cp.pids().items():
            out[name] = proc_stat(pid)["cpu_s"]
        return out

    def settle(self, quiet_s: float = 1.0, timeout: float = 30.0, pid: int | None = None) -> float:
        """Wait until the operator (or process `pid`) used < 2% CPU over `quiet_s`; returns the seconds
        waited."""
        if pid is None:
            assert self.operator is not None
            pid = self.operator.pid
        t0 = time.monotonic()
        last = proc_stat(pid)["cpu_s"]
        while time.monotonic() - t0 < timeout:
            time.sleep(quiet_s)
            cur = proc_stat(pid)["cpu_s"]
            if cur - last < 0.02 * quiet_s:
                break
            last = cur
        return time.monotonic() - t0

    def delete_all(self, namespace: str, with_crs: bool) -> None:
        kinds = [(API, KIND)] if with_crs else []
        kinds += [*CHILD_KINDS, ("v1", "Event")]
        kinds += [("v1", "Secret")] if with_crs else []  # the operator's admin-key Secrets
        for api_version, kind in kinds:
            self.kube.request("DELETE", path(api_version, kind, namespace))

    def own_lists(self) -> Counter[str]:
        """This script's list requests so far ('LIST plural'), from its watches' (re)lists."""
        total: Counter[str] = Counter()
        for rec in self.recs.values():
            with rec.cond:
                total.update(rec.lists)
        return total

    def close(self) -> int | None:
        """Stop the watches and every operator process started (by PID); the first operator's exit code
        (None when it never ran)."""
        for rec in self.recs.values():
            rec.stop()
        for op in self.extra:
            op.stop()
        return self.operator.stop() if self.operator else None

    # -- phases ------------------------------------------------------------------------------------------

    def start_operator(self) -> None:
        env = {"TRITONPIPELINE_RESYNC_SECONDS": str(self.args.resync_seconds)}
        self.operator = SampledOperator(self.cp.kubeconfig, OP_NS, self.workdir / "operator.log", env).start()
        for mode, ns in NAMESPACES.items():
            self.recs[mode] = Recorder(self.cp.kubeconfig, ns, with_crs=mode != "floor").start()

    def warm_up(self) -> dict[str, float]:
        """One CR through the operator (also: the operator is up and watching), one through each floor."""
        assert self.operator is not None
        rec = self.recs["operator"]
        t0 = now()
        doc = cluster_doc("warmup-0", OP_NS)
        keys = child_keys(doc)
        self.kube.apply(doc)
        ok = rec.wait(
            lambda: "warmup-0" in rec.status and rec.children_time(keys) is not None,
            self.args.startup_timeout,
        )
        if not ok:
            raise RuntimeError(
                f"the operator did not reconcile a first CR within {self.args.startup_timeout} s; "
                f"log tail:\n{self.operator.text()[-3000:]}"
            )
        op_first = now() - t0
        for mode, task in (("floor", self.floor_one), ("cr_floor", self.cr_floor_one)):
            task(cluster_doc("warmup-0", NAMESPACES[mode]))
            rec = self.recs[mode]

            def applied(rec: Recorder = rec) -> bool:
                return rec.children_time(keys) is not None

            rec.wait(applied, 30)
        self.operator.phase = "warmup"
        self.settle()
        return {"operator_first_cr_s": round(op_first, 3)}

    def floor_one(self, doc: dict[str, Any]) -> None:
        """What the floor does per pipeline: parse, compile, render, server-side apply every child."""
        owner = {
            "apiVersion": API,
            "kind": KIND,
            "name": doc["metadata"]["name"],
            "uid": str(uuid.uuid4()),
            "controller": True,
            "blockOwnerDeletion": True,
        }
        for obj in render(doc).all():
            self.kube.apply(owned(obj, owner))

    def cr_floor_one(self, doc: dict[str, Any]) -> None:
        """The least any operator must cause, without one: the user's CR apply, the children (owned by
        the CR), one status write of the same shape as the operator's."""
        cr = self.kube.apply(doc)
        tp = parse_pipeline(copy.deepcopy(cr))
        settings = Settings()
        artifacts = compile_pipeline(tp, router=choose_router(tp, settings.router))
        generation = cr["metadata"]["generation"]
        children = render_children(tp, artifacts, settings)
        for obj in children.all():
            self.kube.apply(owned(obj, owner_reference(cr)))
        desired = int(children.deployment["spec"].get("replicas", 1))
        status = {
            "observedGeneration": generation,
            "endpoint": endpoint(tp),
            "graph": artifacts.graph_summary(),
            "replicas": 0,
            "readyReplicas": 0,
            "conditions": st.merge_conditions(
                None,
                [
                    st.condition("SpecValid", True, "Valid", "the spec compiles", generation),
                    st.condition(
                        "ModelsConfigured",
                        True,
                        "RepositoryGenerated",
                        f"{len(artifacts.files)} generated files in {len(children.configmaps)} ConfigMap(s)",
                        generation,
                    ),
                    *st.ready_condition(0, 0, 0, desired, generation),
                ],
            ),
        }
        self.kube.patch_status(cr["metadata"]["namespace"], cr["metadata"]["name"], status)

    def single(self) -> dict[str, Any]:
        assert self.operator is not None
        rec = self.recs["operator"]
        self.operator.phase = "single"
        self.mark("single")
        to_children, to_status, apply_s = [], [], []
        cpu0, req0 = self.cpu(), api_snapshot(self.cp)
        for i in range(self.args.single):
            name = f"single-{i:03d}"
            doc = cluster_doc(name, OP_NS)
            keys = child_keys(doc)
            time.sleep(self.args.single_gap)
            t0 = now()
            self.kube.apply(doc)
            apply_s.append(now() - t0)
            done = rec.wait(
                lambda: name in rec.status and rec.children_time(keys) is not None,  # noqa: B023
                self.args.timeout,
            )
            if not done:
                self.problems.append(f"single: {name} not reconciled within {self.args.timeout} s")
                continue
            children = rec.children_time(keys)
            assert children is not None
            to_children.append(children - t0)
            to_status.append(rec.status[name] - t0)
        self.settle()
        cpu1, req1 = self.cpu(), api_snapshot(self.cp)
        n = max(len(to_children), 1)
        out = {
            "runs": self.args.single,
            "completed": len(to_children),
            "to_children_s": summary(to_children),
            "to_status_s": summary(to_status),
            "client_apply_s": summary(apply_s),
            "raw_to_children_s": [round(x, 4) for x in to_children],
            "raw_to_status_s": [round(x, 4) for x in to_status],
            "cpu_s_per_cr": {k: round((cpu1[k] - cpu0[k]) / n, 4) for k in cpu1},
            "api_requests_per_cr": per_cr(req0, req1, n, own={("APPLY", "tritonpipelines"): n}),
        }
        self.delete_all(OP_NS, with_crs=True)
        self.settle()
        return out

    def burst(self, mode: str, rnd: int) -> dict[str, Any]:
        """N pipelines at once from a thread pool: through the operator, or a floor path."""
        assert self.operator is not None
        n, threads = self.args.crs, self.args.threads
        ns, rec = NAMESPACES[mode], self.recs[mode]
        docs = [cluster_doc(f"r{rnd}-tp-{i:03d}", ns) for i in range(n)]
        keys = {d["metadata"]["name"]: child_keys(d) for d in docs}
        self.operator.phase = f"{mode}-{rnd}"
        self.mark(f"burst {mode} round {rnd}")
        tasks: dict[str, Callable[[dict[str, Any]], object]] = {
            "operator": self.kube.apply,
            "floor": self.floor_one,
            "cr_floor": self.cr_floor_one,
        }
        task = tasks[mode]
        cpu0, req0 = self.cpu(), api_snapshot(self.cp)
        apply_errors: list[str] = []

        def run(doc: dict[str, Any]) -> None:
            try:
                task(doc)
            except Exception as exc:
                apply_errors.append(f"{doc['metadata']['name']}: {exc!r}"[:300])

        t0 = now()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(run, docs))
        submitted = now() - t0

        def complete() -> bool:
            if any(rec.children_time(k) is None for k in keys.values()):
                return False
            return mode == "floor" or all(name in rec.status for name in keys)

        done = rec.wait(complete, self.args.timeout)
        wall = now() - t0
        with rec.cond:
            child_times = [rec.children_time(k) for k in keys.values()]
            status_times = [rec.status.get(name) for name in keys]
            created = [rec.created.get(name) for name in keys]
        reached_children = [t - t0 for t in child_times if t is not None]
        reached_status = [t - t0 for t in status_times if t is not None]
        # operator: from the CR's ADDED event to its children / its status, per CR
        lag_children = [c - a for a, c in zip(created, child_times, strict=True) if a and c]
        lag_status = [s - a for a, s in zip(created, status_times, strict=True) if a and s]
        cpu1 = self.cpu()
        settle_s = self.settle()
        cpu2, req2 = self.cpu(), api_snapshot(self.cp)
        own = {("APPLY", "tritonpipelines"): n} if mode != "floor" else {}
        result: dict[str, Any] = {
            "mode": mode,
            "round": rnd,
            "crs": n,
            "threads": threads,
            "complete": done and not apply_errors,
            "children_done": len(reached_children),
            "status_done": len(reached_status),
            "submit_s": round(submitted, 3),
            "children_s": round(max(reached_children), 3) if reached_children else None,
            "status_s": round(max(reached_status), 3) if mode != "floor" and reached_status else None,
            # operator, cr_floor: every CR has children AND status; floor: every pipeline has its children
            "total_s": round(wall, 3) if done else None,
            "children_s_from_start": summary(reached_children),
            "status_s_from_start": summary(reached_status),
            "cr_created_to_children_s": summary(lag_children),
            "cr_created_to_status_s": summary(lag_status),
            "cpu_s_during": {k: round(cpu1[k] - cpu0[k], 3) for k in cpu1},
            "cpu_s_per_cr_incl_trailing": {k: round((cpu2[k] - cpu0[k]) / n, 4) for k in cpu2},
            "trailing_settle_s": round(settle_s, 2),
            "api_requests_per_cr": per_cr(req0, req2, n, own=own),
            "apply_errors": apply_errors[:5],
        }
        if not done or apply_errors:
            self.problems.append(
                f"{mode} round {rnd}: {len(reached_children)}/{n} with children, "
                f"{len(reached_status)}/{n} with status, {len(apply_errors)} apply errors"
            )
        self.delete_all(ns, with_crs=mode != "floor")
        self.settle()
        return result
