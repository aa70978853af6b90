"""Pack what the GPU check needs on a GPU host with no network (make gpu-pack): writes .gpu/

    .gpu/tritonserver.tar.xz   the nvidia-pytriton wheel's tritonserver, laid out like NVIDIA's image:
                               tritonserver/{bin, lib, backends/python, python_backend_stubs/<py>/}
    .gpu/wheels/*.whl          the Python packages tritonpipeline's compiler, `serve` and the asyncio
                               client need beyond what a CUDA + PyTorch image has (for --python-version)
    .gpu/cupti/                the device-to-host copy counter (memcpy_counter.c built against CUPTI
                               from PyPI's CUDA wheels) and the libcupti it links (xz)
    .gpu/native-router/        the native router (compiler/native_router.c) built here, as the operator
                               image carries it (it needs only an old libc)
    .gpu/manifest.json         versions and sizes

Runs in the project's venv on a machine that reaches PyPI. bench/gpu/check.py unpacks and uses it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib import metadata
from pathlib import Path

import pytriton

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / ".gpu"
# what check.py imports on the GPU host beyond its own CUDA + PyTorch Python (same versions as the venv)
WHEELS = (
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "typing-extensions",
    "tritonclient",
    "grpcio",
    "protobuf",
    "python-rapidjson",
    "numpy",  # <2: the Python-backend stub of Triton 2.51 returns numpy 2 arrays as empty tensors
)
CUDA_WHEELS = ("nvidia-cuda-cupti-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-nvcc-cu12")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")


def log(message: str) -> None:
    print(f">> {message}", flush=True)


def needed(path: Path) -> list[str]:
    """The DT_NEEDED sonames of an ELF file (readelf from binutils)."""
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def library_closure(roots: list[Path], libs: Path) -> list[Path]:
    """Every library in `libs` that `roots` load, directly or through each other."""
    todo, seen = list(roots), set[str]()
    while todo:
        for soname in needed(todo.pop()):
            if soname not in seen and (libs / soname).exists():
                seen.add(soname)
                todo.append(libs / soname)
    return sorted(libs / name for name in seen)


def stage_tritonserver(stage: Path, pythons: set[str]) -> dict[str, object]:
    """Lay the wheel's tritonserver out like NVIDIA's image under stage/tritonserver, with the Python
    backend's stubs for `pythons` only (each links its own libpython)."""
    dist = Path(pytriton.__file__).resolve().parent / "tritonserver"
    wheel_libs = dist.parent.parent / "nvidia_pytriton.libs"
    home = stage / "tritonserver"
    stubs = sorted(s for s in (dist / "python_backend_stubs").iterdir() if s.name in pythons)
    if not stubs:
        raise SystemExit(
            f"gpu-pack: nvidia-pytriton ships no Python-backend stub for {', '.join(sorted(pythons))}"
        )
    roots = [dist / "bin" / "tritonserver", dist / "backends" / "python" / "libtriton_python.so"]
    roots += [s / "triton_python_backend_stub" for s in stubs]
    (home / "bin").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "backends" / "python").mkdir(parents=True)
    shutil.copy2(dist / "bin" / "tritonserver", home / "bin")
    libs = library_closure(roots, wheel_libs)
    for lib in libs:
        shutil.copy2(lib, home / "lib")
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        shutil.copy2(dist / "backends" / "python" / name, home / "backends" / "python")
    for stub in stubs:
        (home / "python_backend_stubs" / stub.name).mkdir(parents=True)
        shutil.copy2(stub / "triton_python_backend_stub", home / "python_backend_stubs" / stub.name)
    return {
        "nvidia_pytriton": metadata.version("nvidia-pytriton"),
        "libraries": [lib.name for lib in libs],
        "stubs_for_python": [s.name for s in stubs],
    }


def pip_download(names: list[str], dest: Path, python_version: str, *, binary_platforms: bool) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
    cmd += [
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "-d",
        str(dest),
    ]
    if binary_platforms:
        for platform in PLATFORMS:
            cmd += ["--platform", platform]
    subprocess.run([*cmd, *names], check=True)


