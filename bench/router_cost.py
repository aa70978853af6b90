#!/usr/bin/env python3
"""Router cost (make bench-router): ways to make the inserted router cheap, side by side in one run.

One tritonserver (CPU, Python backend) serves the toy fan-out of examples/fanout.yaml (as
bench/dataplane.py's toy workload) as `fanOut: shared`, the baseline, and as one ensemble per router
variant. Each variant is the compiled router with one thing changed:

    compiled      the router exactly as the compiler emits it (DLPack for CPU and GPU tensors)
    numpy         the router as it was before DLPack on the CPU (as_numpy, one numpy-backed copy per
                  output): bench/models/router_numpy.py
    instances2    two router instances instead of one
    batching      dynamic_batching {} (no queue delay: it batches only what is already waiting)
    batching2     both

Rounds run every variant at concurrency 1 and 16 in rotating order; the report gives each variant's
median p50 over rounds and its ratio to shared (the targets: <= 1.10 at 1, <= 1.15 at 16). Every
response is checked. Writes bench/results/router-cost.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import tritonclient.grpc.aio as grpcclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from bench.dataplane import (  # the toy workload of the data-plane bench
    EXAMPLE,
    ROUTER_PIPELINE,
    SHARED_PIPELINE,
    add_artifacts,
    input_pool,
    run_load,
    variant_docs,
)
from harness import triton_stats
from harness.load import format_table
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.local.repository import local_model_root, write_repository
from tritonpipeline.local.tritonserver import LocalTriton
from tritonpipeline.spec import parse_pipeline

RESULTS = Path(__file__).resolve().parent / "results"
NUMPY_ROUTER = Path(__file__).resolve().parent / "models" / "router_numpy.py"
VARIANTS: dict[str, dict[str, Any]] = {
    "compiled": {},
    "numpy": {"code": NUMPY_ROUTER},
    "instances2": {"count": 2},
    "batching": {"batching": True},
    "batching2": {"count": 2, "batching": True},
}
TARGETS = {1: 1.10, 16: 1.15}


def parse(data: bytes) -> mc.ModelConfig:
    return text_format.Parse(data.decode(), mc.ModelConfig())


def build(dest: Path) -> None:
    """The compiled router and shared ensembles, then one renamed copy of the router ensemble per variant."""
    router_doc, shared_doc = variant_docs()
    router_tp, shared_tp = (parse_pipeline(d, str(EXAMPLE)) for d in (router_doc, shared_doc))
    router_art = compile_pipeline(router_tp, cpu_only=True)
    write_repository(router_art, dest, local_model_root(router_tp, EXAMPLE))
    add_artifacts(compile_pipeline(shared_tp, cpu_only=True), dest, None)
    (router,) = router_art.plan.routers
    for name, change in VARIANTS.items():
        cfg = parse(router_art.files[f"{router.name}/config.pbtxt"])
        cfg.name = f"router_{name}"
        cfg.instance_group[0].count = change.get("count", 1)
        if change.get("batching"):
            cfg.dynamic_batching.SetInParent()
        (dest / cfg.name / "1").mkdir(parents=True)
        code = change.get("code")
        if code:
            shutil.copy2(code, dest / cfg.name / "1" / "model.py")
        else:
            (dest / cfg.name / "1" / "model.py").write_bytes(router_art.files[f"{router.name}/1/model.py"])
        (dest / cfg.name / "config.pbtxt").write_text(text_format.MessageToString(cfg))
        ens = parse(router_art.files[f"{ROUTER_PIPELINE}/config.pbtxt"])
        ens.name = f"{ROUTER_PIPELINE}_{name}"
        for step in ens.ensemble_scheduling.step:
            if step.model_name == router.name:
                step.model_name = cfg.name
        (dest / ens.name / "1").mkdir(parents=True)
        (dest / ens.name / "config.pbtxt").write_text(text_format.MessageToString(ens))


async def bench(server: LocalTriton, rounds: int, requests: dict[int, int]) -> dict[str, Any]:
    """Every variant at each concurrency, once a round, in rotating order; every response checked."""
    pool = input_pool()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    models = {"shared": SHARED_PIPELINE, **{v: f"{ROUTER_PIPELINE}_{v}" for v in VARIANTS}}

    def call_for(model: str):
        async def call(x):
            tensor = grpcclient.InferInput("IMAGE", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            outputs = [grpcclient.InferRequestedOutput(n) for n in ("SCORE_B", "SCORE_C")]
            result = await client.infer(model, [tensor], outputs=outputs, client_timeout=30.0)
            return result.as_numpy("SCORE_B"), result.as_numpy("SCORE_C")

        return call

    calls = {v: call_for(m) for v, m in models.items()}
    runs: dict[str, dict[int, list[dict[str, float]]]] = {v: {} for v in calls}
    try:
        for call in calls.values():
            await run_load(call, 4, 100, 10.0, pool)  # warm-up
        order = list(calls)
        for r in range(rounds):
            order = order[1:] + order[:1]
            for c, n in requests.items():
                for v in order:
                    res = await run_load(calls[v], c, n, 30.0, pool)
                    runs[v].setdefault(c, []).append(
                        {"p50_ms": res.p50, "p99_ms": res.p99, "rps": res.throughput, "errors": res.errors}
                    )
            print(f"round {r + 1}/{rounds} done", flush=True)
    finally:
        await client.close()
    return runs


def report(runs: dict[str, dict[int, list[dict[str, float]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for v, per_c in runs.items():
        out[v] = {}
        for c, xs in per_c.items():
            out[v][str(c)] = {
                "p50_ms": statistics.median(x["p50_ms"] for x in xs),
                "p99_ms": statistics.median(x["p99_ms"] for x in xs),
                "rps": statistics.median(x["rps"] for x in xs),
                "errors": sum(int(x["errors"]) for x in xs),
                "rounds": xs,
            }
    for v in runs:
        for c in out[v]:
            out[v][c]["ratio_to_shared"] = out[v][c]["p50_ms"] / out["shared"][c]["p50_ms"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one round, few requests (smoke run)")
    args = parser.parse_args()
    rounds, requests = (1, {1: 100, 16: 300}) if args.quick else (args.rounds, {1: 800, 16: 3000})
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="tp-router-cost-") as tmp:
        repo = Path(tmp) / "repository"
        build(repo)
        with LocalTriton(repo, log_file=Path(tmp) / "tritonserver.log") as server:
            runs = asyncio.run(bench(server, rounds, requests))
            get = triton_stats.http_getter(server.http_url, server.admin_headers())
            models = ["extractor", "head_b", "head_c", *(f"router_{v}" for v in VARIANTS)]
            steps = triton_stats.per_request(triton_stats.snapshot(get, models))
    table = report(runs)
    errors = sum(table[v][c]["errors"] for v in table for c in table[v])
    rows = []
    for v in table:
        row = [v]
        for c in requests:
            x = table[v][str(c)]
            row += [f"{x['p50_ms']:.3f}", f"{x['ratio_to_shared']:.3f}", f"{x['rps']:.0f}"]
        rows.append(row)
    headers = ["variant"] + [h for c in requests for h in (f"p50 ms c={c}", f"/shared c={c}", f"req/s c={c}")]
    print(format_table(headers, rows))
    phases = triton_stats.PHASES
    print("\nmicroseconds per request, from Triton's statistics over the whole run:")
    print(format_table(["model", *phases], [[m, *(str(t[p]) for p in phases)] for m, t in steps.items()]))
    for v in VARIANTS:
        verdict = all(table[v][str(c)]["ratio_to_shared"] <= TARGETS[c] for c in TARGETS)
        print(f"  {v}: {'meets' if verdict else 'misses'} <= {TARGETS[1]} at 1 and <= {TARGETS[16]} at 16")
    result = {
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "rounds": rounds,
        "requests": requests,
        "targets": TARGETS,
        "variants": {v: VARIANTS.get(v, {"fanOut": "shared"}) for v in table},
        "results": table,
        "step_microseconds": steps,
        "errors": errors,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("router-cost-quick.json" if args.quick else "router-cost.json")
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {out}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
