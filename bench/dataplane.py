#!/usr/bin/env python3
"""Data-plane benchmark: ways to run the fan-out of examples/fanout.yaml, and a two-branch pipeline, on one
real tritonserver.

    router    compiled ensemble, fanOut: router (one router model copies FEATS_A to both heads)
    native    the same ensemble with the native router (a C backend, tritonpipeline.local.native_router)
    shared    compiled ensemble, fanOut: shared (both heads read FEATS_A directly)
    bls       a Python BLS model: extractor, then head_b and head_c concurrently (async_exec)
    per_step  the client composes: extractor, then head_b and head_c concurrently, one round trip each

Four workloads run side by side in the same rounds:

    toy       the example's models (model_repository/extractor, head_b, head_c): almost no compute,
              each step is nearly all Python-backend overhead. All four variants; the targets.
    compute   the same pipeline on bench/models/{extractor,head_b,head_c}_compute: identical outputs,
              plus COMPUTE_REPS float32 [1,COMPUTE_DIM] x [COMPUTE_DIM,COMPUTE_DIM] products per request
              (about 1 ms per step here). router, shared and per_step; informational only.
    cond      a two-branch pipeline (examples/conditional.yaml's `switched`: classifier, then head_b for
              LABEL 1, extractor otherwise), half the requests each way: the compiled pipeline
              (`conditional`, the generated Python orchestrator; `native`, the native switch in the
              pipeline's ensemble; `speculative`, the same with both branches run beside the
              classifier, `speculative: true`) against plain ensembles of the branch taken
              (`branch_ensemble`, the goal: within 1.10x; `branch_serial`, the same with the branch
              step waiting for the classifier), client hops (`per_step`) and a hand-written BLS model
              (`bls`, bench/models/bls_branch).
    cond_compute  the same, its branches on the compute models (a light classifier in front of ~1 ms
              branches); requests per run as compute's.

Everything is served by ONE tritonserver process (CPU, Python backend) and driven by the asyncio gRPC
client (tritonclient.grpc.aio) with batch-size-1 FP32 [1,4] requests at concurrency 1 and 16. Every
response is checked numerically. Rounds run every (workload, variant) once in rotating order; the
report gives the median over rounds. This is a benchmark, not a test: perf targets (toy workload) are
reported as PASS/FAIL and the exit status is non-zero only when responses were wrong or failed.

    .venv/bin/python -m bench.dataplane            # full run, writes bench/results/dataplane.json
    .venv/bin/python -m bench.dataplane --quick    # smoke run, writes bench/results/dataplane-quick.json
    .venv/bin/python -m bench.dataplane --workloads cond --rounds 3 --out /tmp/cond.json   # one workload
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpcclient
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from harness import triton_stats
from harness.load import LoadResult, WrongAnswer, closed_loop, format_table
from tritonpipeline.compiler import Artifacts, compile_pipeline
from tritonpipeline.local import native_router
from tritonpipeline.local.repository import local_model_root, write_repository
from tritonpipeline.local.tritonserver import LocalTriton, TritonError
from tritonpipeline.spec import TritonPipeline, parse_pipeline

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fanout.yaml"
EXAMPLE_MODELS = ROOT / "model_repository"
BENCH_MODELS = Path(__file__).resolve().parent / "models"
BLS_MODEL = BENCH_MODELS / "bls_fanout"
RESULTS = Path(__file__).resolve().parent / "results"

ROUTER_PIPELINE = "vision"
NATIVE_PIPELINE = "vision_native"
SHARED_PIPELINE = "vision_shared"
BLS_NAME = "bls_fanout"
VARIANTS = ("router", "native", "shared", "bls", "per_step")
CONCURRENCIES = (1, 16)

# The compute workload: the same fan-out on bench-only models that also do real numpy work.
COMPUTE_PIPELINES = {"router": "vision_compute", "shared": "vision_compute_shared"}
COMPUTE_MODELS = {m: f"{m}_compute" for m in ("extractor", "head_b", "head_c")}
COMPUTE_VARIANTS = ("router", "shared", "per_step")
COMPUTE_DIM = 512  # float32 [DIM, DIM] matrix: 1 MiB, stays in cache
COMPUTE_REPS = 64  # products per request and step: ~1 ms per step on the 2-core reference host
BLAS_THREADS = "1"  # OPENBLAS_NUM_THREADS for tritonserver (its Python stubs), unless already set
# The two-branch workloads (issue 57): examples/conditional.yaml's `switched` pipeline, its models
# linked under names of their own (their configs differ from the fan-out example's).
COND_EXAMPLE = ROOT / "examples" / "conditional.yaml"
COND_SOURCE = "switched"
COND_ROLES = ("classifier", "extractor", "head_b")  # the example models the pipeline runs
# by label: the branch's step, its model's role, input and output (any label but 1 takes small)
COND_BRANCH_STEPS = {
    0: ("small", "extractor", "INPUT_A", "FEATS_A"),
    1: ("large", "head_b", "FEATS_IN_B", "OUTPUT_B"),
}
COND_BLS_CODE = BENCH_MODELS / "bls_branch" / "1" / "model.py"  # every workload's BLS model: its parameters
COND_AFTER = "AFTER"  # an optional input the branch models declare here and never read (branch_serial)
COND_VARIANTS = (
    "conditional",
    "native",
    "speculative",
    "branch_ensemble",
    "branch_serial",
    "per_step",
    "bls",
)
COND_SERVED = ("conditional", "native", "speculative")  # the compiled pipeline's, each held to COND_GOAL
COND_SPECULATIVE = ("speculative",)  # the variants running both branches for every request
COND_FLOORS = ("branch_ensemble", "branch_serial")  # what they are held against
COND_GOAL = 1.10  # conditional p50 / floor p50


@dataclass(frozen=True)
class CondWorkload:
    """A two-branch workload: its key, the model directory each role (COND_ROLES) links, the roles'
    model `parameters`, and so its names: the compiled pipeline on the Python orchestrator
    (`pipeline`), on the native switch (`native`) and speculative on it (`speculative`), the plain
    ensembles of each branch by label (`branches`; `serial` the same with the branch step waiting for the
    classifier), the linked models and the hand-written BLS model."""

    key: str
    sources: dict[str, Path]
    parameters: dict[str, dict[str, int]]
    bls: str

    @property
    def pipeline(self) -> str:
        return f"{self.key}_bench"

    @property
    def native(self) -> str:
        return f"{self.key}_native"

    @property
    def speculative(self) -> str:
        return f"{self.key}_speculative"

    @property
    def branches(self) -> dict[int, str]:
        return {label: f"{self.key}_{step[0]}" for label, step in COND_BRANCH_STEPS.items()}

    @property
    def serial(self) -> dict[int, str]:
        return {label: f"{name}_serial" for label, name in self.branches.items()}

    @property
    def models(self) -> dict[str, str]:
        return {role: f"{self.key}_{role}" for role in COND_ROLES}

    def names(self) -> tuple[str, ...]:
        """Every model a variant calls."""
        return (
            self.pipeline,
            self.native,
            self.speculative,
            *self.branches.values(),
            *self.serial.values(),
            self.bls,
            *self.models.values(),
        )


COND = CondWorkload("cond", {r: EXAMPLE_MODELS / r for r in COND_ROLES}, {}, "bls_branch")
# the same pipeline, its branches on the compute workload's models (COMPUTE_REPS products a request)
COND_COMPUTE = CondWorkload(
    "cond_compute",
    {
        "classifier": EXAMPLE_MODELS / "classifier",
        "extractor": BENCH_MODELS / "extractor_compute",
        "head_b": BENCH_MODELS / "head_b_compute",
    },
    {
        role: {"COMPUTE_DIM": COMPUTE_DIM, "COMPUTE_REPS": COMPUTE_REPS, "COMPUTE_SEED": seed}
        for seed, role in enumerate(("extractor", "head_b"))
    },
    "bls_branch_compute",
)
CONDS = {c.key: c for c in (COND, COND_COMPUTE)}
CASES = (
    tuple(("toy", v) for v in VARIANTS)
    + tuple(("compute", v) for v in COMPUTE_VARIANTS)
    + tuple((c, v) for c in CONDS for v in COND_VARIANTS)
)
# each workload's ratio base
BASE = {"toy": "shared", "compute": "shared", **dict.fromkeys(CONDS, "branch_ensemble")}
WORKLOADS = tuple(BASE)
NAMES = {
    "toy": ("SCORE_B", "SCORE_C"),
    "compute": ("SCORE_B", "SCORE_C"),
    **dict.fromkeys(CONDS, ("RESULT", "LABEL")),
}
HEAVY = ("compute", COND_COMPUTE.key)  # the workloads that run Mode.compute_requests
DROPPED_OUTPUT = "FEATURES"  # the example also returns the features; dropped so all variants do the same work
POOL = 256  # distinct inputs, cycled


@dataclass(frozen=True)
class Mode:
    warmup: int
    requests: dict[int, int]  # concurrency -> measured requests per run (toy workload)
    compute_requests: dict[int, int]  # the same for the compute workload (slower requests)
    rounds: int
    time_cap_s: float  # per measured run; a run stops early when it is reached
    client_timeout_s: float = 30.0


FULL = Mode(
    warmup=50, requests={1: 1000, 16: 3000}, compute_requests={1: 400, 16: 800}, rounds=5, time_cap_s=10.0
)
QUICK = Mode(
    warmup=20, requests={1: 100, 16: 300}, compute_requests={1: 50, 16: 100}, rounds=1, time_cap_s=3.0
)


# ---------------------------------------------------------------- repository


def variant_docs() -> tuple[dict[str, Any], dict[str, Any]]:
    """The two CRs, built from examples/fanout.yaml: `vision` (fanOut router), `vision_shared` (shared).
    The native variant is `vision` renamed NATIVE_PIPELINE (native_doc)."""
    doc = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    pipelines = doc["spec"]["pipelines"]
    if len(pipelines) != 1:
        raise SystemExit(f"{EXAMPLE}: expected one pipeline, found {len(pipelines)}")
    pipeline = pipelines[0]
    pipeline["outputs"] = [o for o in pipeline["outputs"] if o["name"] != DROPPED_OUTPUT]
    router = copy.deepcopy(doc)
    router["spec"]["pipelines"][0].update(name=ROUTER_PIPELINE, fanOut="router")
    shared = copy.deepcopy(doc)
    shared["metadata"]["name"] = f"{doc['metadata']['name']}-shared"
    shared["spec"]["pipelines"][0].update(name=SHARED_PIPELINE, fanOut="shared")
    return router, shared


def native_doc(router: dict[str, Any]) -> dict[str, Any]:
    """The router CR with its pipeline renamed NATIVE_PIPELINE (its router gets a name of its own)."""
    doc = copy.deepcopy(router)
    doc["metadata"]["name"] = f"{doc['metadata']['name']}-native"
    doc["spec"]["pipelines"][0]["name"] = NATIVE_PIPELINE
    return doc


def compute_docs(
    router: dict[str, Any], shared: dict[str, Any], model_root: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The compute workload's CRs: copies of the two toy CRs with every model renamed to its *_compute
    twin (COMPUTE_DIM / COMPUTE_REPS / COMPUTE_SEED as model `parameters`), modelRepository pointing at
    `model_root`, pipelines `vision_compute` (router) and `vision_compute_shared` (shared)."""
    docs = []
    for doc, variant in ((router, "router"), (shared, "shared")):
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = doc["metadata"]["name"].replace("vision", "vision-compute", 1)
        doc["spec"]["modelRepository"]["uri"] = str(model_root)
        for seed, model in enumerate(doc["spec"]["models"]):
            model["name"] = COMPUTE_MODELS[model["name"]]
            model["parameters"] = {
                "COMPUTE_DIM": COMPUTE_DIM,
                "COMPUTE_REPS": COMPUTE_REPS,
                "COMPUTE_SEED": seed,
            }
        pipeline = doc["spec"]["pipelines"][0]
        pipeline["name"] = COMPUTE_PIPELINES[variant]
        for step in pipeline["steps"]:
            step.setdefault("name", step["model"])  # keeps `head_b.OUTPUT_B` style references valid
            step["model"] = COMPUTE_MODELS[step["model"]]
        docs.append(doc)
    return docs[0], docs[1]