def pinned(name: str) -> str:
    return f"{name}=={metadata.version(name)}"


def build_counter(out: Path, cache: Path) -> dict[str, object]:
    """memcpy_counter.c against CUPTI from PyPI's CUDA 12 wheels; libcupti travels beside it."""
    wheels = cache / "cuda-wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    if not list(wheels.glob("nvidia_cuda_cupti_cu12-*.whl")):
        log("downloading CUPTI headers and library (PyPI's CUDA 12 wheels, once)")
        pip_download(list(CUDA_WHEELS), wheels, "3.12", binary_platforms=True)
    tree = cache / "cuda-tree"
    if not (tree / "nvidia" / "cuda_cupti" / "lib" / "libcupti.so.12").exists():
        for wheel in wheels.glob("*.whl"):
            shutil.unpack_archive(str(wheel), str(tree), "zip")
    nv = tree / "nvidia"
    out.mkdir(parents=True)
    includes = [f"-I{nv / d / 'include'}" for d in ("cuda_cupti", "cuda_runtime", "cuda_nvcc")]
    source = Path(__file__).with_name("memcpy_counter.c")
    lib = nv / "cuda_cupti" / "lib"
    cc = ["cc", "-shared", "-fPIC", "-O2", "-Wall", str(source), *includes, f"-L{lib}", "-l:libcupti.so.12"]
    cc += ["-lpthread", "-Wl,-rpath,$ORIGIN", "-o", str(out / "libtp_memcpy.so")]
    subprocess.run(cc, check=True)
    with tarfile.open(out / "libcupti.tar.xz", "w:xz", preset=6) as tar:
        tar.add(lib / "libcupti.so.12", arcname="libcupti.so.12")
    return {"cupti": next(wheels.glob("nvidia_cuda_cupti_cu12-*.whl")).name.split("-")[1]}


def build_native_router(out: Path) -> dict[str, object]:
    """The native router for this machine's architecture (the GPU host's: x86_64), as `serve` builds it."""
    from tritonpipeline.compiler.plan_types import NATIVE_ROUTER_LIBRARY
    from tritonpipeline.local.native_router import build

    out.mkdir(parents=True)
    (out / NATIVE_ROUTER_LIBRARY).write_bytes(build())
    return {"library": NATIVE_ROUTER_LIBRARY, "machine": platform.machine()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-version", default="3.12", help="the GPU host's Python (default 3.12)")
    args = parser.parse_args()
    began = time.monotonic()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tritonpipeline" / "gpu-pack"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir()
    manifest: dict[str, object] = {"python_version": args.python_version}
    with tempfile.TemporaryDirectory() as tmp:
        log("staging the tritonserver tree from the nvidia-pytriton wheel")
        here = f"{sys.version_info[0]}.{sys.version_info[1]}"  # for check.py's own run without a GPU
        manifest["tritonserver"] = stage_tritonserver(Path(tmp), {args.python_version, here})
        log("packing .gpu/tritonserver.tar.xz (xz, about a minute on 2 cores)")
        with tarfile.open(OUT / "tritonserver.tar.xz", "w:xz", preset=6) as tar:
            tar.add(Path(tmp) / "tritonserver", arcname="tritonserver")
    log(f"downloading wheels for Python {args.python_version}: {', '.join(WHEELS)}")
    pip_download([pinned(n) for n in WHEELS], OUT / "wheels", args.python_version, binary_platforms=True)
    log("building the device-to-host copy counter (CUPTI)")
    manifest["counter"] = build_counter(OUT / "cupti", cache)
    log("building the native router")
    manifest["native_router"] = build_native_router(OUT / "native-router")
    files = sorted(p for p in OUT.rglob("*") if p.is_file())
    manifest["files"] = {
        str(p.relative_to(OUT)): {
            "bytes": p.stat().st_size,
            "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
        }
        for p in files
    }
    total = sum(p.stat().st_size for p in files)
    manifest["total_bytes"] = total
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    log(f"packed {len(files)} files, {total / 2**20:.1f} MiB, in {time.monotonic() - began:.0f} s: {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
