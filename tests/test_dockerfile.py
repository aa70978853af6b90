"""The operator image without a Docker engine: the Dockerfile's own RUN steps (build the wheel, create
a venv, pip install the wheel) run on this machine in a fresh venv, then the installed entry point is
exercised the way the chart uses it (`tritonpipeline ...` as ENTRYPOINT)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from helpers import ROOT
from tritonpipeline.compiler.plan_types import NATIVE_ROUTER_LIBRARY
from tritonpipeline.local.native_router import INSTALLED_ENV as NATIVE_ENV

DOCKERFILE = ROOT / "Dockerfile"
CRD_FILE = ROOT / "crds" / "tritonpipelines.serving.tritonpipeline.io.yaml"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuation lines joined."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        current += " " + stripped[:-1] if stripped.endswith("\\") else " " + stripped
        if not stripped.endswith("\\"):
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
            current = ""
    return out


def stages(text: str) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions(text):
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def test_dockerfile_shape():
    text = DOCKERFILE.read_text()
    build, native, final = stages(text)
    args = dict(a.split("=", 1) for w, a in instructions(text) if w == "ARG" and "=" in a)
    image = args["PYTHON_IMAGE"]
    # a pinned slim Python (patch version and Debian release), one the package supports
    m = re.fullmatch(r"python:3\.(\d+)\.\d+-slim-[a-z]+", image)
    assert m, image
    assert 10 <= int(m.group(1)) <= 13
    assert build[0] == ("FROM", "${PYTHON_IMAGE} AS wheel")
    assert native[0] == ("FROM", "${PYTHON_IMAGE} AS native-router")
    assert final[0] == ("FROM", "${PYTHON_IMAGE}")
    assert ("COPY", "--from=wheel /wheels /wheels") in final
    # the native router, built for the image's architecture, where the init container looks for it
    env = " ".join(a for w, a in final if w == "ENV")
    (library,) = re.findall(rf"{NATIVE_ENV}=(\S+)", env)
    copied = [a.split() for w, a in final if w == "COPY" and a.startswith("--from=native-router")]
    assert [c[-1] for c in copied] == [library] and library.endswith(f"/{NATIVE_ROUTER_LIBRARY}")
    assert ("USER", "10001:10001") in final
    assert ("ENTRYPOINT", '["tritonpipeline"]') in final
    users = [a for w, a in final if w == "RUN" and "useradd" in a]
    assert users and "--uid 10001" in users[0]
    assert (ROOT / ".dockerignore").exists()


@pytest.mark.image
def test_dockerfile_install_steps_in_a_fresh_venv(tmp_path):
    """Stage 1 (COPY sources, pip wheel) and stage 2 (venv + pip install of the wheel) exactly as the
    Dockerfile's RUN lines say, with only the paths moved under tmp_path and the pip cache allowed
    (the image sets PIP_NO_CACHE_DIR=1 to stay small)."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (make system-deps installs it): the native router's stage needs it")
    build, native, final = stages(DOCKERFILE.read_text())
    src, wheels, prefix = tmp_path / "src", tmp_path / "wheels", tmp_path / "opt"
    built = tmp_path / "native-router"
    # the build stage's COPY lines, honouring .dockerignore's exclusions
    src.mkdir()
    for word, args in build:
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

    def host(cmd: str) -> str:
        cmd = cmd.replace("/opt/tritonpipeline", str(prefix / "tritonpipeline")).replace(
            "/wheels", str(wheels)
        )
        cmd = cmd.replace("/native-router/", f"{built}/").replace("/build/", f"{tmp_path}/build/")
        cmd = cmd.replace("-m venv /build", f"-m venv {tmp_path}/build")
        return re.sub(r"(^|&& )python ", rf"\1{sys.executable} ", cmd)

    runs = [("build", a) for w, a in build if w == "RUN"]
    # the native router's build (not its apt-get of gcc: the host has gcc, a system dependency of the tests)
    runs += [("native", a) for w, a in native if w == "RUN" and "apt-get" not in a]
    runs += [("final", a) for w, a in final if w == "RUN" and re.search(r"\bpip\b", a)]
    assert len(runs) == 3, runs
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV", "PYTHON"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    timings = {}
    for stage, cmd in runs:
        t0 = time.monotonic()
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", host(cmd)],
            cwd=src if stage == "build" else tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        timings[stage] = round(time.monotonic() - t0, 1)
        assert proc.returncode == 0, f"{host(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    print(f"Dockerfile steps: {timings}")
    assert not wheels.exists()  # the install step removes the wheels, as in the image
    # the native router the image carries: a shared library for this machine, as `serve` builds it
    assert (built / NATIVE_ROUTER_LIBRARY).read_bytes()[:4] == b"\x7fELF"
    cli = prefix / "tritonpipeline" / "bin" / "tritonpipeline"
    assert cli.exists()
    clean = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(cli), "--help"], capture_output=True, text=True, env=clean, timeout=60)
    assert out.returncode == 0, out.stderr
    for command in ("validate", "render", "serve", "run", "crd", "assemble"):
        assert command in out.stdout
    crd = subprocess.run([str(cli), "crd"], capture_output=True, text=True, env=clean, timeout=60)
    assert crd.returncode == 0, crd.stderr
    assert crd.stdout == CRD_FILE.read_text()

    def installed_python(code: str) -> str:
        """What `code` printed (stdout, then stderr), run by the image venv's python outside this checkout."""
        python = prefix / "tritonpipeline" / "bin" / "python"
        proc = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, env=clean, cwd=tmp_path, timeout=60
        )
        return proc.stdout + proc.stderr

    # exactly what the image runs: the operator and the init container's cloud SDKs, no serving stack
    listed = subprocess.run(
        [str(prefix / "tritonpipeline" / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        env=clean,
        timeout=120,
    )
    installed = {d["name"].lower().replace("_", "-") for d in json.loads(listed.stdout)}
    assert {"kopf", "kubernetes", "prometheus-client", "boto3", "google-cloud-storage"} <= installed
    assert not {"numpy", "nvidia-pytriton", "tritonclient", "grpcio"} & installed
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
    assert str(prefix) in where, where
    # test scaffolding is not in the product: no harness package, no load generator
    found = installed_python(
        "from importlib.util import find_spec as f; print(f('harness'), f('tritonpipeline.loadgen'))"
    )
    assert found.split() == ["None", "None"], found
