"""The operator and assembler images without a Docker engine: the Dockerfile's own RUN steps (build the
wheel, create each image's venv, pip install its hashed lock and the wheel) run on this machine in fresh
venvs, then each installed entry point is exercised the way the chart uses it (`tritonpipeline ...` as
ENTRYPOINT). The lock files' agreement with pyproject.toml is checked here too (tools/locks.py).
Here the tests on real components; the pure ones are in tests/unit/test_dockerfile.py."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import locks
import pytest

from helpers import MODELS, ROOT, example
from support.dockerfile import DOCKERFILE, named
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.plan_types import NATIVE_ROUTER_LIBRARY
from tritonpipeline.render.packing import pack
from tritonpipeline.spec import parse_pipeline

CRD_FILE = ROOT / "crds" / "tritonpipelines.serving.tritonpipeline.io.yaml"


def distributions(python: Path, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """name -> version of what a venv holds (importlib.metadata: the image venvs have no pip to list them)."""
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    proc = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return {locks.normalized(k): v for k, v in json.loads(proc.stdout).items()}


def size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


@pytest.mark.image
def test_dockerfile_install_steps_in_a_fresh_venv(tmp_path):
    """Every RUN step that builds or installs, exactly as the Dockerfile's lines say, with only the paths
    moved under tmp_path and the pip cache allowed (the image sets PIP_NO_CACHE_DIR=1 to stay small):
    the wheel; the assembler's venv from assembler.lock (--require-hashes) and the native router built in
    it; the assembler image's removal of pip, on a venv standing for the base image's Python; the operator's
    venv from operator.lock. Then each venv holds exactly its lock and the wheel, and runs as its image's
    entry point: the assembler assembles and has no kopf, the operator's is the whole CLI."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (make system-deps installs it): the native router's stage needs it")
    by_name = named(DOCKERFILE.read_text())
    src, wheels = tmp_path / "src", tmp_path / "wheels"
    built = tmp_path / "native-router"
    # the image venvs, each at /opt/tritonpipeline in its image
    prefix = {"assembler": tmp_path / "assembler", "operator": tmp_path / "operator"}
    # the base image's Python as the assembler's last step finds it: pip, setuptools, ensurepip's wheels
    base, stdlib = tmp_path / "base", tmp_path / "usr-local-lib"
    subprocess.run([sys.executable, "-m", "venv", str(base)], check=True, timeout=300)
    bundled = stdlib / "python3.11" / "ensurepip" / "_bundled"
    bundled.mkdir(parents=True)
    (bundled / "pip-24.0-py3-none-any.whl").write_bytes(b"PK")
    # the build stage's COPY lines, honouring .dockerignore's exclusions
    src.mkdir()
    for word, args in by_name["wheel"]:
        if word == "COPY":
            *sources, _dest = args.split()
            for s in sources:
                path = ROOT / s.rstrip("/")
                if path.is_dir():
                    shutil.copytree(
                        path, src / path.name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
                    )
                else:
                    shutil.copy2(path, src / path.name)

    def host(cmd: str, image: str) -> str:
        if image in prefix:
            cmd = cmd.replace("/opt/tritonpipeline", str(prefix[image] / "tritonpipeline"))
        cmd = cmd.replace("/wheels", str(wheels)).replace("/native-router/", f"{built}/")
        cmd = cmd.replace("/usr/local/lib/", f"{stdlib}/")
        python = base / "bin" / "python" if image == "base" else sys.executable
        return re.sub(r"(^|&& |\|\| |\()python ", rf"\1{python} ", cmd)

    def copy_locks(stage: str) -> None:
        """The stage's COPY of a lock file into /wheels/."""
        for word, args in by_name[stage]:
            if word == "COPY" and args.startswith("requirements/"):
                source, dest = args.split()
                assert dest == "/wheels/"
                shutil.copy2(ROOT / source, wheels / Path(source).name)

    # (stage, the image its paths belong to, the working directory) in the order a build of both runs them
    steps = [("wheel", "operator", src), ("assembler-venv", "assembler", tmp_path)]
    # the native router's build (not its apt-get of gcc: the host has gcc, a system dependency of the tests)
    steps += [("native-router", "assembler", tmp_path), ("assembler", "base", tmp_path)]
    steps += [("operator", "operator", tmp_path)]
    runs = [
        (stage, image, cwd, a)
        for stage, image, cwd in steps
        for w, a in by_name[stage]
        if w == "RUN" and "apt-get" not in a
    ]
    assert len(runs) == 5, runs
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV", "PYTHON"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    timings = {}
    for stage, image, cwd, cmd in runs:
        copy_locks(stage)
        command = host(cmd, image)
        assert "/usr/local/lib/" not in command and " /opt/" not in command, command  # nothing of the host's
        t0 = time.monotonic()
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        timings[stage] = round(time.monotonic() - t0, 1)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    sizes = {image: round(size_mb(p / "tritonpipeline"), 1) for image, p in prefix.items()}
    print(f"Dockerfile steps: {timings}; venvs (MB on disk): {sizes}")
    assert not wheels.exists()  # the operator's install step removes the wheels, as in the image
    # the native router the images carry: a shared library for this machine, as `serve` builds it
    assert (built / NATIVE_ROUTER_LIBRARY).read_bytes()[:4] == b"\x7fELF"
    clean = {k: v for k, v in env.items() if k != "PYTHONPATH"}

    # each venv: exactly its lock (the versions pip checked the hashes of) and the wheel, no installer
    for image, root in prefix.items():
        held = distributions(root / "tritonpipeline" / "bin" / "python", tmp_path, clean)
        locked = {n: e[0] for n, e in locks.parse_lock(locks.lock_path(image).read_text()).items()}
        assert held == {**locked, "tritonpipeline": held.get("tritonpipeline")}, image
        assert not {"pip", "setuptools", "wheel"} & set(held), image

    # the assembler image's last step: the base Python has no pip left, nor ensurepip's wheels
    no_pip = subprocess.run(
        [str(base / "bin" / "python"), "-m", "pip", "--version"], capture_output=True, text=True
    )
    assert no_pip.returncode != 0 and "No module named pip" in no_pip.stderr
    assert not bundled.exists() and bundled.parent.exists()
    # and where pip cannot be removed, a Python that is no distribution's fails the build
    (removal,) = [a for w, a in by_name["assembler"] if w == "RUN"]
    again = subprocess.run(["bash", "-c", host(removal, "base")], capture_output=True, text=True, env=env)
    assert again.returncode != 0 and "No module named pip" in again.stderr, again.stderr

    # the assembler: `tritonpipeline assemble` (with s3:// and gs:// SDKs), and nothing of the operator's
    assembler = prefix["assembler"] / "tritonpipeline" / "bin"
    helped = subprocess.run(
        [str(assembler / "tritonpipeline"), "assemble", "--help"],
        capture_output=True,
        text=True,
        env=clean,
        timeout=60,
    )
    assert helped.returncode == 0 and "--generated" in helped.stdout, helped.stderr
    imports = "import boto3, botocore.config, google.cloud.storage, google.api_core.exceptions, google.auth"
    sdks = subprocess.run(
        [str(assembler / "python"), "-c", imports], capture_output=True, text=True, env=clean, cwd=tmp_path
    )
    assert sdks.returncode == 0, sdks.stderr
    for module in ("kopf", "kubernetes", "aiohttp", "prometheus_client", "numpy"):
        absent = subprocess.run(
            [str(assembler / "python"), "-c", f"import {module}"],
            capture_output=True,
            text=True,
            env=clean,
            cwd=tmp_path,
        )
        assert f"No module named '{module}'" in absent.stderr, (module, absent.stderr)
    run = subprocess.run(
        [str(assembler / "tritonpipeline"), "run"], capture_output=True, text=True, env=clean, timeout=60
    )
    assert run.returncode != 0 and "'operator' extra" in run.stderr, run.stderr
    # a whole assemble as the init container runs it: the generated ConfigMaps' files and a mounted source
    artifacts = compile_pipeline(parse_pipeline(example("diamond")))
    generated = tmp_path / "generated"
    generated.mkdir()
    for part in pack(artifacts.files, artifacts.models, 900 * 1024):
        for key, text in part.data.items():
            (generated / key).write_text(text)
        for key, data in part.binary_data.items():
            (generated / key).write_bytes(base64.b64decode(data))
    out = tmp_path / "repository"
    assembled = subprocess.run(
        [str(assembler / "tritonpipeline"), "assemble", "--generated", str(generated),
         "--source", str(MODELS), "--out", str(out)],
        capture_output=True, text=True, env=clean, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert assembled.returncode == 0, assembled.stderr
    assert {p.name for p in out.iterdir()} >= set(artifacts.models)
    assert sizes["assembler"] < sizes["operator"]

    # the operator image: the whole CLI
    cli = prefix["operator"] / "tritonpipeline" / "bin" / "tritonpipeline"
    out = subprocess.run([str(cli), "--help"], capture_output=True, text=True, env=clean, timeout=60)
    assert out.returncode == 0, out.stderr
    for command in ("validate", "render", "serve", "run", "crd", "assemble"):
        assert command in out.stdout
    crd = subprocess.run([str(cli), "crd"], capture_output=True, text=True, env=clean, timeout=60)
    assert crd.returncode == 0, crd.stderr
    assert crd.stdout == CRD_FILE.read_text()

    def installed_python(code: str) -> str:
        """What `code` printed (stdout, then stderr), run by the image venv's python outside this checkout."""
        python = prefix["operator"] / "tritonpipeline" / "bin" / "python"
        proc = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, env=clean, cwd=tmp_path, timeout=60
        )
        return proc.stdout + proc.stderr

    # exactly what the image runs: the operator and the init container's cloud SDKs, no serving stack
    installed = set(distributions(prefix["operator"] / "tritonpipeline" / "bin" / "python", tmp_path, clean))
    assert {"kopf", "kubernetes", "prometheus-client", "boto3", "google-cloud-storage"} <= installed
    assert not {"numpy", "nvidia-pytriton", "tritonclient", "grpcio"} & installed
    assert installed_python("import kopf, kubernetes, aiohttp, cryptography; print('ok')").strip() == "ok"
    serve = subprocess.run(
        [str(cli), "serve", str(ROOT / "examples" / "fanout.yaml")],
        capture_output=True,
        text=True,
        env=clean,
        timeout=60,
    )
    assert (serve.returncode, serve.stderr.strip()) == (
        2,
        "error: tritonpipeline serve needs the 'serve' extra (pytriton is not installed): "
        "pip install 'tritonpipeline[serve]'",
    )
    # with a tritonserver tree of its own (NVIDIA's image, the GPU check's bundle) the wheel is not needed:
    # serve goes on to that tree (here not one, which it says)
    tree = {**clean, "TRITONPIPELINE_SERVER_HOME": str(tmp_path / "no-tree")}
    serve = subprocess.run(
        [str(cli), "serve", str(ROOT / "examples" / "fanout.yaml"), "--cpu"],
        capture_output=True,
        text=True,
        env=tree,
        timeout=60,
    )
    assert "'serve' extra" not in serve.stderr and "not a tritonserver tree" in serve.stderr, serve.stderr
    # the installed package is the wheel, not this checkout
    where = installed_python("import tritonpipeline; print(tritonpipeline.__file__)")
    assert str(prefix["operator"]) in where, where
    # test scaffolding is not in the product: no harness package, no load generator
    found = installed_python(
        "from importlib.util import find_spec as f; print(f('harness'), f('tritonpipeline.loadgen'))"
    )
    assert found.split() == ["None", "None"], found
