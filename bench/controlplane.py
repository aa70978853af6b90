#!/usr/bin/env python3
"""Control-plane benchmark: the operator against a real kube-apiserver + etcd, next to a floor.

Everything runs on this machine, in one run, against ONE control plane that this script starts
(harness/controlplane.py: upstream etcd + kube-apiserver on loopback; no kubelet, so no pod ever runs):

    single      one CR at a time (examples/fanout.yaml, modelRepository pvc://models/triton, a fresh
                name per run): time from the client's apply to "all children exist" (ConfigMap(s),
                Deployment, Service) and to "status written" (status.observedGeneration ==
                metadata.generation with a SpecValid condition). p50/p99 over the runs.
    operator    N CRs applied as fast as possible from a thread pool; time until every CR has all its
                children AND its status written. The operator is a real subprocess
                (`tritonpipeline run -n NS`), exactly as deployed, only pointed at this apiserver.
    floor       the same N pipelines without the operator: this script parses, compiles and renders
                each one (render_children(tp, compile_pipeline(tp), Settings(), owner)) and
                server-side applies the children itself (Kube.apply), from a thread pool of the same
                size, into another namespace. No CR, no status: the least work that produces the
                same objects.

Completion is observed the same way for both paths: watches on the namespaces (metadata-only for
the children), timestamps taken when the event arrives here. Throughput rounds alternate the order
(floor first, then operator first, ...) and the report gives medians. Between rounds both namespaces
are emptied and the script waits until the operator is idle again.

Also recorded: the operator's peak RSS (VmHWM at the end, VmRSS sampled every 100 ms), CPU seconds of
the operator, kube-apiserver, etcd and this script per phase, and the API requests per CR taken from
the apiserver's own `apiserver_request_total` counters (per verb and resource, this script's own
requests subtracted).

This is a benchmark, not a test: the targets print PASS/FAIL, and the exit status is non-zero only
when something did not complete (1) or the control plane could not start (2).

    .venv/bin/python -m bench.controlplane           # full run, writes bench/results/controlplane.json
    .venv/bin/python -m bench.controlplane --quick   # smoke run, writes results/controlplane-quick.json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from harness.controlplane import (
    ControlPlane,
    ControlPlaneError,
    ControlPlaneUnavailable,
    ensure_binaries,
)
from harness.operator_process import LocalOperator
from harness.paths import ROOT
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.kube import status as st
from tritonpipeline.kube.client import Kube, path
from tritonpipeline.kube.crd import crd
from tritonpipeline.kube.manifests import endpoint, owner_reference, render_children
from tritonpipeline.settings import GROUP, KIND, VERSION, Settings
from tritonpipeline.spec import parse_pipeline

EXAMPLE = ROOT / "examples" / "fanout.yaml"
RESULTS = Path(__file__).resolve().parent / "results"
CLI = Path(sys.executable).parent / "tritonpipeline"
API = f"{GROUP}/{VERSION}"
# one namespace per path; the operator watches only its own
NAMESPACES = {"operator": "bench-operator", "floor": "bench-floor", "cr_floor": "bench-cr-floor"}
OP_NS = NAMESPACES["operator"]
MODES = ("floor", "cr_floor", "operator")
PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
PARTIAL_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
CHILD_KINDS = (("v1", "ConfigMap"), ("apps/v1", "Deployment"), ("v1", "Service"))
FIELD_MANAGER = "tritonpipeline-bench"

TARGET_RATIO = 1.5  # operator time for N CRs (children + status) / floor time (children)
TARGET_P50_S = 0.5  # single CR p50, apply -> all children exist
TARGET_RSS_MB = 150.0  # operator VmHWM, MB = 10^6 bytes


# ---------------------------------------------------------------------------------------------------
# small helpers


def now() -> float:
    return time.perf_counter()


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def api_client(kubeconfig: Path, pool: int) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = pool
    return k8s.ApiClient(configuration)


def cluster_doc(name: str, namespace: str) -> dict[str, Any]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"
    return doc


def child_keys(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """(kind, name) of every child the operator renders for this CR."""
    tp = parse_pipeline(copy.deepcopy(doc))
    owner = {"apiVersion": API, "kind": KIND, "name": doc["metadata"]["name"], "uid": "x"}
    children = render_children(tp, compile_pipeline(tp), Settings(), owner)
    return {(o["kind"], o["metadata"]["name"]) for o in children.all()}


def proc_stat(pid: int) -> dict[str, float]:
    """CPU seconds (user+system, all threads) and current/peak RSS in MB of a live process."""
    out = {"cpu_s": float("nan"), "rss_mb": float("nan"), "hwm_mb": float("nan")}
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_mb"] = int(line.split()[1]) * 1024 / 1e6
            elif line.startswith("VmHWM:"):
                out["hwm_mb"] = int(line.split()[1]) * 1024 / 1e6
    except (OSError, IndexError, ValueError):
        pass
    return out


def self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# ---------------------------------------------------------------------------------------------------
# watches: when did each object appear, when was each status written


class Recorder:
    """Raw watches (one thread per resource) on one namespace. Records the arrival time of the first
    event for every child (kind, name) and the first time each CR's status is written."""

    def __init__(self, kubeconfig: Path, namespace: str, with_crs: bool) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.cond = threading.Condition()
        self.seen: dict[tuple[str, str], float] = {}
        self.status: dict[str, float] = {}
        self.created: dict[str, float] = {}
        self.errors: list[str] = []
        self.events = 0
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self._responses: list[Any] = []
        kinds = list(CHILD_KINDS) + ([(API, KIND)] if with_crs else [])
        for api_version, kind in kinds:
            t = threading.Thread(target=self._run, args=(api_version, kind), daemon=True)
            self.threads.append(t)
        self.ready = threading.Barrier(len(self.threads) + 1)

    def start(self) -> Recorder:
        for t in self.threads:
            t.start()
        self.ready.wait(30)
        return self

    def stop(self) -> None:
        self.stopping.set()
        for resp in list(self._responses):
            with contextlib.suppress(Exception):
                resp.response.shutdown()

    def _handle(self, kind: str, etype: str, obj: dict[str, Any], t: float) -> None:
        if etype == "DELETED":
            return
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        with self.cond:
            self.events += 1
            if kind == KIND:
                self.created.setdefault(name, t)
                st = obj.get("status") or {}
                conds = st.get("conditions") or []
                if (
                    name not in self.status
                    and st.get("observedGeneration") == meta.get("generation")
                    and any(c.get("type") == "SpecValid" for c in conds)
                ):
                    self.status[name] = t
                    self.cond.notify_all()
            elif (kind, name) not in self.seen:
                self.seen[(kind, name)] = t
                self.cond.notify_all()

    def _run(self, api_version: str, kind: str) -> None:
        api = api_client(self.kubeconfig, 2)
        url = path(api_version, kind, self.namespace)
        accept = "application/json" if kind == KIND else PARTIAL_METADATA
        rv: str | None = None
        first = True
        while not self.stopping.is_set():
            try:
                if rv is None:
                    list_accept = PARTIAL_METADATA_LIST if accept == PARTIAL_METADATA else accept
                    params = api.param_serialize(
                        method="GET", resource_path=url, header_params={"Accept": list_accept}
                    )
                    resp = api.call_api(*params, _request_timeout=30)
                    body = resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"list {kind}: HTTP {resp.status}: {body[:200]!r}")
                    listing = json.loads(body)
                    rv = listing["metadata"]["resourceVersion"]
                    t = now()
                    for item in listing.get("items") or []:
                        self._handle(kind, "ADDED", item, t)
                query = [
                    ("watch", "true"),
                    ("resourceVersion", rv),
                    ("allowWatchBookmarks", "true"),
                    ("timeoutSeconds", "300"),
                ]
                params = api.param_serialize(
                    method="GET", resource_path=url, query_params=query, header_params={"Accept": accept}
                )
                resp = api.call_api(*params, _request_timeout=None)
                if resp.status != 200:
                    raise RuntimeError(f"watch {kind}: HTTP {resp.status}: {resp.read()[:200]!r}")
                self._responses.append(resp)
                if first:
                    first = False
                    self.ready.wait(30)
                try:
                    rv = self._consume(kind, resp, rv)
                finally:
                    self._responses.remove(resp)
            except Exception as exc:  # a broken watch is re-opened from the last resourceVersion
                if self.stopping.is_set():
                    return
                if len(self.errors) < 50:
                    self.errors.append(f"{kind}: {exc!r}"[:300])
                time.sleep(0.2)

    def _consume(self, kind: str, resp: Any, rv: str | None) -> str | None:
        """Read one watch stream to its end; returns the last resourceVersion (None: re-list)."""
        buffer = bytearray()
        for segment in resp.response.stream(amt=None, decode_content=False):
            t = now()
            buffer.extend(segment)
            while (nl := buffer.find(b"\n")) != -1:
                line, buffer = bytes(buffer[:nl]), buffer[nl + 1 :]
                if not line.strip():
                    continue
                event = json.loads(line)
                etype, obj = event.get("type"), event.get("object") or {}
                if etype == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise RuntimeError(f"watch {kind}: {obj.get('message')}")
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if etype != "BOOKMARK":
                    self._handle(kind, etype, obj, t)
        return rv

    # -- queries (call with or without the lock; they take it) ----------------------------------------

    def children_time(self, keys: set[tuple[str, str]]) -> float | None:
        times = [self.seen.get(k) for k in keys]
        return None if any(t is None for t in times) else max(t for t in times if t is not None)

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.5))
            return True


