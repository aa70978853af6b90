#!/usr/bin/env python3
"""Data-plane benchmark: four ways to run the fan-out of examples/fanout.yaml on one real tritonserver.

    router    compiled ensemble, fanOut: router (one router model copies FEATS_A to both heads)
    shared    compiled ensemble, fanOut: shared (both heads read FEATS_A directly)
    bls       a Python BLS model: extractor, then head_b and head_c concurrently (async_exec)
    per_step  the client composes: extractor, then head_b and head_c concurrently, one round trip each

All four are served by ONE tritonserver process (CPU, Python backend) and driven by the asyncio gRPC
client (tritonclient.grpc.aio) with batch-size-1 FP32 [1,4] requests at concurrency 1 and 16. Every
response is checked numerically. Rounds run every variant once in rotating order; the report gives
the median over rounds. This is a benchmark, not a test: perf targets are reported as PASS/FAIL and
the exit status is non-zero only when responses were wrong or failed.

    .venv/bin/python bench/dataplane.py            # full run, writes bench/results/dataplane.json
    .venv/bin/python bench/dataplane.py --quick    # smoke run, writes bench/results/dataplane-quick.json
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
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpcclient
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritonpipeline.compiler import Artifacts, compile_pipeline
from tritonpipeline.loadgen import LoadResult, WrongAnswer, closed_loop
from tritonpipeline.repository import local_model_root, write_repository
from tritonpipeline.server import LocalTriton, TritonError
from tritonpipeline.spec import TritonPipeline, parse_pipeline

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fanout.yaml"
BLS_MODEL = Path(__file__).resolve().parent / "models" / "bls_fanout"
RESULTS = Path(__file__).resolve().parent / "results"

ROUTER_PIPELINE = "vision"
SHARED_PIPELINE = "vision_shared"
BLS_NAME = "bls_fanout"
VARIANTS = ("router", "shared", "bls", "per_step")
CONCURRENCIES = (1, 16)
DROPPED_OUTPUT = "FEATURES"  # the example also returns the features; dropped so all variants do the same work
POOL = 256  # distinct inputs, cycled


@dataclass(frozen=True)
class Mode:
    warmup: int
    requests: dict[int, int]  # concurrency -> measured requests per run
    rounds: int
    time_cap_s: float  # per measured run; a run stops early when it is reached
    client_timeout_s: float = 30.0


FULL = Mode(warmup=50, requests={1: 1000, 16: 3000}, rounds=5, time_cap_s=10.0)
QUICK = Mode(warmup=20, requests={1: 100, 16: 300}, rounds=1, time_cap_s=3.0)


# ---------------------------------------------------------------- repository


def variant_docs() -> tuple[dict[str, Any], dict[str, Any]]:
    """The two CRs, built from examples/fanout.yaml: `vision` (fanOut router), `vision_shared` (shared)."""
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


def bls_config(ensemble: Artifacts) -> mc.ModelConfig:
    """The BLS model takes and returns exactly what the router ensemble does (names, types, dims)."""
    ens = text_format.Parse(ensemble.files[f"{ROUTER_PIPELINE}/config.pbtxt"].decode(), mc.ModelConfig())
    cfg = mc.ModelConfig(name=BLS_NAME, backend="python", max_batch_size=ens.max_batch_size)
    cfg.input.extend(ens.input)
    cfg.output.extend(ens.output)
    cfg.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    return cfg


def build_repository(dest: Path) -> dict[str, Any]:
    """Router ensemble repository + the shared ensemble + the BLS model, in one directory."""
    router_doc, shared_doc = variant_docs()
    router_tp: TritonPipeline = parse_pipeline(router_doc, str(EXAMPLE))
    shared_tp: TritonPipeline = parse_pipeline(shared_doc, str(EXAMPLE))
    router_art = compile_pipeline(router_tp, cpu_only=True)
    shared_art = compile_pipeline(shared_tp, cpu_only=True)
    if router_art.models != shared_art.models:
        raise SystemExit("router and shared CRs declare different models")
    write_repository(router_art, dest, local_model_root(router_tp, EXAMPLE))
    for rel, data in shared_art.files.items():
        target = dest / rel
        if target.exists():
            if target.read_bytes() != data:
                raise SystemExit(f"{rel}: the shared CR renders a different file than the router CR")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (dest / BLS_NAME / "1").mkdir(parents=True)
    shutil.copy2(BLS_MODEL / "1" / "model.py", dest / BLS_NAME / "1" / "model.py")
    (dest / BLS_NAME / "config.pbtxt").write_text(text_format.MessageToString(bls_config(router_art)))
    return {
        "declared_models": list(router_art.models),
        "graph": {"router": router_art.graph_summary(), "shared": shared_art.graph_summary()},
    }


# ---------------------------------------------------------------- client calls

Call = Callable[[np.ndarray], Awaitable[tuple[np.ndarray, np.ndarray]]]


def _input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return tensor


def _outputs(*names: str) -> list[grpcclient.InferRequestedOutput]:
    return [grpcclient.InferRequestedOutput(n) for n in names]


def make_calls(client: grpcclient.InferenceServerClient, timeout: float) -> dict[str, Call]:
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

    async def per_step(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        extracted = await client.infer(
            "extractor", [_input("INPUT_A", x)], outputs=_outputs("FEATS_A"), client_timeout=timeout
        )
        feats = extracted.as_numpy("FEATS_A")
        score_b, score_c = await asyncio.gather(
            head("head_b", "FEATS_IN_B", "OUTPUT_B", feats), head("head_c", "FEATS_IN_C", "OUTPUT_C", feats)
        )
        return score_b, score_c

    return {
        "router": lambda x: model(ROUTER_PIPELINE, x),
        "shared": lambda x: model(SHARED_PIPELINE, x),
        "bls": lambda x: model(BLS_NAME, x),
        "per_step": per_step,
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


async def run_load(call: Call, concurrency: int, n: int, time_cap_s: float, pool: list) -> LoadResult:
    """`concurrency` workers share `n` requests (stopping early at the time cap); each response checked."""

    async def checked(i: int) -> None:
        x, want_b, want_c = pool[i % len(pool)]
        got_b, got_c = await call(x)
        for name, got, want in (("SCORE_B", got_b, want_b), ("SCORE_C", got_c, want_c)):
            if got is None or got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-4):
                raise WrongAnswer(f"x={x.tolist()}: {name}={got!r}, expected {want.tolist()}")

    return await closed_loop(checked, concurrency=concurrency, requests=n, max_seconds=time_cap_s)


# ---------------------------------------------------------------- report


def median_over_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "p50_ms": statistics.median(r["p50_ms"] for r in rounds),
        "p99_ms": statistics.median(r["p99_ms"] for r in rounds),
        "throughput_rps": statistics.median(r["throughput_rps"] for r in rounds),
        "errors": sum(r["errors"] for r in rounds),
        "requests": sum(r["requests"] for r in rounds),
    }


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
        ens = {v: p50(v, c) for v in ("router", "shared")}
        rest = {v: p50(v, c) for v in ("bls", "per_step")}
        checks.append(
            {
                "name": f"ensembles_beat_bls_and_per_step_c{c}",
                "description": f"router and shared p50 lower than bls and per_step p50 at concurrency {c}",
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


def print_table(results: dict[str, dict[str, dict[str, Any]]]) -> None:
    cols = ("variant", "conc", "p50 ms", "p99 ms", "req/s", "p50/shared", "errors")
    widths = (4, 8, 8, 8, 10, 6)
    head = f"{cols[0]:<10} " + " ".join(f"{c:>{w}}" for c, w in zip(cols[1:], widths, strict=True))
    print(head)
    print("-" * len(head))
    for c in CONCURRENCIES:
        for v in VARIANTS:
            r = results[v][str(c)]
            print(
                f"{v:<10} {c:>4} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} {r['throughput_rps']:>8.1f} "
                f"{r['ratio_p50_vs_shared']:>10.2f} {r['errors']:>6}"
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
        "tritonserver_version": server_meta.version,
        "tritonserver_name": server_meta.name,
        "nvidia_pytriton": metadata.version("nvidia-pytriton"),
        "tritonclient": metadata.version("tritonclient"),
    }


# ---------------------------------------------------------------- main


async def bench(server: LocalTriton, mode: Mode) -> dict[str, Any]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        meta = await client.get_server_metadata()
        for name in (ROUTER_PIPELINE, SHARED_PIPELINE, BLS_NAME, "extractor", "head_b", "head_c"):
            if not await client.is_model_ready(name):
                raise TritonError(f"model {name!r} is not ready:\n{server.log_tail()}")
        calls = make_calls(client, mode.client_timeout_s)
        pool = input_pool()
        per_round: dict[str, dict[str, list[dict[str, Any]]]] = {
            v: {str(c): [] for c in CONCURRENCIES} for v in VARIANTS
        }
        warmup_errors = 0
        samples: list[str] = []
        for rnd in range(mode.rounds):
            order = VARIANTS[rnd % len(VARIANTS) :] + VARIANTS[: rnd % len(VARIANTS)]
            for c in CONCURRENCIES:
                for v in order:
                    warm = await run_load(calls[v], c, mode.warmup, mode.time_cap_s, pool)
                    warmup_errors += warm.errors
                    run = await run_load(calls[v], c, mode.requests[c], mode.time_cap_s, pool)
                    samples += [f"{v} c={c}: {s}" for s in warm.error_samples + run.error_samples]
                    s = summary(run)
                    per_round[v][str(c)].append(s)
                    print(
                        f"  round {rnd + 1}/{mode.rounds} c={c:<2} {v:<8} n={s['requests']:<5} "
                        f"p50 {s['p50_ms']:7.3f} ms  p99 {s['p99_ms']:7.3f} ms  "
                        f"{s['throughput_rps']:8.1f} req/s"
                        f"  errors {s['errors'] + warm.errors}",
                        flush=True,
                    )
    finally:
        await client.close()

    results: dict[str, dict[str, dict[str, Any]]] = {}
    for v in VARIANTS:
        results[v] = {}
        for c in CONCURRENCIES:
            results[v][str(c)] = {**median_over_rounds(per_round[v][str(c)]), "rounds": per_round[v][str(c)]}
    for c in CONCURRENCIES:
        base = results["shared"][str(c)]["p50_ms"]
        for v in VARIANTS:
            results[v][str(c)]["ratio_p50_vs_shared"] = results[v][str(c)]["p50_ms"] / base
    total_errors = warmup_errors + sum(results[v][str(c)]["errors"] for v in VARIANTS for c in CONCURRENCIES)
    return {
        "machine": machine_info(meta),
        "results": results,
        "warmup_errors": warmup_errors,
        "total_errors": total_errors,
        "error_samples": samples[:20],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests, one round (smoke run)")
    parser.add_argument("--out", type=Path, help="JSON output (default bench/results/dataplane[-quick].json)")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    out = args.out or RESULTS / ("dataplane-quick.json" if args.quick else "dataplane.json")

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="tp-bench-dataplane-"))
    try:
        repo_info = build_repository(work / "repo")
        print(f"repository: {work / 'repo'} ({', '.join(sorted(p.name for p in (work / 'repo').iterdir()))})")
        server = LocalTriton(work / "repo", extra_args=["--exit-timeout-secs=5"])
        t0 = time.perf_counter()
        with server:
            startup_s = time.perf_counter() - t0
            print(f"tritonserver ready in {startup_s:.1f}s; grpc {server.grpc_url}", flush=True)
            report = asyncio.run(bench(server, mode))
        log = server.logs()
        error_lines = [ln for ln in log.splitlines() if ln[:1] == "E" and ln[1:5].isdigit()]
    except TritonError as exc:
        print(f"tritonserver failed: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(work, ignore_errors=True)
    runtime = time.perf_counter() - started

    results = report["results"]
    checks = target_checks(results, report["total_errors"])
    payload = {
        "benchmark": "dataplane",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": report["machine"],
        "config": {
            "example": str(EXAMPLE.relative_to(ROOT)),
            "dropped_output": DROPPED_OUTPUT,
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
            "statistic": "median over rounds of each round's p50 / p99 / throughput",
            **repo_info,
        },
        "results": results,
        "targets": checks,
        "errors": {
            "total": report["total_errors"],
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
    print_table(results)
    print()
    for check in checks:
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
    print(f"\nruntime {runtime:.1f}s; wrote {out}")
    return 1 if report["total_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