def cond_doc(cw: CondWorkload, model_root: Path) -> dict[str, Any]:
    """A two-branch workload's CR: examples/conditional.yaml's `switched` pipeline (classify, then
    `large` for LABEL 1, `small` otherwise) as cw.pipeline with LABEL as a second output, and per branch
    two unconditional ensembles (classify + that branch's step, same outputs; fanOut shared, so no
    router model): cw.branches, both steps reading IMAGE (Triton runs them side by side), and
    cw.serial, the branch step also reading classify.LABEL as COND_AFTER (which its model declares
    optional and never reads), so that it runs after the classifier, as behind a condition. Models
    renamed to cw.models with cw.parameters, modelRepository at `model_root`."""
    doc = yaml.safe_load(COND_EXAMPLE.read_text(encoding="utf-8"))
    doc["metadata"]["name"] = cw.pipeline.replace("_", "-")
    doc["spec"]["modelRepository"]["uri"] = str(model_root)
    models = [m for m in doc["spec"]["models"] if m["name"] in cw.models]
    for model in models:
        if model["name"] in cw.parameters:
            model["parameters"] = dict(cw.parameters[model["name"]])
        if model["name"] in {role for _, role, _, _ in COND_BRANCH_STEPS.values()}:
            model["inputs"].append({"name": COND_AFTER, "dataType": "INT32", "dims": [1], "optional": True})
        model["name"] = cw.models[model["name"]]
    doc["spec"]["models"] = models
    (source,) = (p for p in doc["spec"]["pipelines"] if p["name"] == COND_SOURCE)
    for step in source["steps"]:
        step["model"] = cw.models[step["model"]]
    cond = copy.deepcopy(source)
    cond["name"] = cw.pipeline
    cond["outputs"] = [
        {"name": "RESULT", "from": "large.OUTPUT_B", "orFrom": ["small.FEATS_A"]},
        {"name": "LABEL", "from": "classify.LABEL"},
    ]
    pipelines = [cond]
    for names, serial in ((cw.branches, False), (cw.serial, True)):
        for label, name in names.items():
            step, _, _, output = COND_BRANCH_STEPS[label]
            branch = {k: copy.deepcopy(v) for k, v in source.items() if k != "switch"}
            branch["name"] = name
            branch["fanOut"] = "shared"  # the plainest ensemble, no router
            branch["steps"] = [s for s in branch["steps"] if s["name"] in ("classify", step)]
            if serial:
                (taken,) = (s for s in branch["steps"] if s["name"] == step)
                taken["inputs"][COND_AFTER] = "classify.LABEL"
            branch["outputs"] = [
                {"name": "RESULT", "from": f"{step}.{output}"},
                {"name": "LABEL", "from": "classify.LABEL"},
            ]
            pipelines.append(branch)
    doc["spec"]["pipelines"] = pipelines
    return doc


