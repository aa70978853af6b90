"""The GPU check (make gpu-check): tritonpipeline's GPU paths on a real NVIDIA GPU, written to
bench/results/gpu.json.

Needs the bundle of bench/gpu/pack.py (.gpu/) and, on the GPU host, only a Python with PyTorch and numpy
(a CUDA + PyTorch image); no network. What it does, all through the product's own `tritonpipeline serve`:

1. bench/gpu/pipeline.yaml served with no --gpu/--cpu flag (GPU instance groups must be kept because a
   GPU is present), once with each router (--router python, --router native: the bundle's native
   router, as the operator image carries it): the router of gpu_router must run as a KIND_GPU instance,
   its consumers refuse host tensors, outputs are checked numerically for router, shared and the CPU
   control; interleaved sequences through the GPU sequence-batched accumulator are checked chunk by chunk.
2. Device-to-host copies per request on each path, counted by CUPTI (memcpy_counter.c, injected into
   tritonserver and every Python-backend stub with CUDA_INJECTION64_PATH). The control pipeline, whose
   consumer is a CPU instance, must show the 1 MiB copy, or the counter proves nothing.
3. Router vs shared fan-out, p50/p99/throughput at concurrency 1 and 16, for both routers side by side:
   two servers (Python routers, native routers) up at once, rounds interleaved over the four paths, no
   counter; medians over rounds.
4. nv_gpu_utilization and GPU memory from /metrics under load and idle; the raw scrapes go to
   bench/results/gpu-metrics.prom, where tests/component/test_gpu_metrics.py evaluates the autoscaling query
   for gpuUtilization with the real Prometheus.
5. `serve examples/fanout.yaml` with no flag on the GPU host keeps GPU instance groups and answers.
6. The conditional pipeline gpu_conditional (`when:` on a per-request BRANCH input: an orchestrator, a
   head ensemble making FEATS on the GPU, an ensemble per branch): each branch and a mixed concurrent
   batch checked numerically; host<->device copies per request counted beside the plain ensemble of the
   branch taken (gpu_branch0, gpu_branch1), where the condition must add no copy of FEATS; p50 of the
   conditional pipeline over that ensemble's at concurrency 1 and 16. On each router backend, and where
   the native one runs, once more with gpu_conditional `speculative: true` (both branches on the GPU for
   every request, the switch keeping the one taken).

Without a GPU it checks everything up to the point that needs one (the bundle unpacks, the packed
tritonserver serves examples/fanout.yaml on the CPU, the GPU pipeline compiles) and exits 2, saying so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / ".gpu"
RESULTS = ROOT / "bench" / "results"
PIPELINE = ROOT / "bench" / "gpu" / "pipeline.yaml"
FANOUT = ROOT / "examples" / "fanout.yaml"
ROWS = 65536  # gpu_producer's FEATS rows: 4 floats each, 1 MiB a request row
FEATS_BYTES = ROWS * 4 * 4
EXIT_NO_GPU = 2
ROUTERS = ("python", "native")  # what the routers run on, each checked and measured
# the parts of the check (--sections): correctness and copies per router (1, 2), latency and metrics
# (3, 4), the fan-out example with no flag (5), the conditional pipeline (6)
SECTIONS = ("correctness", "latency", "example", "conditional")
FANOUT_PIPELINES = {
    "gpu_router": ("SUMS_B", "SUMS_C"),
    "gpu_shared": ("SUMS_B", "SUMS_C"),
    "gpu_control": ("SUMS",),
}
# section 6: gpu_conditional takes branch 0 (gpu_head: SUMS) or branch 1 (gpu_head -> gpu_scale: 2 * SUMS)
# by its BRANCH input; BRANCH_ENSEMBLES[b] is branch b's plain ensemble, the same steps with no condition
CONDITIONAL = "gpu_conditional"
BRANCH_ENSEMBLES = ("gpu_branch0", "gpu_branch1")
# the ensembles the compiler makes of its unconditional steps and of each branch
HEAD_PART, BRANCH_PARTS = "gpu_conditional__head", ("gpu_conditional__when0", "gpu_conditional__when1")
BRANCH_FACTOR = (1.0, 2.0)  # SUMS of branch b over expected_sums
MIXED = (0, 1, 1, 0, 1, 0, 0, 1)  # request i of the mixed batch takes MIXED[i % 8]
COPY_KINDS = ("HtoD", "DtoH")  # the copies between host and device (the counter names them so)
# section 6's third form where the native router runs: gpu_conditional `speculative: true`, both branches on
# the GPU beside the head for every request, the switch keeping the one taken (docs/concepts/conditions.md)
SPECULATIVE = "speculative"


def conditional_forms(routers: Any) -> tuple[str, ...]:
    """What section 6 serves gpu_conditional on: each router backend, and speculative beside native."""
    return (*routers, *((SPECULATIVE,) if "native" in routers else ()))


def conditional_served(form: str, work: Path) -> tuple[Path, str]:
    """(pipeline file, --router) of one form of section 6: the speculative form is bench/gpu/pipeline.yaml
    with gpu_conditional speculative, written into `work` (its model repository named absolutely)."""
    if form != SPECULATIVE:
        return PIPELINE, form
    import yaml

    docs = list(yaml.safe_load_all(PIPELINE.read_text()))
    for doc in docs:
        repository = doc["spec"]["modelRepository"]
        repository["uri"] = str((PIPELINE.parent / repository["uri"]).resolve())
        for pipeline in doc["spec"]["pipelines"]:
            if pipeline["name"] == CONDITIONAL:
                pipeline["speculative"] = True
    out = work / "pipeline-speculative.yaml"
    out.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return out, "native"


def log(message: str) -> None:
    print(f">> {message}", flush=True)


# --------------------------------------------------------------------------- set-up from the bundle


def pip_install(target: Path, wheels: list[str]) -> None:
    """Install wheels into `target` with no index and no dependency resolution (no network there)."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile"]
    subprocess.run([*cmd, "--disable-pip-version-check", "--target", str(target), *wheels], check=True)


