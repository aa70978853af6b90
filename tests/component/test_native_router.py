"""The native router (compiler/native_router.c, built by tritonpipeline.local.native_router) on a real
tritonserver: every example with routers answers exactly as with the Python router, and the router's own
contract holds for each datatype (FP32, FP16, INT64, BYTES), batching (concurrent requests batched
together), a request that asks for some outputs only, and an optional input left out."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as http

from helpers import check_with_reference, example, native_router_or_skip
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.plan_types import NATIVE_ROUTER_BACKEND, NATIVE_ROUTER_LIBRARY

pytestmark = pytest.mark.tritonserver


@pytest.fixture(scope="module")
def library() -> bytes:
    return native_router_or_skip()


def serve(repo: Path, tmp_path: Path) -> Any:
    from tritonpipeline.local.tritonserver import LocalTriton

    server = LocalTriton(repo, log_file=tmp_path / "triton.log", extra_args=["--exit-timeout-secs=5"])
    server.start()
    try:
        server.wait_ready(timeout=120)
    except BaseException:
        print(server.logs()[-4000:])
        server.stop(timeout=15)
        raise
    return server


# ------------------------------------------------------------------------------------------ pure


@pytest.mark.parametrize("name", ["fanout", "diamond"])
def test_native_routers_are_rendered_with_their_library(name: str) -> None:
    from tritonpipeline.spec import parse_pipeline

    tp = parse_pipeline(example(name))
    python, native = compile_pipeline(tp), compile_pipeline(tp, native_router=b"\x7fELF...")
    routers = [r.name for r in native.plan.routers]
    assert routers and [r.name for r in python.plan.routers] == routers
    for router in routers:
        assert f"{router}/1/model.py" in python.files and f"{router}/1/model.py" not in native.files
        assert native.files[f"{router}/1/{NATIVE_ROUTER_LIBRARY}"] == b"\x7fELF..."
        config = native.files[f"{router}/config.pbtxt"].decode()
        assert f'backend: "{NATIVE_ROUTER_BACKEND}"' in config and "FORCE_CPU_ONLY" not in config
    # everything but the routers is the same repository
    same = {p for p in python.files if p.split("/")[0] not in routers}
    assert {p: python.files[p] for p in same} == {p: native.files[p] for p in same}


# ------------------------------------------------------------------------------- real tritonserver


@pytest.mark.parametrize("name", ["fanout", "diamond"])
def test_examples_answer_the_same_with_native_routers(name: str, library: bytes, tmp_path: Path) -> None:
    """e2e/infer.py --spec computes each pipeline's outputs from what the models compute, on seeded
    random requests, and compares every output with Triton's answer."""
    from tritonpipeline.local.repository import write_repository
    from tritonpipeline.spec import parse_pipeline

    doc = example(name)
    tp = parse_pipeline(doc)
    artifacts = compile_pipeline(tp, cpu_only=True, native_router=library)
    assert artifacts.plan.routers
    repo = write_repository(artifacts, tmp_path / "repo", Path(tp.spec.model_repository.uri))
    server = serve(repo, tmp_path)
    try:
        check_with_reference(server.http_url, doc, tmp_path)
        client = http.InferenceServerClient(server.http_url)
        for router in artifacts.plan.routers:  # served by the native backend, not the Python one
            config = client.get_model_config(router.name, headers=server.admin_headers())
            assert config["backend"] == NATIVE_ROUTER_BACKEND
    finally:
        server.stop(timeout=15)


# a router per datatype, as the compiler renders them (router_config), but written out here so that
# each case is visible: (model, datatype, dims, batched)
ROUTERS = [
    ("r_fp32", "TYPE_FP32", "[ 3 ]", True),
    ("r_fp16", "TYPE_FP16", "[ 2, 2 ]", True),
    ("r_int64", "TYPE_INT64", "[ -1 ]", False),
    ("r_bytes", "TYPE_STRING", "[ -1 ]", True),
]
OUTPUTS = ("OUT_0", "OUT_1", "OUT_2")