# ---------------------------------------------------------------------------------------------------
# the operator subprocess


class Operator(LocalOperator):
    """`tritonpipeline run -n NS` as a subprocess; samples its VmRSS, open sockets (connections to the
    apiserver) and threads every 100 ms, per phase."""

    def __init__(self, kubeconfig: Path, namespace: str, log: Path, env: dict[str, str]) -> None:
        super().__init__(kubeconfig, namespace, log, env=env)
        self.rss_max_mb = 0.0
        self.rss_samples = 0
        self._phase_max: dict[str, dict[str, float]] = {}
        self.phase = "startup"
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> Operator:
        super().start()
        self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set() and self.proc is not None and self.proc.poll() is None:
            rss = proc_stat(self.pid)["rss_mb"]
            if rss == rss:  # not NaN
                self.rss_samples += 1
                self.rss_max_mb = max(self.rss_max_mb, rss)
                sample = {"rss_mb": rss, **self._fds_threads()}
                peak = self._phase_max.setdefault(self.phase, {})
                for key, value in sample.items():
                    peak[key] = max(peak.get(key, 0.0), value)
            self._stop.wait(0.1)

    def _fds_threads(self) -> dict[str, float]:
        out: dict[str, float] = {}
        with contextlib.suppress(OSError):
            fds = os.listdir(f"/proc/{self.pid}/fd")
            out["sockets"] = sum(
                1 for fd in fds if os.readlink(f"/proc/{self.pid}/fd/{fd}").startswith("socket:")
            )
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("Threads:"):
                    out["threads"] = int(line.split()[1])
        return out

    def phase_peaks(self) -> dict[str, dict[str, float]]:
        """Per phase: max VmRSS (MB), max open sockets, max threads."""
        return {phase: {k: round(v, 1) for k, v in peak.items()} for phase, peak in self._phase_max.items()}

    def stop(self) -> int | None:
        self._stop.set()
        return super().stop()