def prepare(work: Path) -> dict[str, Any]:
    """Unpack the tritonserver tree, choose the stub for this Python, put the wheels and the package on
    the path (this process and its children: serve, tritonserver's stubs)."""
    manifest = json.loads((BUNDLE / "manifest.json").read_text())
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    with tarfile.open(BUNDLE / "tritonserver.tar.xz") as tar:
        tar.extractall(work)
    home = work / "tritonserver"
    stub = home / "python_backend_stubs" / py / "triton_python_backend_stub"
    if not stub.exists():
        raise SystemExit(
            f"gpu-check: the bundle has no Python-backend stub for Python {py}; re-pack with "
            f"`make gpu-pack GPU_PYTHON={py}`"
        )
    shutil.copy2(stub, home / "backends" / "python" / "triton_python_backend_stub")
    paths = [str(ROOT / "operator"), str(ROOT)]  # tritonpipeline, and the harness (load)
    if manifest["python_version"] == py:
        site = work / "site"
        wheels = sorted(str(p) for p in (BUNDLE / "wheels").glob("*.whl"))
        pip_install(site, wheels)
        paths.append(str(site))
    sys.path[:0] = paths
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    os.environ["TRITONPIPELINE_SERVER_HOME"] = str(home)
    from tritonpipeline.local.tritonserver import server_env

    for binary in (
        home / "bin" / "tritonserver",
        home / "backends" / "python" / "triton_python_backend_stub",
    ):
        ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, env=server_env(home))
        missing = [line.strip() for line in ldd.stdout.splitlines() if "not found" in line]
        if missing:
            log(f"WARNING: {binary.name} cannot load: {'; '.join(missing)}")
    from tritonpipeline.compiler.plan_types import NATIVE_ROUTER_LIBRARY
    from tritonpipeline.local.native_router import INSTALLED_ENV

    native = BUNDLE / "native-router" / NATIVE_ROUTER_LIBRARY
    if native.exists():  # serve's native routers take it, as the operator image's init container does
        shutil.copytree(native.parent, work / "native-router")
        os.environ[INSTALLED_ENV] = str(work / "native-router" / NATIVE_ROUTER_LIBRARY)
    counter = None
    if (BUNDLE / "cupti" / "libtp_memcpy.so").exists():
        counter = work / "cupti" / "libtp_memcpy.so"
        shutil.copytree(BUNDLE / "cupti", work / "cupti")
        with tarfile.open(work / "cupti" / "libcupti.tar.xz") as tar:
            tar.extractall(work / "cupti")
    return {"home": home, "counter": counter, "manifest": manifest}


STUB_ENV = "TP_GPU_CHECK_NUMPY1"
TEMP_ENV = "TP_GPU_CHECK_TEMP"


def numpy_1(work: Path) -> None:
    """Re-run this check in a venv whose numpy is the bundle's numpy<2, over this interpreter's other
    packages (PyTorch): Triton 2.51's Python-backend stub returns numpy 2 arrays as empty tensors, and
    the stub imports the numpy of the first Python on PATH, whatever PYTHONPATH says."""
    import importlib.metadata

    if os.environ.get(STUB_ENV) or int(importlib.metadata.version("numpy").split(".")[0]) < 2:
        return
    wheel = next((BUNDLE / "wheels").glob("numpy-1.*.whl"), None)
    if wheel is None:
        log("WARNING: numpy 2 here and no numpy<2 wheel in the bundle: numpy-output models will fail")
        return
    venv = work / "numpy1-venv"
    log(f"numpy {importlib.metadata.version('numpy')} here: re-running in {venv} with {wheel.name}")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    pip_install(site, [str(wheel)])
    here = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "host-packages.pth").write_text("\n".join(here) + "\n")
    python = venv / "bin" / "python3"
    os.execve(python, [str(python), __file__, *sys.argv[1:]], {**os.environ, STUB_ENV: str(venv)})


def gpu_facts() -> dict[str, Any] | None:
    """The GPU as nvidia-smi and PyTorch see it, or None when there is none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    query = "name,driver_version,memory.total,pci.bus_id"
    out = subprocess.run(
        [smi, f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True
    )
    if out.returncode != 0 or not out.stdout.strip():
        return None
    name, driver, memory, bus = (s.strip() for s in out.stdout.strip().splitlines()[0].split(","))
    facts: dict[str, Any] = {"name": name, "driver": driver, "memory": memory, "pci_bus_id": bus}
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["torch_cuda"] = torch.version.cuda
    except ImportError:
        facts["torch"] = None
    return facts


# --------------------------------------------------------------------------- serve as a subprocess


class Serve:
    """`tritonpipeline serve FILE` in a subprocess; ready once it prints `serving;`."""

    def __init__(self, file: Path, log_path: Path, *, flags: list[str], env: dict[str, str] | None = None):
        from tritonpipeline.local.tritonserver import free_ports

        self.ports = dict(zip(("http", "grpc", "metrics"), free_ports(3), strict=True))
        self.lines: list[str] = []
        cmd = [sys.executable, "-m", "tritonpipeline.cli", "serve", str(file), *flags, "--timeout", "600"]
        cmd += [f"--{k}-port={v}" for k, v in self.ports.items()]
        self.log_path = log_path
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log_path, "a") as out:
            for line in self.proc.stdout:
                self.lines.append(line.rstrip())
                out.write(line)
                out.flush()
                if line.startswith("serving;"):
                    self.ready.set()

    def wait(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(self.lines[-40:])
                raise RuntimeError(f"serve did not become ready (exit {self.proc.poll()}):\n{tail}")

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.ports['grpc']}"

    def admin_headers(self) -> dict[str, str]:
        """The administrative APIs' key, from the file whose path `serve` printed."""
        from tritonpipeline.triton import security

        line = next(line for line in self.lines if "need the key in " in line)
        path = line.split("need the key in ", 1)[1].split(" (mode", 1)[0]
        return security.headers(security.read_key(path))

    def http_json(self, path: str) -> Any:
        url = f"http://127.0.0.1:{self.ports['http']}{path}"
        request = urllib.request.Request(url, headers=self.admin_headers())
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.loads(r.read())

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['metrics']}/metrics", timeout=10) as r:
            return r.read().decode()

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


# --------------------------------------------------------------------------- requests and checks


def expected_sums(seed: Any) -> Any:
    import numpy as np

    w = np.linspace(1.0, 2.0, ROWS, dtype=np.float32).astype(np.float64)
    return (seed.astype(np.float64) * w.sum()).astype(np.float32)


def fanout_call(client: Any, model: str, seeds: Any, outputs: tuple[str, ...]) -> Callable[[int], Any]:
    import numpy as np

    from harness.load import WrongAnswer

    async def call(i: int) -> None:
        seed = seeds[i % len(seeds)]
        result = await client.infer(model, [client.input("SEED", seed)])
        want = expected_sums(seed)
        for name in outputs:
            got = result.as_numpy(name)
            if got is None or not np.allclose(got, want, rtol=2e-4):
                raise WrongAnswer(
                    f"{model}.{name} = {None if got is None else got.tolist()}, expected {want.tolist()}"
                )

    return call