def router_repo(dest: Path, library: bytes) -> Path:
    for name, dtype, dims, batched in ROUTERS:
        (dest / name / "1").mkdir(parents=True)
        (dest / name / "1" / NATIVE_ROUTER_LIBRARY).write_bytes(library)
        outputs = ", ".join(f'{{ name: "{o}" data_type: {dtype} dims: {dims} }}' for o in OUTPUTS)
        (dest / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "{NATIVE_ROUTER_BACKEND}"\nmax_batch_size: {8 if batched else 0}\n'
            f'input [ {{ name: "INPUT" data_type: {dtype} dims: {dims} optional: true }} ]\n'
            f"output [ {outputs} ]\ninstance_group [ {{ kind: KIND_CPU count: 1 }} ]\n"
            + ("dynamic_batching { max_queue_delay_microseconds: 20000 }\n" if batched else "")
        )
    return dest


def tensor(name: str, array: np.ndarray, datatype: str) -> http.InferInput:
    t = http.InferInput(name, list(array.shape), datatype)
    t.set_data_from_numpy(array)
    return t


CASES = {
    "r_fp32": (np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5, "FP32"),
    "r_fp16": (np.array([[[0.5, -1.0], [65504.0, 1e-3]]], dtype=np.float16), "FP16"),
    "r_int64": (np.array([2**62, -7, 0, 5], dtype=np.int64), "INT64"),
    "r_bytes": (np.array([[b"", b"caf\xc3\xa9", b"\x00\xff" * 300]], dtype=np.object_), "BYTES"),
}


def test_the_router_contract_per_datatype(library: bytes, tmp_path: Path) -> None:
    server = serve(router_repo(tmp_path / "repo", library), tmp_path)
    client = http.InferenceServerClient(server.http_url)
    try:
        for model, (array, datatype) in CASES.items():
            result = client.infer(model, [tensor("INPUT", array, datatype)])
            for output in OUTPUTS:
                got = result.as_numpy(output)
                assert got.dtype == array.dtype and got.shape == array.shape, (model, output)
                assert np.array_equal(got, array), (model, output, got)
            # asked for one output: only that one comes back
            one = client.infer(
                model, [tensor("INPUT", array, datatype)], outputs=[http.InferRequestedOutput("OUT_2")]
            )
            assert [o["name"] for o in one.get_response()["outputs"]] == ["OUT_2"]
            assert np.array_equal(one.as_numpy("OUT_2"), array)
            # the optional input left out: a response without outputs (the steps after it see nothing)
            empty = client.infer(model, [])
            assert empty.get_response().get("outputs", []) == []
        stats = client.get_inference_statistics("r_fp32", headers=server.admin_headers())["model_stats"][0]
        assert (
            stats["inference_stats"]["success"]["count"] == 3
            and stats["inference_stats"]["fail"]["count"] == 0
        )
    finally:
        client.close()
        server.stop(timeout=15)