# ---------------------------------------------------------------------------------------------------
# the benchmark


class Bench:
    def __init__(self, cp: ControlPlane, args: argparse.Namespace, workdir: Path) -> None:
        self.cp = cp
        self.args = args
        self.workdir = workdir
        self.kube = Kube(api_client(cp.kubeconfig, 64), FIELD_MANAGER)
        self.operator: Operator | None = None
        self.recs: dict[str, Recorder] = {}
        self.problems: list[str] = []

    # -- cluster state ---------------------------------------------------------------------------------

    def install(self) -> None:
        self.kube.apply(crd())
        name = crd()["metadata"]["name"]

        def established() -> bool:
            obj = self.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name) or {}
            conds = (obj.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

        deadline = time.monotonic() + 30
        while not established():
            if time.monotonic() > deadline:
                raise RuntimeError("the CRD did not become established in 30 s")
            time.sleep(0.05)
        for ns in NAMESPACES.values():
            self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    def keys(self, doc: dict[str, Any]) -> set[tuple[str, str]]:
        return child_keys(doc)

    def api_snapshot(self) -> ApiSnapshot:
        """From the apiserver's /metrics: apiserver_request_total per (verb, resource[/subresource],
        code class) and apiserver_request_duration_seconds_sum per (verb, resource[/subresource])."""
        status, body = self.cp.get("/metrics", timeout=30)
        counts: Counter[tuple[str, str, str]] = Counter()
        seconds: Counter[tuple[str, str]] = Counter()
        if status != 200:
            return counts, seconds
        for line in body.splitlines():
            is_count = line.startswith("apiserver_request_total{")
            if not (is_count or line.startswith("apiserver_request_duration_seconds_sum{")):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
            if not labels.get("resource"):
                continue  # /metrics, /readyz, discovery
            res = labels["resource"] + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            value = float(line.rsplit(" ", 1)[1])
            if is_count:
                code = labels.get("code", "")
                counts[(labels.get("verb", ""), res, code[:1] + "xx" if code else "")] += int(value)
            else:
                seconds[(labels.get("verb", ""), res)] += value
        return counts, seconds

    def cpu(self) -> dict[str, float]:
        out = {"bench": self_cpu()}
        assert self.operator is not None
        out["operator"] = proc_stat(self.operator.pid)["cpu_s"]
        for name, pid in self.cp.pids().items():
            out[name] = proc_stat(pid)["cpu_s"]
        return out

    def settle(self, quiet_s: float = 1.0, timeout: float = 30.0) -> float:
        """Wait until the operator used < 2% CPU over `quiet_s`; returns the seconds waited."""
        assert self.operator is not None
        t0 = time.monotonic()
        last = proc_stat(self.operator.pid)["cpu_s"]
        while time.monotonic() - t0 < timeout:
            time.sleep(quiet_s)
            cur = proc_stat(self.operator.pid)["cpu_s"]
            if cur - last < 0.02 * quiet_s:
                break
            last = cur
        return time.monotonic() - t0

    def delete_all(self, namespace: str, with_crs: bool) -> None:
        kinds = [(API, KIND)] if with_crs else []
        kinds += [*CHILD_KINDS, ("v1", "Event")]
        for api_version, kind in kinds:
            self.kube._call("DELETE", path(api_version, kind, namespace))

    # -- phases ------------------------------------------------------------------------------------------

    def start_operator(self) -> None:
        env = {"TRITONPIPELINE_RESYNC_SECONDS": str(self.args.resync_seconds)}
        self.operator = Operator(self.cp.kubeconfig, OP_NS, self.workdir / "operator.log", env).start()
        for mode, ns in NAMESPACES.items():
            self.recs[mode] = Recorder(self.cp.kubeconfig, ns, with_crs=mode != "floor").start()

    def warm_up(self) -> dict[str, float]:
        """One CR through the operator (also: the operator is up and watching), one through each floor."""
        assert self.operator is not None
        rec = self.recs["operator"]
        t0 = now()
        doc = cluster_doc("warmup-0", OP_NS)
        keys = self.keys(doc)
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
            self.recs[mode].wait(lambda m=mode: self.recs[m].children_time(keys) is not None, 30)
        self.operator.phase = "warmup"
        self.settle()
        return {"operator_first_cr_s": round(op_first, 3)}

    def floor_one(self, doc: dict[str, Any]) -> None:
        """What the floor does per pipeline: parse, compile, render, server-side apply every child."""
        tp = parse_pipeline(doc)
        owner = {
            "apiVersion": API,
            "kind": KIND,
            "name": doc["metadata"]["name"],
            "uid": str(uuid.uuid4()),
            "controller": True,
            "blockOwnerDeletion": True,
        }
        for obj in render_children(tp, compile_pipeline(tp), Settings(), owner).all():
            self.kube.apply(obj)

    def cr_floor_one(self, doc: dict[str, Any]) -> None:
        """The least any operator must cause, without one: the user's CR apply, the children (owned by
        the CR), one status write of the same shape as the operator's."""
        cr = self.kube.apply(doc)
        tp = parse_pipeline(copy.deepcopy(cr))
        artifacts = compile_pipeline(tp)
        generation = cr["metadata"]["generation"]
        children = render_children(tp, artifacts, Settings(), owner_reference(cr))
        for obj in children.all():
            self.kube.apply(obj)
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
        to_children, to_status, apply_s = [], [], []
        cpu0, req0 = self.cpu(), self.api_snapshot()
        for i in range(self.args.single):
            name = f"single-{i:03d}"
            doc = cluster_doc(name, OP_NS)
            keys = self.keys(doc)
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
        cpu1, req1 = self.cpu(), self.api_snapshot()
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
        keys = {d["metadata"]["name"]: self.keys(d) for d in docs}
        self.operator.phase = f"{mode}-{rnd}"
        task = {"operator": self.kube.apply, "floor": self.floor_one, "cr_floor": self.cr_floor_one}[mode]
        cpu0, req0 = self.cpu(), self.api_snapshot()
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
        cpu2, req2 = self.cpu(), self.api_snapshot()
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


ApiSnapshot = tuple[Counter[tuple[str, str, str]], Counter[tuple[str, str]]]


def summary(xs: list[float]) -> dict[str, float | int | None]:
    if not xs:
        return {"n": 0, "p50": None, "p99": None, "min": None, "max": None, "mean": None}
    return {
        "n": len(xs),
        "p50": round(percentile(xs, 50), 4),
        "p99": round(percentile(xs, 99), 4),
        "min": round(min(xs), 4),
        "max": round(max(xs), 4),
        "mean": round(statistics.fmean(xs), 4),
    }


def per_cr(
    before: ApiSnapshot, after: ApiSnapshot, n: int, own: dict[tuple[str, str], int]
) -> dict[str, Any]:
    """Requests per CR by 'VERB resource' (this script's own requests subtracted), the non-2xx ones,
    and the apiserver's request latency per CR by call (everything, this script's requests included)."""
    delta = after[0] - before[0]
    busy = after[1] - before[1]
    by_call: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for (verb, res, code), count in delta.items():
        if verb in ("WATCH", "CONNECT"):
            continue
        by_call[f"{verb} {res}"] += count
        if code and code != "2xx":
            errors[f"{verb} {res} {code}"] += count
    for (verb, res), count in own.items():
        by_call[f"{verb} {res}"] -= count
    total = sum(v for v in by_call.values() if v > 0)
    latency = {f"{verb} {res}": ms for (verb, res), ms in busy.items() if verb not in ("WATCH", "CONNECT")}
    return {
        "total": round(total / n, 2),
        "by_call": {k: round(v / n, 2) for k, v in sorted(by_call.items(), key=lambda kv: -kv[1]) if v > 0},
        "non_2xx": dict(errors),
        "apiserver_request_ms_per_cr": {
            k: round(v * 1000 / n, 2) for k, v in sorted(latency.items(), key=lambda kv: -kv[1]) if v > 0
        },
        "apiserver_request_ms_per_cr_total": round(sum(latency.values()) * 1000 / n, 1),
    }


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


# ---------------------------------------------------------------------------------------------------
# report


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


def median_of(rounds: list[dict[str, Any]], key: str) -> float | None:
    xs = [r[key] for r in rounds if r.get(key) is not None]
    return round(statistics.median(xs), 3) if xs else None


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


# ---------------------------------------------------------------------------------------------------
# main


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    load_start = loadavg()
    try:
        binaries = ensure_binaries()
    except (ControlPlaneUnavailable, ControlPlaneError) as err:
        print(f"no control plane: {err}", file=sys.stderr)
        return 2
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tp-bench-controlplane-"))
    workdir.mkdir(parents=True, exist_ok=True)
    cp = ControlPlane(workdir / "cluster", binaries)
    try:
        cp.start()
    except ControlPlaneError as err:
        print(f"the control plane did not start: {err}", file=sys.stderr)
        return 2
    print(f"control plane up in {cp.startup_seconds:.1f} s at {cp.url} (workdir {workdir})", flush=True)
    bench = Bench(cp, args, workdir)
    try:
        bench.install()
        bench.start_operator()
        warm = bench.warm_up()
        assert bench.operator is not None
        rss_after_warmup = proc_stat(bench.operator.pid)["rss_mb"]
        print(f"operator up; first CR reconciled {warm['operator_first_cr_s']:.2f} s after apply", flush=True)
        single = bench.single()
        s = single["to_children_s"]
        print(f"single: p50 {fmt(s['p50'], ' s')} p99 {fmt(s['p99'], ' s')} to children", flush=True)
        rounds = []
        for rnd in range(1, args.rounds + 1):
            order = MODES if rnd % 2 else MODES[::-1]
            for mode in order:
                res = bench.burst(mode, rnd)
                rounds.append(res)
                print(
                    f"round {rnd} {mode:<8}: children {fmt(res['children_s'], ' s')}, "
                    f"status {fmt(res['status_s'], ' s')}, total {fmt(res['total_s'], ' s')} "
                    f"({res['children_done']}/{res['crs']}; submit {res['submit_s']:.2f} s; "
                    f"trailing work {res['trailing_settle_s']:.1f} s)",
                    flush=True,
                )
        hwm = proc_stat(bench.operator.pid)
        log_stats = operator_log_stats(bench.operator.text())
        rec_errors = [e for rec in bench.recs.values() for e in rec.errors]
        machine = machine_info(cp)
    finally:
        for rec in bench.recs.values():
            rec.stop()
        rc_op = bench.operator.stop() if bench.operator else None
        cp.stop()
    operator = bench.operator
    assert operator is not None

    by_mode = {mode: [x for x in rounds if x["mode"] == mode] for mode in MODES}
    oper = by_mode["operator"]

    def ratios(num: str, den: str) -> dict[str, Any]:
        per_round = [
            round(a["total_s"] / b["total_s"], 3) if a["total_s"] and b["total_s"] else None
            for a, b in zip(by_mode[num], by_mode[den], strict=True)
        ]
        valid = [x for x in per_round if x is not None]
        ok = valid and len(valid) == len(per_round)
        return {"per_round": per_round, "median": round(statistics.median(valid), 3) if ok else None}

    totals = {mode: median_of(by_mode[mode], "total_s") for mode in MODES}
    ratio = ratios("operator", "floor")["median"]

    def median_cpu(rs: list[dict[str, Any]]) -> dict[str, float]:
        keys = rs[0]["cpu_s_per_cr_incl_trailing"].keys() if rs else []
        return {
            k: round(statistics.median(r["cpu_s_per_cr_incl_trailing"][k] for r in rs) * 1000, 1)
            for k in keys
        }

    def last_api(rs: list[dict[str, Any]]) -> dict[str, Any]:
        return rs[-1]["api_requests_per_cr"] if rs else {}

    results = {
        "warmup": warm,
        "single": single,
        "rounds": rounds,
        "total_s_median": totals,
        "operator_children_s_median": median_of(oper, "children_s"),
        "ratios": {
            "operator_vs_floor": ratios("operator", "floor"),
            "cr_floor_vs_floor": ratios("cr_floor", "floor"),
            "operator_vs_cr_floor": ratios("operator", "cr_floor"),
        },
        "throughput_crs_per_s": {mode: round(args.crs / t, 2) if t else None for mode, t in totals.items()},
        "api_requests_per_cr": {mode: last_api(by_mode[mode]) for mode in MODES},
        "cpu_ms_per_cr": {mode: median_cpu(by_mode[mode]) for mode in MODES},
        "operator_rss": {
            "vmhwm_mb": round(hwm["hwm_mb"], 1),
            "sampled_max_mb": round(operator.rss_max_mb, 1),
            "samples": operator.rss_samples,
            "after_warmup_mb": round(rss_after_warmup, 1),
            "end_mb": round(hwm["rss_mb"], 1),
            "per_phase_max": operator.phase_peaks(),
        },
        "operator_log": log_stats,
        "operator_exit_code": rc_op,
        "watch_errors": rec_errors[:10],
    }
    p50 = single["to_children_s"]["p50"]
    targets = [
        {
            "name": "operator_within_1.5x_of_floor",
            "description": f"time for {args.crs} CRs to have children and status / floor time for the "
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
            "value": round(hwm["hwm_mb"], 1),
            "pass": hwm["hwm_mb"] <= TARGET_RSS_MB,
        },
    ]
    out = (
        Path(args.out)
        if args.out
        else RESULTS / ("controlplane-quick.json" if args.quick else "controlplane.json")
    )
    report = {
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "runtime_s": round(time.monotonic() - t_start, 1),
        "load_average_start": load_start,
        "load_average_end": loadavg(),
        "control_plane_startup_s": round(cp.startup_seconds or 0, 2),
        "machine": machine,
        "config": {
            "example": str(EXAMPLE.relative_to(ROOT)),
            "model_repository_uri": "pvc://models/triton",
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
        },
        "results": results,
        "targets": targets,
        "problems": bench.problems,
        "out": str(out),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(out)
    print_report(report)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"kept {workdir} (operator.log, cluster/)")
    return 1 if bench.problems else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: 5 single CRs, 40-CR bursts, 1 round")
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
    p.add_argument("--out", help="results file (default bench/results/controlplane[-quick].json)")
    p.add_argument(
        "--workdir", help="where the control plane and the operator log live (default: a temp dir)"
    )
    p.add_argument("--keep", action="store_true", help="keep the workdir")
    args = p.parse_args(argv)
    if args.quick:
        args.single, args.crs, args.rounds = 5, 40, 1
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