def branch_rows(branch: int, rows: int) -> Any:
    """A request's BRANCH input: one INT32 per batch item, all the same (a condition is per request)."""
    import numpy as np

    return np.full((rows, 1), branch, dtype=np.int32)


def expected_branch(seed: Any, branch: int) -> Any:
    """gpu_conditional's (and branch `branch`'s ensemble's) SUMS for a seed."""
    sums = expected_sums(seed)
    return (sums * BRANCH_FACTOR[branch]).astype(sums.dtype)


def conditional_call(client: Any, model: str, seeds: Any, branches: tuple[int, ...]) -> Callable[[int], Any]:
    """Request i: seed i through `model`, taking branch branches[i % len(branches)]: gpu_conditional is
    given it as BRANCH, a branch's plain ensemble is that branch. SUMS is checked."""
    import numpy as np

    from harness.load import WrongAnswer

    async def call(i: int) -> None:
        seed = seeds[i % len(seeds)]
        branch = branches[i % len(branches)]
        inputs = [client.input("SEED", seed)]
        if model == CONDITIONAL:
            inputs.append(client.input("BRANCH", branch_rows(branch, len(seed))))
        result = await client.infer(model, inputs)
        got, want = result.as_numpy("SUMS"), expected_branch(seed, branch)
        if got is None or not np.allclose(got, want, rtol=2e-4):
            raise WrongAnswer(
                f"{model} (branch {branch}).SUMS = {None if got is None else got.tolist()}, "
                f"expected {want.tolist()}"
            )

    return call


async def check_conditional(client: Any, get: Callable[[str], Any], seeds: Any) -> dict[str, Any]:
    """gpu_conditional: each branch with requests of 1, 2, 4 and 8 rows one by one, then a mixed batch
    (MIXED) at concurrency 16, whose requests the orchestrator joins per branch (Triton's statistics of
    the orchestrator and the branches' ensembles around it show how); every failure recorded, never
    raised."""
    import numpy as np

    from harness import triton_stats
    from harness.load import closed_loop

    batches: dict[str, str] = {}
    for branch in (0, 1):
        for b in (1, 2, 4, 8):
            x = np.random.default_rng(10 * branch + b).normal(size=(b, 4)).astype(np.float32)
            try:
                r = await client.infer(
                    CONDITIONAL, [client.input("SEED", x), client.input("BRANCH", branch_rows(branch, b))]
                )
                got = r.as_numpy("SUMS")
                right = got is not None and np.allclose(got, expected_branch(x, branch), rtol=2e-4)
                batches[f"branch{branch}/rows{b}"] = (
                    "right" if right else f"wrong: {None if got is None else got.tolist()}"
                )
            except Exception as exc:
                batches[f"branch{branch}/rows{b}"] = f"{type(exc).__name__}: {exc}"[:300]
    models = [CONDITIONAL, *BRANCH_PARTS]
    before = triton_stats.snapshot(get, models)
    res = await closed_loop(conditional_call(client, CONDITIONAL, seeds, MIXED), concurrency=16, requests=256)
    after = triton_stats.snapshot(get, models)
    return {
        "batches": batches,
        "both_branches_right": all(v == "right" for v in batches.values()),
        "mixed": {
            "requests": res.requests,
            "errors": res.errors,
            "error_samples": list(res.error_samples),
            "step_us": triton_stats.per_request(after, before),
        },
    }