def cond_native_doc(cw: CondWorkload, model_root: Path) -> dict[str, Any]:
    """cw.pipeline's CR again with that pipeline alone, renamed cw.native, its conditions on the native
    switch (spec.server.router: native)."""
    doc = cond_doc(cw, model_root)
    doc["metadata"]["name"] = cw.native.replace("_", "-")
    doc["spec"]["pipelines"] = [p for p in doc["spec"]["pipelines"] if p["name"] == cw.pipeline]
    doc["spec"]["pipelines"][0]["name"] = cw.native
    doc["spec"].setdefault("server", {})["router"] = "native"
    return doc


def cond_speculative_doc(cw: CondWorkload, model_root: Path) -> dict[str, Any]:
    """cw.native's CR again, renamed cw.speculative, `speculative: true`: both branches run beside the
    classifier and the switch keeps the one the label picks."""
    doc = cond_native_doc(cw, model_root)
    doc["metadata"]["name"] = cw.speculative.replace("_", "-")
    doc["spec"]["pipelines"][0]["name"] = cw.speculative
    doc["spec"]["pipelines"][0]["speculative"] = True
    return doc


def model_root(dest: Path) -> Path:
    """One directory holding the example models and the bench models (symlinks), and each two-branch
    workload's models again under its names (CondWorkload.models)."""
    dest.mkdir(parents=True)
    for src in (EXAMPLE_MODELS, BENCH_MODELS):
        for entry in sorted(src.iterdir()):
            if entry.is_dir() and not entry.name.startswith((".", "_")):
                if (dest / entry.name).exists():
                    raise SystemExit(f"model {entry.name!r} is in both {EXAMPLE_MODELS} and {BENCH_MODELS}")
                os.symlink(entry.resolve(), dest / entry.name)
    for cw in CONDS.values():
        for role, alias in cw.models.items():
            if (dest / alias).exists():
                raise SystemExit(f"model {alias!r} already in the model root")
            os.symlink(cw.sources[role].resolve(), dest / alias)
    return dest


def add_artifacts(art: Artifacts, dest: Path, root: Path | None) -> None:
    """Add a compiled CR to an existing repository: link its models not there yet (as write_repository
    does), write its generated files; a file another CR already rendered must be byte-identical."""
    for name in art.models:
        if (dest / name).exists() or root is None:
            continue
        (dest / name).mkdir()
        for entry in sorted((root / name).iterdir()):
            if entry.name != "config.pbtxt":
                os.symlink(entry.resolve(), dest / name / entry.name)
    for rel, data in art.files.items():
        target = dest / rel
        if target.exists():
            if target.read_bytes() != data:
                raise SystemExit(f"{rel}: two CRs render different files")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def bls_config(ensemble: Artifacts) -> mc.ModelConfig:
    """The BLS model takes and returns exactly what the router ensemble does (names, types, dims)."""
    ens = text_format.Parse(ensemble.files[f"{ROUTER_PIPELINE}/config.pbtxt"].decode(), mc.ModelConfig())
    cfg = mc.ModelConfig(name=BLS_NAME, backend="python", max_batch_size=ens.max_batch_size)
    cfg.input.extend(ens.input)
    cfg.output.extend(ens.output)
    cfg.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    return cfg


def cond_bls_config(cw: CondWorkload, art: Artifacts) -> mc.ModelConfig:
    """The two-branch BLS model takes and returns exactly what cw.pipeline's orchestrator does, and
    is scheduled as it is (its instance group and dynamic batching); its parameters name the models
    it calls (bench/models/bls_branch)."""
    cond = text_format.Parse(art.files[f"{cw.pipeline}/config.pbtxt"].decode(), mc.ModelConfig())
    cfg = mc.ModelConfig(name=cw.bls, backend="python", max_batch_size=cond.max_batch_size)
    cfg.input.extend(cond.input)
    cfg.output.extend(cond.output)
    cfg.instance_group.extend(cond.instance_group)
    if cond.HasField("dynamic_batching"):
        cfg.dynamic_batching.CopyFrom(cond.dynamic_batching)
    for role, name in cw.models.items():
        cfg.parameters[role.upper()].string_value = name
    return cfg


def cond_step_models(
    cw: CondWorkload, art: Artifacts, native: Artifacts, speculative: Artifacts
) -> dict[str, list[str]]:
    """For each two-branch variant, the models whose statistics the bench reads around each run: the
    orchestrator (or the native pipeline's ensemble) and its generated parts (head, switch, branch
    ensembles), the branch ensembles, the BLS model, and the three models every variant runs."""

    def generated(a: Artifacts, name: str) -> list[str]:
        return sorted(
            rel.split("/")[0] for rel in a.files if rel.startswith(f"{name}__") and rel.endswith(".pbtxt")
        )

    models = list(cw.models.values())
    return {
        "conditional": [cw.pipeline, *generated(art, cw.pipeline), *models],
        "native": [cw.native, *generated(native, cw.native), *models],
        "speculative": [cw.speculative, *generated(speculative, cw.speculative), *models],
        "branch_ensemble": [*cw.branches.values(), *models],
        "branch_serial": [*cw.serial.values(), *models],
        "per_step": models,
        "bls": [cw.bls, *models],
    }


def step_models(graph: dict[str, Any]) -> dict[str, list[str]]:
    """For each toy ensemble variant, its ensemble and the models of its steps (routers included), whose
    statistics the bench reads around each run."""
    out = {}
    toy_models = list(COMPUTE_MODELS)  # extractor, head_b, head_c
    for variant, summary in graph.items():
        (ensemble,) = summary["ensembles"]
        out[variant] = [ensemble["name"], *(r["name"] for r in summary["routers"]), *toy_models]
    return out


