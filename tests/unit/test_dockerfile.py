"""The operator and assembler images without a Docker engine: the Dockerfile's own RUN steps (build the
wheel, create each image's venv, pip install its hashed lock and the wheel) run on this machine in fresh
venvs, then each installed entry point is exercised the way the chart uses it (`tritonpipeline ...` as
ENTRYPOINT). The lock files' agreement with pyproject.toml is checked here too (tools/locks.py).
Here the pure tests; those on real components are in tests/component/test_dockerfile.py."""

from __future__ import annotations

import re

import locks
import pytest

from helpers import ROOT
from support.dockerfile import DOCKERFILE, instructions, named
from tritonpipeline.compiler.plan_types import NATIVE_ROUTER_LIBRARY
from tritonpipeline.local.native_router import INSTALLED_ENV as NATIVE_ENV


def chain(by_name: dict[str, list[tuple[str, str]]], name: str) -> list[tuple[str, str]]:
    """A stage's instructions after those of the stages it is built FROM (what its image holds)."""
    stage = by_name[name]
    base = stage[0][1].split(" AS ")[0]
    return (chain(by_name, base) if base in by_name else []) + stage


def pip_installs(text: str) -> list[str]:
    """Every `pip ... install ...` command of the Dockerfile's RUN lines (split at &&)."""
    runs = [a for w, a in instructions(text) if w == "RUN"]
    return [c.strip() for run in runs for c in run.split("&&") if re.search(r"\bpip\b.*\binstall\b", c)]


def test_dockerfile_shape():
    text = DOCKERFILE.read_text()
    by_name = named(text)
    args = dict(a.split("=", 1) for w, a in instructions(text) if w == "ARG" and "=" in a)
    image = args["PYTHON_IMAGE"]
    # a pinned slim Python (patch version and Debian release), one the package supports
    m = re.fullmatch(r"python:3\.(\d+)\.\d+-slim-[a-z]+", image)
    assert m, image
    assert 10 <= int(m.group(1)) <= 13
    # the operator image is the last stage, what a plain `docker build` (and e2e/images.py) makes; the
    # assembler a target of its own
    assert {name: stage[0][1].split(" AS ")[0] for name, stage in by_name.items()} == {
        "wheel": "${PYTHON_IMAGE}",
        "assembler-venv": "${PYTHON_IMAGE}",
        "native-router": "assembler-venv",
        "runtime": "${PYTHON_IMAGE}",
        "assembler": "runtime",
        "operator": "runtime",
    }
    assert list(by_name)[-1] == "operator"
    assert ("COPY", "--from=wheel /wheels /wheels") in by_name["operator"]
    assert ("COPY", "--from=assembler-venv /opt/tritonpipeline /opt/tritonpipeline") in by_name["assembler"]
    for target in ("assembler", "operator"):
        final = chain(by_name, target)
        # the native router, built for the image's architecture, where the init container looks for it
        env = " ".join(a for w, a in final if w == "ENV")
        (library,) = re.findall(rf"{NATIVE_ENV}=(\S+)", env)
        copied = [a.split() for w, a in final if w == "COPY" and a.startswith("--from=native-router")]
        assert [c[-1] for c in copied] == [library] and library.endswith(f"/{NATIVE_ROUTER_LIBRARY}")
        assert final[-3:-1] == [("USER", "10001:10001"), ("ENTRYPOINT", '["tritonpipeline"]')], target
        users = [a for w, a in final if w == "RUN" and "useradd" in a]
        assert users and "--uid 10001" in users[0]
    # the init container's args start with `assemble` (render/manifests.py): the entry point is the CLI
    assert by_name["assembler"][-1] == ("CMD", '["assemble", "--help"]')
    # each image's dependencies from its own hashed lock (tools/locks.py), then the wheel without any
    for target, stage in (("assembler", "assembler-venv"), ("operator", "operator")):
        lock = f"requirements/{target}.lock"
        assert ("COPY", f"{lock} /wheels/") in by_name[stage]
        assert (ROOT / lock).is_file()
        (run,) = [a for w, a in by_name[stage] if w == "RUN"]
        assert f"--require-hashes -r /wheels/{target}.lock" in run
        # no installer left in the venv
        assert "&& /opt/tritonpipeline/bin/python -m pip uninstall --yes pip setuptools" in run
    for install in pip_installs(text):
        assert re.search(r" --require-hashes -r /wheels/[a-z]+\.lock$", install) or (
            " --no-deps " in install and install.endswith('"$(echo /wheels/tritonpipeline-*.whl)"')
        ), f"every install is hashed, or the wheel alone: {install}"
    # the assembler image carries no installer: the base image's pip removed (its venv never had one)
    (removal,) = [a for w, a in by_name["assembler"] if w == "RUN"]
    assert removal.startswith("(python -m pip uninstall --yes --no-cache-dir pip setuptools wheel || ")
    assert removal.endswith("&& rm -rf /usr/local/lib/python3.*/ensurepip/_bundled")
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignored and "!requirements/*.lock" in ignored


@pytest.mark.parametrize("image", sorted(locks.LOCKS))
def test_each_lock_holds_the_pins_of_pyproject(image):
    """requirements/<image>.lock (`make lock`) has each pin of the core and the image's extras at the
    same version, nothing pyproject no longer asks for, every entry hashed; the assembler's versions are
    the operator's. `make lint` runs the same check (tools/locks.py --check)."""
    assert locks.problems(image) == []
    entries = locks.parse_lock(locks.lock_path(image).read_text())
    assert set(locks.pyproject_pins(locks.LOCKS[image])) <= set(entries)
    assert all(hashes and all(h.startswith("sha256:") for h in hashes) for _, hashes, _ in entries.values())


def test_the_assembler_lock_is_the_operators_without_the_operator_extra():
    operator = locks.parse_lock(locks.lock_path("operator").read_text())
    assembler = locks.parse_lock(locks.lock_path("assembler").read_text())
    assert {n: e[0] for n, e in assembler.items()}.items() <= {n: e[0] for n, e in operator.items()}.items()
    assert not {"kopf", "kubernetes", "aiohttp", "prometheus-client"} & set(assembler)


def test_the_lock_check_sees_a_pin_moved_or_dropped(tmp_path):
    """What `make lint` says when pyproject.toml changes and the locks do not."""
    text = (ROOT / "pyproject.toml").read_text()
    boto3 = re.search(r'"boto3==([^"]+)"', text)
    assert boto3 is not None
    changed = text.replace(boto3.group(0), '"boto3==0.0.1"').replace('"prometheus_client==', '"#==')
    changed = re.sub(r'\n\s*"#==[^\n]*', "", changed)  # prometheus_client no longer asked for
    (tmp_path / "pyproject.toml").write_text(changed)
    found = locks.problems("operator", tmp_path / "pyproject.toml")
    assert f"requirements/operator.lock has boto3=={boto3.group(1)}, pyproject.toml pins 0.0.1" in found
    assert any(
        p.startswith("requirements/operator.lock holds prometheus-client for pyproject") for p in found
    )
    requirements = tmp_path / "requirements"
    requirements.mkdir()
    assert locks.problems("operator", tmp_path / "pyproject.toml", requirements) == [
        f"requirements/operator.lock is missing: run `{locks.COMPILE_COMMAND}`"
    ]
    (requirements / "assembler.lock").write_text("#    make lock\nsix==1.0 \\\n    # via boto3\n")
    found = locks.problems("assembler", requirements=requirements)
    assert "requirements/assembler.lock: six==1.0 has no --hash" in found
    assert "requirements/assembler.lock lacks boto3==" + boto3.group(1) + " (pyproject.toml)" in found