def test_concurrent_requests_batched_together_keep_their_own_rows(library: bytes, tmp_path: Path) -> None:
    """Dynamic batching hands the router several requests at once (max_queue_delay 20 ms): each
    response carries exactly its own request's rows."""
    import tritonclient.http.aio as aio

    from harness import triton_stats

    server = serve(router_repo(tmp_path / "repo", library), tmp_path)
    stats = triton_stats.http_getter(server.http_url, server.admin_headers())
    before = triton_stats.snapshot(stats, ["r_fp32"])

    async def run() -> list[tuple[np.ndarray, np.ndarray]]:
        client = aio.InferenceServerClient(server.http_url, conn_limit=32)
        try:
            rows = [np.full((1 + i % 3, 3), i, dtype=np.float32) for i in range(32)]

            async def one(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                inp = aio.InferInput("INPUT", list(x.shape), "FP32")
                inp.set_data_from_numpy(x)
                result = await client.infer("r_fp32", [inp])
                return x, result.as_numpy("OUT_1")

            return await asyncio.gather(*(one(x) for x in rows))
        finally:
            await client.close()

    try:
        for sent, got in asyncio.run(run()):
            assert np.array_equal(sent, got)
        raw = http.InferenceServerClient(server.http_url).get_inference_statistics(
            "r_fp32", headers=server.admin_headers()
        )["model_stats"][0]
        assert raw["inference_count"] == sum(1 + i % 3 for i in range(32))  # rows, as Triton counts them
        # Triton's statistics as the benches read them: requests and executions between two snapshots
        steps = triton_stats.per_request(triton_stats.snapshot(stats, ["r_fp32"]), before)["r_fp32"]
        assert steps["requests"] == 32
        assert steps["executions"] < 32  # some requests were executed together
        assert steps["queue"] > 0 and steps["compute_infer"] > 0
        phases = sum(steps[p] for p in triton_stats.PHASES)
        assert phases <= steps["request"] + 1  # a request's time is its queue and compute phases
    finally:
        server.stop(timeout=15)


# what native_router.c calls in the CUDA runtime, all weak references
CUDA_FUNCTIONS = (
    "cudaSetDevice",
    "cudaGetDevice",
    "cudaStreamCreateWithFlags",
    "cudaStreamDestroy",
    "cudaMemcpyAsync",
    "cudaStreamSynchronize",
    # the switch's (conditions): its branches' GPU outputs where the server's CUDA pool is spent, and
    # copies on a GPU past its streams
    "cudaMalloc",
    "cudaFree",
    "cudaMemcpy",
)


def test_the_library_needs_only_an_old_libc(library: bytes, tmp_path: Path) -> None:
    """It loads into any Triton image of the supported range: no library but libc (CUDA is a weak
    reference, bound only where the server has it) and no glibc symbol newer than 2.17."""
    import shutil

    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump is not installed (Debian package binutils, which gcc brings)")
    lib = tmp_path / NATIVE_ROUTER_LIBRARY
    lib.write_bytes(library)
    dynamic = subprocess.run([objdump, "-p", str(lib)], capture_output=True, text=True, check=True).stdout
    assert re.findall(r"NEEDED\s+(\S+)", dynamic) == ["libc.so.6"]
    symbols = subprocess.run([objdump, "-T", str(lib)], capture_output=True, text=True, check=True).stdout
    versions = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", symbols)}
    assert versions and max(versions) <= (2, 17), sorted(versions)
    cuda = {
        line.split()[-1]: line
        for line in symbols.splitlines()
        if line.split()[-1:] and line.split()[-1].startswith("cuda")
    }
    assert set(cuda) == set(CUDA_FUNCTIONS), sorted(cuda)
    for name, line in cuda.items():  # weak: unresolved is allowed, a CPU-only server loads it
        assert " w " in f" {line} ", (name, line)


def test_its_cuda_references_bind_to_the_servers_cuda_runtime(
    library: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loaded into the wheel's tritonserver, the router's weak CUDA references resolve to the CUDA runtime
    the server itself links (the dynamic linker's own account, LD_DEBUG=bindings): a GPU tensor is then
    copied on the GPU rather than refused with "no CUDA runtime in this server". Needs no GPU: binding
    happens at load."""
    trace = tmp_path / "ld"
    trace.mkdir()
    monkeypatch.setenv("LD_DEBUG", "bindings")
    monkeypatch.setenv("LD_DEBUG_OUTPUT", str(trace / "bindings"))  # one file per process: bindings.PID
    server = serve(router_repo(tmp_path / "repo", library), tmp_path)
    server.stop(timeout=15)
    bound: dict[str, str] = {}
    for log in trace.iterdir():
        for line in log.read_text(errors="replace").splitlines():
            match = re.search(r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: normal symbol `(\w+)'", line)
            if match and match[1].endswith(NATIVE_ROUTER_LIBRARY) and match[3] in CUDA_FUNCTIONS:
                bound[match[3]] = Path(match[2]).name
    assert set(bound) == set(CUDA_FUNCTIONS), bound
    assert all(target.startswith("libcudart") for target in bound.values()), bound