def build_repository(dest: Path, models: Path) -> dict[str, Any]:
    """One directory: the toy router ensemble + the toy shared ensemble + the BLS model, and the
    compute workload's two ensembles on the *_compute models (from the combined model root `models`)."""
    router_doc, shared_doc = variant_docs()
    compute_router_doc, compute_shared_doc = compute_docs(router_doc, shared_doc, models)
    tps: dict[str, TritonPipeline] = {
        key: parse_pipeline(doc, str(EXAMPLE))
        for key, doc in (
            ("router", router_doc),
            ("shared", shared_doc),
            ("compute_router", compute_router_doc),
            ("compute_shared", compute_shared_doc),
        )
    }
    arts = {key: compile_pipeline(tp, cpu_only=True) for key, tp in tps.items()}
    native_tp = parse_pipeline(native_doc(router_doc), str(EXAMPLE))
    arts["native"] = compile_pipeline(native_tp, cpu_only=True, native_router=native_router.build())
    if arts["router"].models != arts["shared"].models:
        raise SystemExit("router and shared CRs declare different models")
    if arts["compute_router"].models != arts["compute_shared"].models:
        raise SystemExit("compute router and shared CRs declare different models")
    write_repository(arts["router"], dest, local_model_root(tps["router"], EXAMPLE))
    add_artifacts(arts["shared"], dest, None)
    add_artifacts(arts["native"], dest, None)
    compute_root = local_model_root(tps["compute_router"], EXAMPLE)
    add_artifacts(arts["compute_router"], dest, compute_root)
    add_artifacts(arts["compute_shared"], dest, compute_root)
    (dest / BLS_NAME / "1").mkdir(parents=True)
    shutil.copy2(BLS_MODEL / "1" / "model.py", dest / BLS_NAME / "1" / "model.py")
    (dest / BLS_NAME / "config.pbtxt").write_text(text_format.MessageToString(bls_config(arts["router"])))
    conds = {}
    for key, cw in CONDS.items():
        cond = compile_pipeline(parse_pipeline(cond_doc(cw, models), str(COND_EXAMPLE)), cpu_only=True)
        add_artifacts(cond, dest, models)
        native_tp = parse_pipeline(cond_native_doc(cw, models), str(COND_EXAMPLE))
        cond_native = compile_pipeline(native_tp, cpu_only=True, native_router=native_router.build())
        add_artifacts(cond_native, dest, models)
        speculative_tp = parse_pipeline(cond_speculative_doc(cw, models), str(COND_EXAMPLE))
        cond_speculative = compile_pipeline(
            speculative_tp, cpu_only=True, native_router=native_router.build()
        )
        add_artifacts(cond_speculative, dest, models)
        (dest / cw.bls / "1").mkdir(parents=True)
        shutil.copy2(COND_BLS_CODE, dest / cw.bls / "1" / "model.py")
        (dest / cw.bls / "config.pbtxt").write_text(text_format.MessageToString(cond_bls_config(cw, cond)))
        conds[key] = {
            "declared_models": list(cond.models),
            "generated": sorted(
                {rel.split("/")[0] for a in (cond, cond_native, cond_speculative) for rel in a.files}
                - set(cond.models)
            ),
            "steps": cond_step_models(cw, cond, cond_native, cond_speculative),
        }
    return {
        **conds,
        "toy": {
            "declared_models": list(arts["router"].models),
            "graph": {
                "router": arts["router"].graph_summary(),
                "native": arts["native"].graph_summary(),
                "shared": arts["shared"].graph_summary(),
            },
        },
        "compute": {
            "model_root": "temporary directory linking model_repository/* and bench/models/*",
            "declared_models": list(arts["compute_router"].models),
            "graph": {
                "router": arts["compute_router"].graph_summary(),
                "shared": arts["compute_shared"].graph_summary(),
            },
        },
    }


# ---------------------------------------------------------------- step compute, measured

_MEASURE = """
import importlib.util, json, statistics, sys, time, types
import numpy as np
path, dim, reps, seed, n = sys.argv[1], *map(int, sys.argv[2:])
pb = types.ModuleType("triton_python_backend_utils")
pb.TritonModelException = RuntimeError
sys.modules[pb.__name__] = pb
spec = importlib.util.spec_from_file_location("m", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
model = mod.TritonPythonModel()
params = {"COMPUTE_DIM": dim, "COMPUTE_REPS": reps, "COMPUTE_SEED": seed}
params = {k: {"string_value": str(v)} for k, v in params.items()}
model.initialize({"model_config": json.dumps({"parameters": params})})
x = np.random.default_rng(0).uniform(-4, 4, (1, 4)).astype(np.float32)
times = []
for i in range(n + n // 5):
    t = time.perf_counter()
    model.compute(2 * x + 1)
    if i >= n // 5:
        times.append((time.perf_counter() - t) * 1000)
print(json.dumps({"median_ms": statistics.median(times), "min_ms": min(times), "calls": len(times)}))
"""