def added_by_condition(copies: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Bytes a request copies between host and device on the conditional path beyond the plain ensemble
    of the branch it takes, per copy kind (COPY_KINDS): per branch, and for the mixed batch beyond the
    mean of the two ensembles (half its requests take each branch)."""
    per = {label: c["bytes_per_request"] for label, c in copies.items()}
    out: dict[str, dict[str, float]] = {}
    for kind in COPY_KINDS:
        ensembles = [per[f"ensemble_branch{b}"].get(kind, 0.0) for b in (0, 1)]
        for b in (0, 1):
            out.setdefault(f"branch{b}", {})[kind] = (
                per[f"conditional_branch{b}"].get(kind, 0.0) - ensembles[b]
            )
        out.setdefault("mixed", {})[kind] = per["conditional_mixed"].get(kind, 0.0) - sum(ensembles) / 2
    return out


def conditional_paths() -> dict[str, tuple[str, tuple[int, ...]]]:
    """What section 6 counts copies on, by label: (model called, the branches its requests take)."""
    return {
        "conditional_branch0": (CONDITIONAL, (0,)),
        "ensemble_branch0": (BRANCH_ENSEMBLES[0], (0,)),
        "conditional_branch1": (CONDITIONAL, (1,)),
        "ensemble_branch1": (BRANCH_ENSEMBLES[1], (1,)),
        "conditional_mixed": (CONDITIONAL, MIXED),
    }


async def check_stream(client: Any, sequences: int, chunks: int) -> dict[str, Any]:
    """Interleaved sequences through gpu_stream: TOTAL after chunk k is 2 * the sum of chunks 0..k."""
    import numpy as np

    rng = np.random.default_rng(7)
    data = rng.integers(-50, 50, size=(sequences, chunks, 1, 4)).astype(np.float32)
    wrong: list[str] = []

    async def one(s: int) -> None:
        total = np.zeros((1, 4), dtype=np.float32)
        for k in range(chunks):
            total = total + 2 * data[s, k]
            result = await client.infer(
                "gpu_stream",
                [client.input("CHUNK", data[s, k])],
                sequence_id=1000 + s,
                sequence_start=k == 0,
                sequence_end=k == chunks - 1,
            )
            got = result.as_numpy("TOTAL")
            if not np.allclose(got, total):
                wrong.append(f"sequence {s} chunk {k}: {got.tolist()} expected {total.tolist()}")
            await asyncio.sleep(float(rng.random()) * 0.002)  # interleave the sequences

    await asyncio.gather(*(one(s) for s in range(sequences)))
    return {"sequences": sequences, "chunks": chunks, "wrong": len(wrong), "samples": wrong[:5]}


async def check_fanout(client: Any, model: str, outs: tuple[str, ...], seeds: Any) -> dict[str, Any]:
    """Batches of 1, 2, 4 and 8 one by one (each output's shape and numbers), then 64 requests at
    concurrency 4; every failure is recorded, never raised."""
    import numpy as np

    from harness.load import closed_loop

    batches: dict[str, str] = {}
    for b in (1, 2, 4, 8):
        x = np.random.default_rng(b).normal(size=(b, 4)).astype(np.float32)
        try:
            response = await client.infer(model, [client.input("SEED", x)])
            raw = response.get_response()
            got = {
                o: response.as_numpy(o) if len(raw.raw_output_contents) == len(raw.outputs) else None
                for o in outs
            }
            bad = [o for o, v in got.items() if v is None or not np.allclose(v, expected_sums(x), rtol=2e-4)]
            batches[str(b)] = (
                "right"
                if not bad
                else (
                    f"wrong {bad}: outputs {[(o.name, list(o.shape)) for o in raw.outputs]}, "
                    f"{len(raw.raw_output_contents)} raw contents"
                )
            )
        except Exception as exc:
            batches[str(b)] = f"{type(exc).__name__}: {exc}"[:300]
    res = await closed_loop(fanout_call(client, model, seeds, outs), concurrency=4, requests=64)
    return {
        "batches": batches,
        "requests": res.requests,
        "errors": res.errors,
        "error_samples": list(res.error_samples),
        "batch8_correct": batches["8"] == "right",
    }


def instance_kinds(server: Serve, model: str) -> list[str]:
    return [
        g.get("kind", "") for g in server.http_json(f"/v2/models/{model}/config").get("instance_group", [])
    ]


# --------------------------------------------------------------------------- the copy counter


def read_counters(directory: Path) -> dict[str, dict[str, int]]:
    """{process label: {copy kind: bytes}} summed over the counter files; a stub is labelled by its
    model (the model directory in its command line), tritonserver as 'tritonserver'."""
    totals: dict[str, dict[str, int]] = {}
    for path in directory.glob("*.txt"):
        lines = path.read_text().splitlines()
        if not lines:
            continue
        cmdline = lines[0].removeprefix("cmdline ")
        match = re.search(r"/repository/([^/ ]+)/\d+/model\.py", cmdline)
        label = match.group(1) if match else ("tritonserver" if "tritonserver" in cmdline else cmdline[:60])
        for line in lines[1:]:
            kind, nbytes, _copies = line.split()
            totals.setdefault(label, {}).setdefault(kind, 0)
            totals[label][kind] += int(nbytes)
    return totals


def delta(after: dict[str, dict[str, int]], before: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for label, kinds in after.items():
        for kind, value in kinds.items():
            d = value - before.get(label, {}).get(kind, 0)
            if d:
                out.setdefault(label, {})[kind] = d
    return out


def by_kind(counts: dict[str, dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for kinds in counts.values():
        for kind, value in kinds.items():
            out[kind] = out.get(kind, 0) + value
    return out


def counting(env: dict[str, Any], directory: Path) -> dict[str, str]:
    """The environment that injects the copy counter (the bundle's, where it has one) into tritonserver
    and its stubs, each writing its counts under `directory` (made here)."""
    directory.mkdir()
    if env["counter"] is None:
        return {}
    return {"CUDA_INJECTION64_PATH": str(env["counter"]), "TP_MEMCPY_DIR": str(directory)}


async def counted(directory: Path, call: Callable[[int], Any], requests: int) -> dict[str, Any]:
    from harness.load import closed_loop

    await asyncio.sleep(0.6)  # the counter flushes every 200 ms
    before = read_counters(directory)
    result = await closed_loop(call, concurrency=4, requests=requests)
    await asyncio.sleep(0.8)
    d = delta(read_counters(directory), before)
    kinds = by_kind(d)
    return {
        "requests": result.requests,
        "errors": result.errors,
        "error_samples": list(result.error_samples),
        "bytes_per_request": {k: round(v / max(1, result.attempted), 1) for k, v in sorted(kinds.items())},
        "by_process": d,
    }


# --------------------------------------------------------------------------- metrics


def gpu_samples(text: str) -> dict[str, float]:
    """The GPU series of one /metrics scrape (first GPU), by metric name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("nv_gpu_") or line.startswith("nv_energy_"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            out.setdefault(name, float(line.rsplit(" ", 1)[1]))
    return out


# --------------------------------------------------------------------------- the run


def router_line(server: Serve) -> str:
    """serve's `router NAME (backend): SOURCE -> CONSUMERS` line for the pipeline's one router."""
    return next(line.strip() for line in server.lines if line.strip().startswith("router "))


def router_name(server: Serve) -> str:
    return router_line(server).split()[1]


Route = tuple[str, str]  # a measured path: (server or branch label, model called)


async def interleaved(
    calls: dict[Route, Callable[[int], Any]],
    stats: dict[Route, tuple[Callable[[str], Any], list[str]]],
    rounds: int,
    requests: dict[int, int],
) -> dict[Route, dict[str, dict[str, Any]]]:
    """Each path's `call` at each concurrency every round, the paths in alternating order after a
    warm-up; Triton's statistics of its models (`stats`: the server's GET and the models) read around
    each run. Per path and concurrency: the medians over rounds, and each round."""
    import numpy as np

    from harness import triton_stats
    from harness.load import closed_loop

    paths = list(calls)
    runs: dict[Route, dict[int, list[dict[str, Any]]]] = {p: {} for p in paths}
    for call in calls.values():
        await closed_loop(call, concurrency=8, requests=200)  # warm-up
    for r in range(rounds):
        order = paths if r % 2 == 0 else list(reversed(paths))
        for c, n in requests.items():
            for path in order:
                get, models = stats[path]
                before = triton_stats.snapshot(get, models)
                res = await closed_loop(calls[path], concurrency=c, requests=n, max_seconds=60)
                after = triton_stats.snapshot(get, models)
                runs[path].setdefault(c, []).append(
                    {
                        "p50_ms": res.p50,
                        "p99_ms": res.p99,
                        "rps": res.throughput,
                        "errors": res.errors,
                        "error_samples": list(res.error_samples),
                        "step_us": triton_stats.per_request(after, before),
                    }
                )
                for sample in res.error_samples[:2]:
                    log(f"  error on {path[0]} {path[1]} c={c}: {sample[:400]}")
                log(
                    f"round {r + 1}/{rounds} {path[0]} {path[1]} c={c}: p50 {res.p50:.3f} ms "
                    f"p99 {res.p99:.3f} ms {res.throughput:.0f} req/s errors {res.errors}"
                )
    return {
        path: {
            str(c): {
                "p50_ms": float(np.median([x["p50_ms"] for x in xs])),
                "p99_ms": float(np.median([x["p99_ms"] for x in xs])),
                "rps": float(np.median([x["rps"] for x in xs])),
                "errors": int(sum(x["errors"] for x in xs)),
                "step_us": triton_stats.median([x["step_us"] for x in xs]),
                "rounds": xs,
            }
            for c, xs in per_c.items()
        }
        for path, per_c in runs.items()
    }


async def bench(servers: dict[str, Serve], rounds: int, requests: dict[int, int]) -> dict[str, Any]:
    """Router vs shared for each router backend, side by side: each round runs the four paths (two per
    server) at each concurrency, in alternating order; medians over rounds."""
    import contextlib

    import numpy as np

    from tritonpipeline.client import AsyncTritonClient

    seeds = np.random.default_rng(1).normal(size=(64, 1, 4)).astype(np.float32)
    paths = [(b, m) for b in servers for m in ("gpu_router", "gpu_shared")]
    # where each path's time goes: Triton's statistics of the ensemble and its steps, read around each run
    stats = {
        (b, m): (
            servers[b].http_json,
            [m, *([router_name(servers[b])] if m == "gpu_router" else []), "gpu_producer", "gpu_head"],
        )
        for b, m in paths
    }
    async with contextlib.AsyncExitStack() as stack:
        clients = {
            b: await stack.enter_async_context(AsyncTritonClient(s.grpc, protocol="grpc"))
            for b, s in servers.items()
        }
        calls = {(b, m): fanout_call(clients[b], m, seeds, ("SUMS_B", "SUMS_C")) for b, m in paths}
        runs = await interleaved(calls, stats, rounds, requests)
    summary: dict[str, Any] = {b: {} for b in servers}
    for (b, model), per_c in runs.items():
        summary[b][model] = per_c
    summary["ratio_router_over_shared_p50"] = {
        b: {
            str(c): summary[b]["gpu_router"][str(c)]["p50_ms"] / summary[b]["gpu_shared"][str(c)]["p50_ms"]
            for c in requests
        }
        for b in servers
    }
    if {"native", "python"} <= set(servers):
        summary["ratio_native_over_python_router_p50"] = {
            str(c): summary["native"]["gpu_router"][str(c)]["p50_ms"]
            / summary["python"]["gpu_router"][str(c)]["p50_ms"]
            for c in requests
        }
    return summary


async def bench_conditional(server: Serve, rounds: int, requests: dict[int, int]) -> dict[str, Any]:
    """gpu_conditional taking each branch beside that branch's plain ensemble, the four paths interleaved
    (interleaved); p50 ratio conditional/ensemble per branch and concurrency."""
    import numpy as np

    from tritonpipeline.client import AsyncTritonClient

    seeds = np.random.default_rng(3).normal(size=(64, 1, 4)).astype(np.float32)
    paths = {
        (f"branch{b}", model): (model, (b,)) for b in (0, 1) for model in (CONDITIONAL, BRANCH_ENSEMBLES[b])
    }
    steps = ["gpu_producer", "gpu_head", "gpu_scale"]
    stats = {
        (label, model): (
            server.http_json,
            [model, *([HEAD_PART, BRANCH_PARTS[int(label[-1])]] if model == CONDITIONAL else []), *steps],
        )
        for label, model in paths
    }
    async with AsyncTritonClient(server.grpc, protocol="grpc") as client:
        calls = {
            p: conditional_call(client, model, seeds, branches) for p, (model, branches) in paths.items()
        }
        runs = await interleaved(calls, stats, rounds, requests)
    summary: dict[str, Any] = {f"branch{b}": {} for b in (0, 1)}
    for (label, model), per_c in runs.items():
        summary[label][model] = per_c
    summary["ratio_conditional_over_branch_p50"] = {
        f"branch{b}": {
            str(c): summary[f"branch{b}"][CONDITIONAL][str(c)]["p50_ms"]
            / summary[f"branch{b}"][BRANCH_ENSEMBLES[b]][str(c)]["p50_ms"]
            for c in requests
        }
        for b in (0, 1)
    }
    return summary


async def metrics_under_load(server: Serve, seconds: float, out: Path) -> dict[str, Any]:
    """Scrape /metrics idle, then every second under concurrency-16 load on gpu_router; keep the text."""
    import numpy as np

    from harness.load import closed_loop
    from tritonpipeline.client import AsyncTritonClient

    await asyncio.sleep(5.0)  # Triton samples GPU utilization over the last second or so
    scrapes: list[tuple[float, str, str]] = [(time.time(), "idle", server.metrics())]
    seeds = np.random.default_rng(2).normal(size=(64, 1, 4)).astype(np.float32)
    async with AsyncTritonClient(server.grpc, protocol="grpc") as client:
        load = asyncio.create_task(
            closed_loop(
                fanout_call(client, "gpu_router", seeds, ("SUMS_B",)),
                concurrency=16,
                requests=10**7,
                max_seconds=seconds,
            )
        )
        while not load.done():
            await asyncio.sleep(1.0)
            scrapes.append((time.time(), "load", await asyncio.to_thread(server.metrics)))
        result = await load
    await asyncio.sleep(6.0)
    scrapes.append((time.time(), "idle", await asyncio.to_thread(server.metrics)))
    with out.open("w") as f:
        for at, phase, text in scrapes:
            f.write(f"# SCRAPE {at:.3f} {phase}\n{text}")
    samples = [(phase, gpu_samples(text)) for _, phase, text in scrapes]
    util = [s.get("nv_gpu_utilization") for phase, s in samples if phase == "load"]
    util = [u for u in util if u is not None]
    return {
        "load_requests": result.requests,
        "load_errors": result.errors,
        "scrapes": len(scrapes),
        "gpu_series": sorted({k for _, s in samples for k in s}),
        "idle": samples[0][1],
        "idle_after_load": samples[-1][1],
        "under_load_last": samples[-2][1] if len(samples) > 2 else {},
        "nv_gpu_utilization_under_load": {
            "max": max(util, default=None),
            "median": float(np.median(util)) if util else None,
        },
        "autoscaling_query_value_from_text": 100 * float(np.median(util)) if util else None,
    }


async def main_gpu(env: dict[str, Any], work: Path, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from tritonpipeline.client import AsyncTritonClient
    from tritonpipeline.render import autoscaling_objects
    from tritonpipeline.spec import load_file

    keep = ["--keep"] if args.work else []  # the rendered repositories and tritonserver logs, to debug
    results: dict[str, Any] = {"checks": {}, "errors": {}}

    def failed(section: str, server: Serve) -> None:
        results["errors"][section] = traceback.format_exc()[-3000:]
        log(
            f"FAILED {section}:\n{results['errors'][section]}\n[serve] "
            + "\n[serve] ".join(server.lines[-20:])
        )

    seeds = np.random.default_rng(0).normal(size=(32, 1, 4)).astype(np.float32)

    # 1 + 2: correctness and the copy counter, on a server with the counter injected, for each router
    if "correctness" in args.sections:
        results["device_to_host"] = {}
        results["serve_exit_code"] = {}
        for backend in args.routers:
            checks = results["checks"].setdefault(backend, {})
            counter_dir = work / f"memcpy-{backend}"
            counter_env = counting(env, counter_dir)
            log(f"serving bench/gpu/pipeline.yaml (no --gpu/--cpu flag, --router {backend}), copies counted")
            server = Serve(
                PIPELINE,
                work / f"serve-counted-{backend}.log",
                flags=["--keep", "--exit-timeout=30", "--router", backend],
                env=counter_env,
            )
            try:
                server.wait()
                results.setdefault("serve_output", {})[backend] = [
                    line for line in server.lines if not line.startswith("  model")
                ][:12]
                router = router_name(server)
                checks["router_line"] = router_line(server)
                kinds = {
                    m: instance_kinds(server, m)
                    for m in (router, "gpu_producer", "gpu_head", "cpu_head", "gpu_accumulator")
                }
                checks["instance_kinds"] = kinds
                checks["no_gpu_message_absent"] = not any("no GPU found" in line for line in server.lines)
                async with AsyncTritonClient(server.grpc, protocol="grpc") as client:
                    for model, outs in FANOUT_PIPELINES.items():
                        checks[f"{model}_outputs"] = await check_fanout(client, model, outs, seeds)
                        log(f"{backend}: {model}: {checks[f'{model}_outputs']}")
                    checks["gpu_stream"] = await check_stream(client, args.sequences, args.chunks)
                    log(f"{backend}: gpu_stream: {checks['gpu_stream']}")
                    if env["counter"] is not None:
                        copies = {}
                        for model, outs in FANOUT_PIPELINES.items():
                            call = fanout_call(client, model, seeds, outs)
                            copies[model] = await counted(counter_dir, call, 200)
                            per_request = copies[model]["bytes_per_request"]
                            log(f"{backend}: copies on {model}: {per_request} bytes a request")
                        copies["feats_bytes_per_request"] = FEATS_BYTES
                        copies["processes_counted"] = sorted(read_counters(counter_dir))
                        results["device_to_host"][backend] = copies
            except Exception:
                failed(f"correctness and copies ({backend} router)", server)
            finally:
                results["serve_exit_code"][backend] = server.stop()

    # 3 + 4: latency and metrics, without the counter: a server per router, both up at once
    if "latency" in args.sections:
        log(
            "serving bench/gpu/pipeline.yaml twice without the counter (each router): "
            "router vs shared, /metrics"
        )
        servers: dict[str, Serve] = {}
        try:
            for backend in ROUTERS:  # one after the other: each takes its free ports once the last is up
                servers[backend] = Serve(
                    PIPELINE, work / f"serve-bench-{backend}.log", flags=[*keep, "--router", backend]
                )
                servers[backend].wait()
            results["latency"] = await bench(
                servers, args.rounds, {1: args.requests_c1, 16: args.requests_c16}
            )
            results["metrics"] = await metrics_under_load(
                servers[ROUTERS[-1]], args.metrics_seconds, RESULTS / "gpu-metrics.prom"
            )
            tp = load_file(str(PIPELINE))[0]
            results["metrics"]["autoscaling_query"] = autoscaling_objects.pipeline_query(
                tp, "gpuUtilization", namespace="default"
            )
        except Exception:
            for server in servers.values():
                failed("latency and metrics", server)
        finally:
            for server in servers.values():
                server.stop()

    # 5: the product's default on a GPU host, with the plain example
    if "example" in args.sections:
        log("serving examples/fanout.yaml with no flag: GPU instance groups must be kept")
        server = Serve(FANOUT, work / "serve-fanout.log", flags=keep)
        try:
            server.wait()
            x = np.array([[0.0, 1.0, 2.0, 3.0]], dtype=np.float32)
            async with AsyncTritonClient(server.grpc, protocol="grpc") as client:
                r = await client.infer("vision", [client.input("IMAGE", x)])
            feats = 2 * x + 1
            results["checks"]["fanout_example_default"] = {
                "router_lines": [line.strip() for line in server.lines if line.strip().startswith("router ")],
                "no_gpu_message_absent": not any("no GPU found" in line for line in server.lines),
                "extractor_kinds": instance_kinds(server, "extractor"),
                "score_b_correct": bool(np.allclose(r.as_numpy("SCORE_B"), 3 * feats - 2)),
                "score_c_correct": bool(
                    np.allclose(r.as_numpy("SCORE_C"), feats.sum(axis=-1, keepdims=True))
                ),
            }
            log(f"fanout example: {results['checks']['fanout_example_default']}")
        except Exception:
            failed("fanout example", server)
        finally:
            server.stop()

    # 6: the conditional pipeline: right on both branches and mixed, copies beside the branch's ensemble
    # (counted server), then latency beside it (a server without the counter)
    # on each backend: the Python orchestrator, and the native switch in the pipeline's ensemble, waiting
    # for the condition and speculative (conditional_forms)
    for backend in conditional_forms(args.routers) if "conditional" in args.sections else ():
        cond: dict[str, Any] = {}
        results.setdefault("conditional", {})[backend] = cond
        counter_dir = work / f"memcpy-conditional-{backend}"
        served, router = conditional_served(backend, work)
        log(f"serving {served.name} for gpu_conditional (--router {router}, {backend}), copies counted")
        server = Serve(
            served,
            work / f"serve-conditional-counted-{backend}.log",
            flags=["--keep", "--exit-timeout=30", "--router", router],
            env=counting(env, counter_dir),
        )
        try:
            server.wait()
            cond["instance_kinds"] = {
                m: instance_kinds(server, m) for m in (CONDITIONAL, "gpu_producer", "gpu_head", "gpu_scale")
            }
            async with AsyncTritonClient(server.grpc, protocol="grpc") as client:
                cond["outputs"] = await check_conditional(client, server.http_json, seeds)
                log(f"conditional: {cond['outputs']}")
                if env["counter"] is not None:
                    copies = {}
                    for label, (model, branches) in conditional_paths().items():
                        call = conditional_call(client, model, seeds, branches)
                        copies[label] = await counted(counter_dir, call, 200)
                        log(f"conditional: copies on {label}: {copies[label]['bytes_per_request']} a request")
                    control = fanout_call(client, "gpu_control", seeds, FANOUT_PIPELINES["gpu_control"])
                    copies["control"] = await counted(counter_dir, control, 200)
                    cond["copies"] = {
                        **copies,
                        "added_by_condition": added_by_condition(copies),
                        "feats_bytes_per_request": FEATS_BYTES,
                        "processes_counted": sorted(read_counters(counter_dir)),
                    }
                    log(f"conditional: bytes a request added by the condition: {added_by_condition(copies)}")
        except Exception:
            failed(f"conditional ({backend}): correctness and copies", server)
        finally:
            cond["serve_exit_code"] = server.stop()
        log(f"serving {served.name}, no counter (--router {router}, {backend}): the branch's ensemble beside")
        server = Serve(
            served, work / f"serve-conditional-bench-{backend}.log", flags=[*keep, "--router", router]
        )
        try:
            server.wait()
            requests = {1: args.requests_c1, 16: args.requests_c16}
            cond["latency"] = await bench_conditional(server, args.rounds, requests)
        except Exception:
            failed(f"conditional ({backend}): latency", server)
        finally:
            server.stop()
    return results


def verdicts(results: dict[str, Any]) -> dict[str, bool]:
    """Each claim of the sections that ran, true or false; the router's claims once per router backend."""
    feats = FEATS_BYTES
    ran = results.get("sections", SECTIONS)
    out: dict[str, bool] = {}
    if "correctness" in ran:
        for backend in results.get("routers", ROUTERS):
            checks = results["checks"].get(backend, {})
            kinds = checks.get("instance_kinds", {})
            router = next((k for k in kinds if k.endswith("__router")), None)
            on = f"({backend} router)"
            out[f"router runs as a KIND_GPU instance {on}"] = bool(router) and kinds[router] == ["KIND_GPU"]
            out[f"serve ran the routers on the {backend} router"] = f"({backend})" in checks.get(
                "router_line", ""
            )
            for path in ("gpu_router", "gpu_shared"):
                out[f"{path} path: consumers got GPU tensors, outputs right {on}"] = all(
                    checks.get(f"{path}_outputs", {}).get(k) == v
                    for k, v in (("errors", 0), ("batch8_correct", True))
                )
            out[f"CPU control: outputs right {on}"] = checks.get("gpu_control_outputs", {}).get("errors") == 0
            out[f"interleaved GPU sequences all right {on}"] = (
                checks.get("gpu_stream", {}).get("wrong", 1) == 0
            )
            copies = results.get("device_to_host", {}).get(backend)
            if copies:
                dtoh = {m: copies[m]["bytes_per_request"].get("DtoH", 0) for m in FANOUT_PIPELINES}
                out[f"counter sees the control's 1 MiB device-to-host copy {on}"] = (
                    dtoh["gpu_control"] >= feats
                )
                out[f"router path: no FEATS device-to-host copy {on}"] = dtoh["gpu_router"] < feats / 100
                out[f"shared path: no FEATS device-to-host copy {on}"] = dtoh["gpu_shared"] < feats / 100
    if "example" in ran:
        default = results["checks"].get("fanout_example_default", {})
        out["fanout example keeps GPU groups on a GPU host and answers right"] = all(
            default.get(k) for k in ("no_gpu_message_absent", "score_b_correct")
        )
        out["fanout example's default router is the native one"] = any(
            "(native)" in line for line in default.get("router_lines", [])
        )
    ratios = results.get("latency", {}).get("ratio_router_over_shared_p50", {}).get("native", {})
    if ratios:
        out["native router/shared p50 <= 1.05 at c1 and c16"] = all(
            ratios.get(c, 9) <= 1.05 for c in ("1", "16")
        )
    if "conditional" in ran:
        for backend in conditional_forms(results.get("routers", ROUTERS)):
            section = results.get("conditional", {}).get(backend, {})
            out.update(conditional_verdicts(section, f"conditional ({backend})"))
    out["every section ran to the end"] = not results.get("errors")
    metrics = results.get("metrics", {})
    if metrics:
        out["nv_gpu_utilization and GPU memory metrics exported"] = {
            "nv_gpu_utilization",
            "nv_gpu_memory_used_bytes",
            "nv_gpu_memory_total_bytes",
        } <= set(metrics.get("gpu_series", []))
    return out


def conditional_verdicts(cond: dict[str, Any], prefix: str = "conditional") -> dict[str, bool]:
    """Section 6's claims on one backend (`prefix` begins each): the steps on GPU instances, both
    branches and the mixed batch right, the counter seeing the control's copy, and no FEATS copy (1 % of
    it, either way) that the branch's plain ensemble does not make. The latency ratios are recorded, not
    judged."""
    kinds = cond.get("instance_kinds", {})
    outputs = cond.get("outputs", {})
    out = {
        f"{prefix}: its steps run as KIND_GPU instances": bool(kinds)
        and all(kinds.get(m) == ["KIND_GPU"] for m in ("gpu_producer", "gpu_head", "gpu_scale")),
        f"{prefix}: both branches right, 1 to 8 rows": outputs.get("both_branches_right") is True,
        f"{prefix}: a mixed concurrent batch right": outputs.get("mixed", {}).get("errors", 1) == 0,
    }
    copies = cond.get("copies")
    if copies:
        out[f"{prefix}: the counter sees the control's 1 MiB device-to-host copy"] = (
            copies["control"]["bytes_per_request"].get("DtoH", 0) >= FEATS_BYTES
        )
        for label, added in copies["added_by_condition"].items():
            out[f"{prefix}: {label} adds no FEATS copy to its branch's ensemble"] = all(
                added.get(kind, 0) < FEATS_BYTES / 100 for kind in COPY_KINDS
            )
    return out


def no_gpu_checks(work: Path) -> dict[str, Any]:
    """What runs without a GPU: the packed tritonserver serves the fan-out example on the CPU, and the
    GPU pipeline compiles with its GPU instance groups."""
    import numpy as np

    from tritonpipeline.cli import compile_file
    from tritonpipeline.client import TritonClient

    (c,) = compile_file(str(PIPELINE))
    router = c.artifacts.plan.routers[0].name
    config = c.artifacts.files[f"{router}/config.pbtxt"].decode()
    group = "KIND_GPU" if "KIND_GPU" in config else "no GPU group"
    log(f"bench/gpu/pipeline.yaml compiles; router {router} has {group}")
    (orchestrator,) = c.artifacts.plan.orchestrators
    parts = sorted(p.model for p in orchestrator.parts)
    log(f"{CONDITIONAL} compiles to an orchestrator over {parts}")
    log("serving examples/fanout.yaml --cpu on the packed tritonserver")
    server = Serve(FANOUT, work / "serve-cpu.log", flags=["--cpu"])
    try:
        server.wait(300)
        x = np.array([[0.0, 1.0, 2.0, 3.0]], dtype=np.float32)
        with TritonClient(server.grpc, protocol="grpc") as client:
            r = client.infer("vision", [client.input("IMAGE", x)])
        ok = bool(np.allclose(r.as_numpy("SCORE_B"), 3 * (2 * x + 1) - 2))
    finally:
        server.stop()
    log(f"packed tritonserver answered on the CPU: {'right' if ok else 'WRONG'}")
    return {
        "router_kind_gpu": "KIND_GPU" in config,
        "conditional_parts": parts,
        "packed_server_cpu_answer_right": ok,
    }


def some_of(choices: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: a comma-separated choice of `choices`, at least one."""

    def parse(value: str) -> tuple[str, ...]:
        chosen = tuple(v.strip() for v in value.split(",") if v.strip())
        unknown = sorted(set(chosen) - set(choices))
        if not chosen or unknown:
            raise argparse.ArgumentTypeError(f"expected some of {','.join(choices)}, got {value!r}")
        return chosen

    return parse


sections = some_of(SECTIONS)
routers = some_of(ROUTERS)


def main() -> int:
    parser = argparse.ArgumentParser(description="tritonpipeline's GPU check")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests-c1", type=int, default=400)
    parser.add_argument("--requests-c16", type=int, default=3000)
    parser.add_argument("--sequences", type=int, default=24)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--metrics-seconds", type=float, default=15)
    parser.add_argument(
        "--work", type=Path, help="working directory, kept with serve's logs (default: temporary)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "gpu.json")
    parser.add_argument(
        "--sections",
        type=sections,
        default=SECTIONS,
        help=f"which parts to run, comma-separated, of {','.join(SECTIONS)} (default: all): a short rerun "
        "of one part on a lent GPU (write it elsewhere with --out)",
    )
    parser.add_argument(
        "--routers",
        type=routers,
        default=ROUTERS,
        help=f"which routers sections 1, 2 and 6 run on, of {','.join(ROUTERS)} (default: both); the "
        "latency section compares the two and always runs both",
    )
    args = parser.parse_args()
    if not (BUNDLE / "manifest.json").exists():
        print(
            "gpu-check: no bundle in .gpu/: run `make gpu-pack` on a machine with the venv first",
            file=sys.stderr,
        )
        return 1
    # a temporary directory survives numpy_1's re-run: the re-run process removes it
    work = args.work or Path(os.environ.get(TEMP_ENV) or tempfile.mkdtemp(prefix="tp-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.work is None:
        os.environ[TEMP_ENV] = str(work)
    try:
        return run(args, work)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> int:
    began = time.monotonic()
    numpy_1(work)
    env = prepare(work)
    log(f"unpacked the bundle into {work}")
    facts = gpu_facts()
    if facts is None:
        no_gpu_checks(work)
        print(
            "gpu-check: NO GPU PRESENT (nvidia-smi is missing or lists no GPU): the checks that need one "
            "did not run; bench/results/gpu.json is unchanged",
            file=sys.stderr,
        )
        return EXIT_NO_GPU
    log(f"GPU: {facts}")
    import numpy

    results: dict[str, Any] = {
        "gpu": facts,
        "host": {"python": platform.python_version(), "cpus": os.cpu_count(), "numpy": numpy.__version__},
    }
    if os.environ.get(STUB_ENV):
        results["host"]["numpy_note"] = (
            "the host's numpy is 2.x: this ran in a venv with numpy<2 over its packages"
        )
    results["bundle"] = {k: env["manifest"][k] for k in ("python_version", "total_bytes")}
    results["bundle"]["nvidia_pytriton"] = env["manifest"]["tritonserver"]["nvidia_pytriton"]
    results["sections"] = list(args.sections)
    results["routers"] = list(args.routers)
    results.update(asyncio.run(main_gpu(env, work, args)))
    results["verdicts"] = verdicts(results)
    results["seconds"] = round(time.monotonic() - began, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print_table(results)
    log(f"wrote {args.out}")
    return 0 if all(results["verdicts"].values()) else 1


def print_table(results: dict[str, Any]) -> None:
    from harness import triton_stats
    from harness.load import format_table

    lat = results.get("latency", {})
    rows = []
    for c in ("1", "16"):
        for backend in ROUTERS:
            for model in ("gpu_router", "gpu_shared"):
                x = lat.get(backend, {}).get(model, {}).get(c)
                if x:
                    row = [backend, model, c, f"{x['p50_ms']:.3f}", f"{x['p99_ms']:.3f}", f"{x['rps']:.0f}"]
                    rows.append([*row, str(x["errors"])])
    if rows:
        head = ["routers", "pipeline", "concurrency", "p50 ms", "p99 ms", "req/s", "errors"]
        print(format_table(head, rows))
        for backend, ratios in lat["ratio_router_over_shared_p50"].items():
            print(f"{backend} router/shared p50:", {c: round(v, 3) for c, v in ratios.items()})
        if "ratio_native_over_python_router_p50" in lat:
            print(
                "native/python router p50:",
                {c: round(v, 3) for c, v in lat["ratio_native_over_python_router_p50"].items()},
            )
        steps = []
        for backend in ROUTERS:
            for model in ("gpu_router", "gpu_shared"):
                x = lat.get(backend, {}).get(model, {}).get("1", {})
                steps += triton_stats.table_rows([backend, model], x.get("step_us", {}))
        if steps:
            print("\nat concurrency 1, per request from Triton's statistics (medians over rounds):")
            print(format_table(["routers", "pipeline", *triton_stats.TABLE_HEADERS], steps))
    for backend in conditional_forms(results.get("routers", ROUTERS)):
        cond = results.get("conditional", {}).get(backend, {}).get("latency", {})
        rows = []
        for branch in ("branch0", "branch1"):
            for model, per_c in cond.get(branch, {}).items():
                for c, x in per_c.items():
                    p50, p99, rps = f"{x['p50_ms']:.3f}", f"{x['p99_ms']:.3f}", f"{x['rps']:.0f}"
                    rows.append([backend, branch, model, c, p50, p99, rps])
        if rows:
            headers = ["conditions", "branch", "pipeline", "concurrency", "p50 ms", "p99 ms", "req/s"]
            print(format_table(headers, rows))
            for branch, ratios in cond["ratio_conditional_over_branch_p50"].items():
                rounded = {c: round(v, 3) for c, v in ratios.items()}
                print(f"conditional ({backend})/{branch} ensemble p50:", rounded)
    for claim, ok in results["verdicts"].items():
        print(f"  [{'PASS' if ok else 'FAIL'}] {claim}")


if __name__ == "__main__":
    sys.exit(main())