def measure_step_compute(env: dict[str, str], calls: int) -> dict[str, Any]:
    """Time each *_compute model's `compute` (its per-request workload, nothing else) in a fresh
    interpreter with the server's BLAS thread setting: batch-size-1 input, median of `calls`."""
    out: dict[str, Any] = {}
    for seed, name in enumerate(COMPUTE_MODELS.values()):
        path = BENCH_MODELS / name / "1" / "model.py"
        args = [str(path), str(COMPUTE_DIM), str(COMPUTE_REPS), str(seed), str(calls)]
        proc = subprocess.run(
            [sys.executable, "-c", _MEASURE, *args], env=env, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise SystemExit(f"measuring {name} failed:\n{proc.stderr}")
        out[name] = {
            k: round(v, 4) if isinstance(v, float) else v for k, v in json.loads(proc.stdout).items()
        }
    return out


# ---------------------------------------------------------------- client calls

Call = Callable[[np.ndarray], Awaitable[tuple[np.ndarray, np.ndarray]]]


def _input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return tensor


def _outputs(*names: str) -> list[grpcclient.InferRequestedOutput]:
    return [grpcclient.InferRequestedOutput(n) for n in names]


def make_calls(client: grpcclient.InferenceServerClient, timeout: float) -> dict[tuple[str, str], Call]:
    async def model(name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        result = await client.infer(
            name, [_input("IMAGE", x)], outputs=_outputs("SCORE_B", "SCORE_C"), client_timeout=timeout
        )
        return result.as_numpy("SCORE_B"), result.as_numpy("SCORE_C")

    async def head(name: str, tensor: str, output: str, feats: np.ndarray) -> np.ndarray:
        result = await client.infer(
            name, [_input(tensor, feats)], outputs=_outputs(output), client_timeout=timeout
        )
        return result.as_numpy(output)

    async def per_step(names: dict[str, str], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        extracted = await client.infer(
            names["extractor"], [_input("INPUT_A", x)], outputs=_outputs("FEATS_A"), client_timeout=timeout
        )
        feats = extracted.as_numpy("FEATS_A")
        score_b, score_c = await asyncio.gather(
            head(names["head_b"], "FEATS_IN_B", "OUTPUT_B", feats),
            head(names["head_c"], "FEATS_IN_C", "OUTPUT_C", feats),
        )
        return score_b, score_c

    async def cond_model(name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        result = await client.infer(
            name, [_input("IMAGE", x)], outputs=_outputs("RESULT", "LABEL"), client_timeout=timeout
        )
        return result.as_numpy("RESULT"), result.as_numpy("LABEL")

    async def cond_branch(names: dict[int, str], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # the branch this input takes, known to the client (the classifier's rule): the cost floor
        return await cond_model(names[int(x.sum() > 0)], x)

    async def cond_per_step(names: dict[str, str], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        classified = await client.infer(
            names["classifier"], [_input("X", x)], outputs=_outputs("LABEL"), client_timeout=timeout
        )
        label = classified.as_numpy("LABEL")
        large = label is not None and int(label.reshape(-1)[0]) == 1
        _, role, tensor, output = COND_BRANCH_STEPS[int(large)]
        result = await client.infer(
            names[role], [_input(tensor, x)], outputs=_outputs(output), client_timeout=timeout
        )
        return result.as_numpy(output), label

    def cond_calls(cw: CondWorkload) -> dict[tuple[str, str], Call]:
        return {
            (cw.key, "conditional"): lambda x: cond_model(cw.pipeline, x),
            (cw.key, "native"): lambda x: cond_model(cw.native, x),
            (cw.key, "speculative"): lambda x: cond_model(cw.speculative, x),
            (cw.key, "branch_ensemble"): lambda x: cond_branch(cw.branches, x),
            (cw.key, "branch_serial"): lambda x: cond_branch(cw.serial, x),
            (cw.key, "per_step"): lambda x: cond_per_step(cw.models, x),
            (cw.key, "bls"): lambda x: cond_model(cw.bls, x),
        }

    toy_models = {m: m for m in COMPUTE_MODELS}
    return {
        **{call: f for cw in CONDS.values() for call, f in cond_calls(cw).items()},
        ("toy", "router"): lambda x: model(ROUTER_PIPELINE, x),
        ("toy", "native"): lambda x: model(NATIVE_PIPELINE, x),
        ("toy", "shared"): lambda x: model(SHARED_PIPELINE, x),
        ("toy", "bls"): lambda x: model(BLS_NAME, x),
        ("toy", "per_step"): lambda x: per_step(toy_models, x),
        ("compute", "router"): lambda x: model(COMPUTE_PIPELINES["router"], x),
        ("compute", "shared"): lambda x: model(COMPUTE_PIPELINES["shared"], x),
        ("compute", "per_step"): lambda x: per_step(COMPUTE_MODELS, x),
    }


def input_pool(seed: int = 7) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(x, expected SCORE_B, expected SCORE_C) with SCORE_B = 3*(2x+1)-2 and SCORE_C = sum(2x+1)."""
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(POOL):
        x = rng.uniform(-4.0, 4.0, size=(1, 4)).astype(np.float32)
        feats = 2.0 * x + 1.0
        pool.append(
            (x, (3.0 * feats - 2.0).astype(np.float32), feats.sum(-1, keepdims=True).astype(np.float32))
        )
    return pool


def cond_pool(seed: int = 11) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(x, expected RESULT, expected LABEL), alternating branches: even entries sum below 0 (LABEL 0,
    RESULT = extractor's 2x+1), odd ones above 0 (LABEL 1, RESULT = head_b's 3x-2). Cycled in order,
    half the requests take each branch."""
    rng = np.random.default_rng(seed)
    pool = []
    for i in range(POOL):
        x = rng.uniform(-4.0, 4.0, size=(1, 4)).astype(np.float32)
        x[0, 0] += 2.0 - x.sum() if i % 2 else -2.0 - x.sum()  # sum 2 or -2: far from the threshold
        large = bool(x.sum() > 0)
        result = (3.0 * x - 2.0) if large else (2.0 * x + 1.0)
        pool.append((x, result.astype(np.float32), np.array([[int(large)]], dtype=np.int32)))
    return pool


# ---------------------------------------------------------------- load


def summary(run: LoadResult) -> dict[str, Any]:
    return {
        "p50_ms": run.p50,
        "p99_ms": run.p99,
        "throughput_rps": run.throughput,
        "requests": run.attempted,
        "errors": run.errors,
        "wall_s": round(run.seconds, 3),
    }


async def run_load(
    call: Call,
    concurrency: int,
    n: int,
    time_cap_s: float,
    pool: list,
    names: tuple[str, str] = ("SCORE_B", "SCORE_C"),
) -> LoadResult:
    """`concurrency` workers share `n` requests (stopping early at the time cap); each response checked
    (the two outputs `names` against the pool entry's expected values)."""

    async def checked(i: int) -> None:
        x, want_b, want_c = pool[i % len(pool)]
        got_b, got_c = await call(x)
        for name, got, want in ((names[0], got_b, want_b), (names[1], got_c, want_c)):
            if got is None or got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-4):
                raise WrongAnswer(f"x={x.tolist()}: {name}={got!r}, expected {want.tolist()}")

    return await closed_loop(checked, concurrency=concurrency, requests=n, max_seconds=time_cap_s)


# ---------------------------------------------------------------- report


def median_over_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    out = {
        "p50_ms": statistics.median(r["p50_ms"] for r in rounds),
        "p99_ms": statistics.median(r["p99_ms"] for r in rounds),
        "throughput_rps": statistics.median(r["throughput_rps"] for r in rounds),
        "errors": sum(r["errors"] for r in rounds),
        "requests": sum(r["requests"] for r in rounds),
    }
    if all("step_us" in r for r in rounds):
        out["step_us"] = triton_stats.median([r["step_us"] for r in rounds])
    return out


def target_checks(results: dict[str, dict[str, dict[str, Any]]], total_errors: int) -> list[dict[str, Any]]:
    def p50(variant: str, c: int) -> float:
        return results[variant][str(c)]["p50_ms"]

    checks = []
    ratio = p50("router", 1) / p50("shared", 1)
    checks.append(
        {
            "name": "router_within_10pct_of_shared_c1",
            "description": "router p50 / shared p50 at concurrency 1 <= 1.10",
            "value": round(ratio, 3),
            "pass": bool(ratio <= 1.10),
        }
    )
    for c in CONCURRENCIES:
        native = p50("native", c) / p50("shared", c)
        checks.append(
            {
                "name": f"native_within_5pct_of_shared_c{c}",
                "description": f"native router p50 / shared p50 at concurrency {c} <= 1.05",
                "value": round(native, 3),
                "python_router": round(p50("router", c) / p50("shared", c), 3),
                "pass": bool(native <= 1.05),
            }
        )
    for c in CONCURRENCIES:
        ens = {v: p50(v, c) for v in ("router", "native", "shared")}
        rest = {v: p50(v, c) for v in ("bls", "per_step")}
        checks.append(
            {
                "name": f"ensembles_beat_bls_and_per_step_c{c}",
                "description": f"router, native and shared p50 below bls and per_step p50 at concurrency {c}",
                "value": {k: round(v, 3) for k, v in {**ens, **rest}.items()},
                "pass": bool(max(ens.values()) < min(rest.values())),
            }
        )
    checks.append(
        {
            "name": "all_responses_correct",
            "description": "every measured and warm-up response arrived and matched the expected numbers",
            "value": total_errors,
            "pass": total_errors == 0,
        }
    )
    return checks


def compute_checks(
    toy: dict[str, dict[str, dict[str, Any]]], compute: dict[str, dict[str, dict[str, Any]]], errors: int
) -> list[dict[str, Any]]:
    """The compute workload's lines: informational router/shared ratios (not targets) and its
    correctness check (which, like any wrong response, makes the exit status non-zero)."""
    checks = []
    for c in CONCURRENCIES:
        ratio = compute["router"][str(c)]["p50_ms"] / compute["shared"][str(c)]["p50_ms"]
        checks.append(
            {
                "name": f"router_within_10pct_of_shared_c{c}_compute",
                "description": f"compute workload: router p50 / shared p50 at concurrency {c} <= 1.10",
                "value": round(ratio, 3),
                "within": bool(ratio <= 1.10),
                "informational": True,
            }
        )
    checks.append(
        {
            "name": "router_minus_shared_p50_ms",
            "description": "router p50 - shared p50 (ms), per workload and concurrency: the router's cost",
            "value": {
                w: {
                    str(c): round(r["router"][str(c)]["p50_ms"] - r["shared"][str(c)]["p50_ms"], 3)
                    for c in CONCURRENCIES
                }
                for w, r in (("toy", toy), ("compute", compute))
            },
            "informational": True,
        }
    )
    checks.append(
        {
            "name": "all_responses_correct_compute",
            "description": "compute workload: every measured and warm-up response arrived and was right",
            "value": errors,
            "pass": errors == 0,
            "informational": False,
        }
    )
    return checks


def ran_own_models(cw: CondWorkload, cond: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Whether every measured run of every variant reached the workload's own models, from Triton's
    statistics read around it: the classifier one row a request, the two branch models one row a request
    between them (inferences: the Python orchestrator calls them once a batch), two where both branches
    run for every request (COND_SPECULATIVE). cond_compute's models answer the same numbers as cond's, so
    the answers cannot tell."""
    classifier = cw.models["classifier"]
    branches = [cw.models[role] for _, role, _, _ in COND_BRANCH_STEPS.values()]
    missed = []
    for variant, by_c in cond.items():
        for c, result in by_c.items():
            for k, run in enumerate(result["rounds"]):
                steps = run.get("step_us", {})
                counts = {
                    classifier: steps.get(classifier, {}).get("inferences", 0),
                    "branches": sum(steps.get(m, {}).get("inferences", 0) for m in branches),
                }
                want = {classifier: run["requests"]}
                want["branches"] = run["requests"] * (2 if variant in COND_SPECULATIVE else 1)
                if counts != want:
                    missed.append(f"{variant} c={c} round {k + 1}: {run['requests']} requests, rows {counts}")
    return {
        "name": "every_variant_ran_the_workloads_models",
        "description": f"every run's requests reached {classifier} once each and {' or '.join(branches)} "
        "once each, both where speculative (rows, in Triton's statistics)",
        "value": missed,
        "pass": not missed,
    }


def cond_checks(
    cw: CondWorkload, cond: dict[str, dict[str, dict[str, Any]]], errors: int
) -> list[dict[str, Any]]:
    """A two-branch workload: the goal (each compiled variant, the Python orchestrator and the native
    switch, within COND_GOAL of each floor, p50, per concurrency), its ratios against the others,
    that every variant ran the workload's models, and the workload's correctness check.
    branch_ensemble is the issue's floor: it runs the branch step beside the classifier, which no
    pipeline that waits for the label can; branch_serial waits for it, so against it the condition's
    own cost shows."""

    def p50(variant: str, c: int) -> float:
        return float(cond[variant][str(c)]["p50_ms"])

    costs = {
        "branch_ensemble": "what the condition costs, with the classifier time the plain ensemble overlaps",
        "branch_serial": "the condition's own cost, over a plain ensemble that also waits for the classifier",
    }
    checks: list[dict[str, Any]] = []
    for variant in COND_SERVED:
        for floor in COND_FLOORS:
            for c in CONCURRENCIES:
                ratio = p50(variant, c) / p50(floor, c)
                checks.append(
                    {
                        "name": f"{variant}_within_10pct_of_{floor}_c{c}",
                        "description": f"{variant} p50 / {floor} p50 at concurrency {c} <= {COND_GOAL}",
                        "value": round(ratio, 3),
                        "pass": bool(ratio <= COND_GOAL),
                    }
                )
        checks.append(
            {
                "name": f"{variant}_ratios_p50",
                "description": f"{variant} p50 over each other variant's p50, per concurrency",
                "value": {
                    str(c): {v: round(p50(variant, c) / p50(v, c), 3) for v in COND_VARIANTS if v != variant}
                    for c in CONCURRENCIES
                },
                "informational": True,
            }
        )
        for floor in COND_FLOORS:
            checks.append(
                {
                    "name": f"{variant}_minus_{floor}_p50_ms",
                    "description": f"{variant} p50 - {floor} p50 (ms): {costs[floor]}",
                    "value": {str(c): round(p50(variant, c) - p50(floor, c), 3) for c in CONCURRENCIES},
                    "informational": True,
                }
            )
    checks.append(ran_own_models(cw, cond))
    checks.append(
        {
            "name": "all_responses_correct_cond",
            "description": "two-branch workload: every measured and warm-up response arrived and was right",
            "value": errors,
            "pass": errors == 0,
        }
    )
    return checks


def cond_report(
    cw: CondWorkload,
    mode: Mode,
    info: dict[str, Any],
    results: dict[str, dict[str, dict[str, Any]]],
    checks: list[dict[str, Any]],
) -> dict[str, Any]:
    """A two-branch workload's section of the report."""
    models = ", ".join(f"{role} -> {path.relative_to(ROOT)}" for role, path in cw.sources.items())
    computes = f"; model parameters {cw.parameters}" if cw.parameters else ""
    return {
        "workload": cw.key,
        "description": (
            f"{COND_EXAMPLE.relative_to(ROOT)}'s `{COND_SOURCE}` pipeline (classifier, then head_b for "
            f"LABEL 1, extractor otherwise; outputs RESULT and LABEL) on the models {models}, linked as "
            f"{sorted(cw.models.values())}{computes}; half the requests take each branch (the input pool "
            "alternates inputs summing to -2 and 2, cycled in order)"
        ),
        "variants": {
            "conditional": f"compiled pipeline {cw.pipeline!r}: the generated orchestrator (Python "
            "BLS) calls its head ensemble (classify), then the branch ensemble the label picks",
            "native": f"compiled pipeline {cw.native!r} on the native switch: one ensemble, classify "
            "then the switch (a C backend step) that calls the branch ensemble the label picks",
            "speculative": f"compiled pipeline {cw.speculative!r}, `speculative: true`, on the native "
            "switch: one ensemble running classify and both branch steps side by side for every request, "
            "then the switch keeping the answer of the branch the label picks (twice the branch compute)",
            "branch_ensemble": f"plain ensembles {sorted(cw.branches.values())} (classify + the branch "
            "step, no condition; Triton runs the two steps side by side, as both read only IMAGE); the "
            "client sends each request to the one of the branch it takes",
            "branch_serial": f"plain ensembles {sorted(cw.serial.values())}: the same, the branch step "
            f"also reading classify.LABEL as {COND_AFTER} (an optional input its model never reads), so "
            "that it runs after the classifier, as a step behind a condition must",
            "per_step": "client: classifier, then extractor or head_b by its LABEL (2 round trips)",
            "bls": f"hand-written Python BLS model {cw.bls!r} (bench/models/bls_branch): classifier, then "
            "the branch by LABEL, via async_exec",
        },
        "mix": {"small (LABEL 0)": 0.5, "large (LABEL 1)": 0.5},
        "requests": {
            str(c): n for c, n in (mode.compute_requests if cw.key in HEAVY else mode.requests).items()
        },
        **info,
        "results": results,
        "checks": checks,
    }


def print_table(tables: dict[str, dict[str, dict[str, dict[str, Any]]]]) -> None:
    cols = ("workload", "variant", "conc", "p50 ms", "p99 ms", "req/s", "p50/base", "errors")
    widths = (4, 8, 8, 8, 10, 6)
    head = f"{cols[0]:<8} {cols[1]:<15} " + " ".join(
        f"{c:>{w}}" for c, w in zip(cols[2:], widths, strict=True)
    )
    print(head + "   (base: shared; cond: branch_ensemble)")
    print("-" * len(head))
    for workload, results in tables.items():
        for c in CONCURRENCIES:
            for v, r in ((v, by_c[str(c)]) for v, by_c in results.items()):
                ratio = r[f"ratio_p50_vs_{BASE[workload]}"]
                print(
                    f"{workload:<8} {v:<15} {c:>4} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} "
                    f"{r['throughput_rps']:>8.1f} {ratio:>10.2f} {r['errors']:>6}"
                )


def machine_info(server_meta: Any) -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "tritonserver_version": server_meta.version,
        "tritonserver_name": server_meta.name,
        "nvidia_pytriton": metadata.version("nvidia-pytriton"),
        "tritonclient": metadata.version("tritonclient"),
    }


def loadavg() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


# ---------------------------------------------------------------- main


def aggregate(
    per_round: dict[str, dict[str, list[dict[str, Any]]]], base_variant: str = "shared"
) -> dict[str, dict[str, dict[str, Any]]]:
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for v, by_c in per_round.items():
        results[v] = {c: {**median_over_rounds(rounds), "rounds": rounds} for c, rounds in by_c.items()}
    for c in CONCURRENCIES:
        base = results[base_variant][str(c)]["p50_ms"]
        for v in results:
            results[v][str(c)][f"ratio_p50_vs_{base_variant}"] = results[v][str(c)]["p50_ms"] / base
    return results


async def bench(
    server: LocalTriton,
    mode: Mode,
    steps: dict[str, list[str]],
    cond_steps: dict[str, dict[str, list[str]]],
    cases: tuple[tuple[str, str], ...] = CASES,
) -> dict[str, Any]:
    """Every case per round and concurrency; the toy ensembles' and the two-branch workloads' runs
    also record where the time went (Triton's statistics of the models in `steps` and `cond_steps`, by
    workload, read around the run)."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    stats = triton_stats.http_getter(server.http_url, server.admin_headers())
    try:
        meta = await client.get_server_metadata()
        names = (ROUTER_PIPELINE, NATIVE_PIPELINE, SHARED_PIPELINE, BLS_NAME, "extractor", "head_b", "head_c")
        cond_names = tuple(name for cw in CONDS.values() for name in cw.names())
        for name in (*names, *COMPUTE_PIPELINES.values(), *COMPUTE_MODELS.values(), *cond_names):
            if not await client.is_model_ready(name):
                raise TritonError(f"model {name!r} is not ready:\n{server.log_tail()}")
        calls = make_calls(client, mode.client_timeout_s)
        pools = {"toy": input_pool(), "compute": input_pool(), **dict.fromkeys(CONDS, cond_pool())}
        workloads = [w for w in BASE if any(w == case[0] for case in cases)]
        per_round: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {w: {} for w in workloads}
        for w, v in cases:
            per_round[w][v] = {str(c): [] for c in CONCURRENCIES}
        warmup_errors = dict.fromkeys(workloads, 0)
        samples: list[str] = []
        round_load: list[list[float] | None] = []
        for rnd in range(mode.rounds):
            round_load.append(loadavg())
            order = cases[rnd % len(cases) :] + cases[: rnd % len(cases)]
            for c in CONCURRENCIES:
                for w, v in order:
                    n = (mode.compute_requests if w in HEAVY else mode.requests)[c]
                    pool, names = pools[w], NAMES[w]
                    warm = await run_load(calls[w, v], c, mode.warmup, mode.time_cap_s, pool, names)
                    warmup_errors[w] += warm.errors
                    models = {"toy": steps, **cond_steps}.get(w, {}).get(v, [])
                    before = triton_stats.snapshot(stats, models)
                    run = await run_load(calls[w, v], c, n, mode.time_cap_s, pool, names)
                    samples += [f"{w}/{v} c={c}: {s}" for s in warm.error_samples + run.error_samples]
                    s = summary(run)
                    if models:
                        s["step_us"] = triton_stats.per_request(triton_stats.snapshot(stats, models), before)
                    per_round[w][v][str(c)].append(s)
                    print(
                        f"  round {rnd + 1}/{mode.rounds} c={c:<2} {w + '/' + v:<16} n={s['requests']:<5} "
                        f"p50 {s['p50_ms']:7.3f} ms  p99 {s['p99_ms']:7.3f} ms  "
                        f"{s['throughput_rps']:8.1f} req/s"
                        f"  errors {s['errors'] + warm.errors}",
                        flush=True,
                    )
    finally:
        await client.close()

    results = {w: aggregate(per_round[w], BASE[w]) for w in per_round}
    errors = {
        w: warmup_errors[w] + sum(r[str(c)]["errors"] for r in results[w].values() for c in CONCURRENCIES)
        for w in results
    }
    return {
        "machine": machine_info(meta),
        "round_loadavg": round_load,
        "results": results,
        "warmup_errors": warmup_errors,
        "errors": errors,
        "error_samples": samples[:20],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests, one round (smoke run)")
    parser.add_argument("--out", type=Path, help="JSON output (default bench/results/dataplane[-quick].json)")
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help=f"the workloads to run, comma-separated (default {','.join(WORKLOADS)}); with fewer, the "
        "report holds only theirs and --out is required",
    )
    parser.add_argument("--rounds", type=int, help="rounds (default 5; 1 with --quick)")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    if args.rounds:
        mode = replace(mode, rounds=args.rounds)
    workloads = [w for w in args.workloads.split(",") if w]
    if not workloads or set(workloads) - set(WORKLOADS):
        parser.error(f"--workloads: a comma-separated list of {', '.join(WORKLOADS)}")
    if set(workloads) != set(WORKLOADS) and args.out is None:
        parser.error("--workloads with fewer than all workloads needs --out (the committed results hold all)")
    cases = tuple(case for case in CASES if case[0] in workloads)
    out = args.out or RESULTS / ("dataplane-quick.json" if args.quick else "dataplane.json")

    started = time.perf_counter()
    load_start = loadavg()
    # tritonserver (and so every Python-backend stub) inherits this: one BLAS thread per stub, so the
    # compute models do not oversubscribe the cores. The toy models do no BLAS work.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", BLAS_THREADS)
    blas_threads = os.environ["OPENBLAS_NUM_THREADS"]
    step_compute = (
        measure_step_compute(dict(os.environ), calls=50 if args.quick else 300)
        if "compute" in workloads
        else {}
    )
    for name, m in step_compute.items():
        print(f"step compute {name}: median {m['median_ms']:.3f} ms, min {m['min_ms']:.3f} ms")
    work = Path(tempfile.mkdtemp(prefix="tp-bench-dataplane-"))
    try:
        repo_info = build_repository(work / "repo", model_root(work / "models"))
        print(f"repository: {work / 'repo'} ({', '.join(sorted(p.name for p in (work / 'repo').iterdir()))})")
        cond_steps = {key: repo_info[key]["steps"] for key in CONDS}
        server = LocalTriton(work / "repo", extra_args=["--exit-timeout-secs=5"])
        t0 = time.perf_counter()
        with server:
            startup_s = time.perf_counter() - t0
            print(f"tritonserver ready in {startup_s:.1f}s; grpc {server.grpc_url}", flush=True)
            report = asyncio.run(
                bench(server, mode, step_models(repo_info["toy"]["graph"]), cond_steps, cases)
            )
        log = server.logs()
        error_lines = [ln for ln in log.splitlines() if ln[:1] == "E" and ln[1:5].isdigit()]
    except TritonError as exc:
        print(f"tritonserver failed: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(work, ignore_errors=True)
    runtime = time.perf_counter() - started

    ran, errors = report["results"], report["errors"]  # the workloads run (--workloads)
    results, compute_results = ran.get("toy", {}), ran.get("compute", {})
    total_errors = sum(errors.values())
    checks = target_checks(results, errors["toy"]) if "toy" in ran else []
    both = "toy" in ran and "compute" in ran
    info = compute_checks(results, compute_results, errors["compute"]) if both else []
    cond_check = {key: cond_checks(CONDS[key], ran[key], errors[key]) for key in CONDS if key in ran}
    machine = {
        **report["machine"],
        "loadavg_1_5_15_start": load_start,
        "loadavg_1_5_15_per_round": report["round_loadavg"],
        "loadavg_1_5_15_end": loadavg(),
    }
    payload = {
        "benchmark": "dataplane",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "workloads": workloads,
        "machine": machine,
        "config": {
            "example": str(EXAMPLE.relative_to(ROOT)),
            "dropped_output": DROPPED_OUTPUT,
            "workloads": {
                "toy": "the example's models; `results` and `targets` below",
                "compute": "bench/models/*_compute (same outputs + real numpy compute); `compute` below",
            },
            "variants": {
                "router": f"ensemble {ROUTER_PIPELINE!r}, fanOut: router",
                "shared": f"ensemble {SHARED_PIPELINE!r}, fanOut: shared",
                "bls": f"Python BLS model {BLS_NAME!r}: extractor, then head_b + head_c via async_exec",
                "per_step": "client: extractor, then head_b + head_c via asyncio.gather (3 round trips)",
            },
            "concurrencies": list(CONCURRENCIES),
            "requests": {str(c): n for c, n in mode.requests.items()},
            "warmup": mode.warmup,
            "rounds": mode.rounds,
            "time_cap_s": mode.time_cap_s,
            "batch_size": 1,
            "input": "IMAGE FP32 [1,4]",
            "client": "tritonclient.grpc.aio, one channel",
            "server": "one tritonserver, CPU, Python backend; instance counts as in the example",
            "server_env": {"OPENBLAS_NUM_THREADS": blas_threads},
            "statistic": "median over rounds of each round's p50 / p99 / throughput",
            "order": "each round runs every (workload, variant) per concurrency, in rotating order",
            **repo_info["toy"],
        },
        "results": results,
        "targets": checks,
        "compute": {
            "workload": "compute",
            "description": (
                "examples/fanout.yaml with extractor/head_b/head_c replaced by bench/models/*_compute: "
                "identical outputs, plus per request and step COMPUTE_REPS x (float32 [1,DIM] @ [DIM,DIM], "
                "tanh) on a vector derived from the input, checked finite inside the model"
            ),
            "models": COMPUTE_MODELS,
            "parameters": {"COMPUTE_DIM": COMPUTE_DIM, "COMPUTE_REPS": COMPUTE_REPS},
            "step_compute_ms": step_compute,
            "step_compute_method": (
                "each model's compute() alone, batch size 1, in a fresh interpreter with the server's "
                "environment (same numpy, OPENBLAS_NUM_THREADS), before the server starts"
            ),
            "variants": {
                "router": f"ensemble {COMPUTE_PIPELINES['router']!r}, fanOut: router",
                "shared": f"ensemble {COMPUTE_PIPELINES['shared']!r}, fanOut: shared",
                "per_step": "client: extractor_compute, then head_b_compute + head_c_compute (3 round trips)",
            },
            "requests": {str(c): n for c, n in mode.compute_requests.items()},
            **repo_info["compute"],
            "results": compute_results,
            "checks": info,
        },
        **{
            f"conditional{key.removeprefix('cond')}": cond_report(
                CONDS[key], mode, repo_info[key], ran[key], check
            )
            for key, check in cond_check.items()
        },
        "errors": {
            "total": total_errors,
            "by_workload": report["errors"],
            "warmup": report["warmup_errors"],
            "samples": report["error_samples"],
            "tritonserver_log_error_lines": error_lines[:20],
        },
        "runtime_s": round(runtime, 1),
        "server_startup_s": round(startup_s, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, out)

    print()
    print_table({w: ran[w] for w in WORKLOADS if w in ran})
    steps = ", ".join(f"{m['median_ms']:.2f}" for m in step_compute.values())
    if step_compute:
        shape = f"[1,{COMPUTE_DIM}]@[{COMPUTE_DIM},{COMPUTE_DIM}]"
        print(f"(compute: {COMPUTE_REPS} x {shape} per step; {steps} ms)")
    rows = [
        row
        for v, by_c in results.items()
        for row in triton_stats.table_rows([v], by_c["1"].get("step_us", {}))
    ]
    if rows:
        print("\ntoy workload at concurrency 1, per request from Triton's statistics (medians over rounds):")
        print(format_table(["variant", *triton_stats.TABLE_HEADERS], rows))
    for key, check in cond_check.items():
        for c in CONCURRENCIES:
            rows = [
                row
                for v, by_c in ran[key].items()
                for row in triton_stats.table_rows([v], by_c[str(c)].get("step_us", {}))
            ]
            print(
                f"\ntwo-branch workload {key} at concurrency {c}, per request from Triton's statistics "
                "(medians):"
            )
            print(format_table(["variant", *triton_stats.TABLE_HEADERS], rows))
        print()
        print(f"two-branch workload ({key}):")
        for line in check:
            verdict = "INFO" if line.get("informational") else ("PASS" if line["pass"] else "FAIL")
            print(f"{verdict}  {line['name']}: {line['description']} (got {line['value']})")
    print()
    print("targets (toy workload):")
    for check in checks:
        verdict = "PASS" if check["pass"] else "FAIL"
        print(f"{verdict}  {check['name']}: {check['description']} (got {check['value']})")
    print("compute workload (informational, not targets):")
    for check in info:
        if check["informational"]:
            within = f"; within: {'yes' if check['within'] else 'no'}" if "within" in check else ""
            print(f"INFO  {check['name']}: {check['description']} (got {check['value']}{within})")
        else:
            verdict = "PASS" if check["pass"] else "FAIL"
            print(f"{verdict}  {check['name']}: {check['description']} (got {check['value']})")
    if error_lines:
        cuda = [ln for ln in error_lines if "cuda" in ln.lower()]
        print(
            f"\ntritonserver logged {len(error_lines)} error line(s), {len(cuda)} about CUDA being absent "
            "(expected on a CPU-only host)"
        )
        for line in [ln for ln in error_lines if ln not in cuda][:5]:
            print(f"  {line}")
    for sample in report["error_samples"][:5]:
        print(f"error: {sample}")
    loads = [load_start, *report["round_loadavg"], machine["loadavg_1_5_15_end"]]
    one_min = " ".join("?" if load is None else f"{load[0]:.2f}" for load in loads)
    print(f"\n1-min load average (start, each round, end): {one_min}")
    print(f"runtime {runtime:.1f}s; wrote {out}")
    return 1 if total_errors else 0


if __name__ == "__main__":
    sys.exit(main())
