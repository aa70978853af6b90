"""The hashed lock files the images install their Python dependencies from (`make lock` writes them),
and the check that they still hold pyproject.toml's pins (`--check`: `make lint`,
tests/unit/test_dockerfile.py).

    requirements/operator.lock    the operator image: the wheel's dependencies with the operator, s3 and
                                  gcs extras (`tritonpipeline run`, and `assemble` with s3:// and gs://)
    requirements/assembler.lock   the assembler image (the Dockerfile's target `assembler`, the init
                                  container of every Triton pod): the s3 and gcs extras only; resolved
                                  under operator.lock, so what both hold is the same version

pip-compile (pip-tools, pinned below, in a virtual environment of its own under the tool cache) resolves
them on Linux with the Python minor version of the Dockerfile's PYTHON_IMAGE, the images' platform; every
file of each version is hashed, so a lock serves amd64 and arm64 builds alike. The Dockerfile installs a
lock with `pip install --require-hashes`, then the project's wheel with `--no-deps`: nothing is resolved
while an image builds, and a file whose hash is not in the lock is refused.

    python tools/locks.py [--upgrade]   (re)write both locks: pyproject's pins, the transitive ones kept
                                        unless --upgrade (then the newest that fit)
    python tools/locks.py --check       what no longer matches pyproject.toml (offline, no resolver)
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
DOCKERFILE = ROOT / "Dockerfile"
REQUIREMENTS = ROOT / "requirements"
# image -> the extras its lock holds (the core dependencies always)
LOCKS: dict[str, tuple[str, ...]] = {"operator": ("operator", "s3", "gcs"), "assembler": ("s3", "gcs")}
# the lock another one is resolved under (pip-compile --constraint): the same version wherever both hold one
CONSTRAINED_BY = {"assembler": "operator"}
PIP_TOOLS = ("pip-tools==7.6.2", "pip==26.3")
COMPILE_COMMAND = "make lock"
# pip settings of this machine that must not reach a lock: local wheel directories (a file found there is
# not the index's, and its hash would be the only one recorded)
DROPPED_PIP_ENV = ("PIP_FIND_LINKS", "PIP_NO_INDEX")
PROJECT = "tritonpipeline"
DIRECT = f"{PROJECT} (pyproject.toml)"  # pip-compile's "# via" for what pyproject itself asks for
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;,\\]+)")


def lock_path(image: str) -> Path:
    return REQUIREMENTS / f"{image}.lock"


def normalized(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _toml(text: str) -> dict[str, Any]:
    """tomllib's reading (Python 3.11+, which the tools run on; mypy checks the package for 3.10)."""
    loaded: dict[str, Any] = importlib.import_module("tomllib").loads(text)
    return loaded


def pyproject_pins(extras: tuple[str, ...], pyproject: Path = PYPROJECT) -> dict[str, str]:
    """name -> version of every requirement of the core and `extras` (each pinned with ==; one that is
    not is an error: a lock can only agree with a pin)."""
    project = _toml(pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    pins: dict[str, str] = {}
    for requirement in requirements:
        m = _PIN.match(requirement)
        if m is None:
            raise ValueError(f"pyproject.toml: {requirement!r} is not pinned with ==")
        pins[normalized(m.group(1))] = m.group(2)
    return pins


def parse_lock(text: str) -> dict[str, tuple[str, list[str], list[str]]]:
    """name -> (version, hashes, what it is there for: pip-compile's "# via" names) of every entry."""
    entries: dict[str, tuple[str, list[str], list[str]]] = {}
    current: str | None = None
    in_via = False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not line[0].isspace():
            in_via = False
            current = None
            m = _PIN.match(stripped)
            if m and not stripped.startswith(("#", "-")):
                current = normalized(m.group(1))
                entries[current] = (m.group(2), [], [])
            continue
        if current is None:
            continue
        if stripped.startswith("--hash="):
            entries[current][1].append(stripped.removeprefix("--hash=").rstrip(" \\"))
        elif stripped.startswith("# via"):
            rest = stripped.removeprefix("# via").strip()
            in_via = not rest
            if rest:
                entries[current][2].append(rest)
        elif in_via and stripped.startswith("#   "):
            entries[current][2].append(stripped.removeprefix("#").strip())
        else:
            in_via = False
    return entries


def problems(image: str, pyproject: Path = PYPROJECT, requirements: Path = REQUIREMENTS) -> list[str]:
    """What makes `image`'s lock disagree with pyproject.toml (or with the lock it is resolved under):
    each a sentence; empty when it holds exactly pyproject's pins, every entry hashed."""
    path = requirements / f"{image}.lock"
    where = f"{path.parent.name}/{path.name}"
    if not path.is_file():
        return [f"{where} is missing: run `{COMPILE_COMMAND}`"]
    text = path.read_text()
    entries = parse_lock(text)
    pins = pyproject_pins(LOCKS[image], pyproject)
    found: list[str] = []
    if f"#    {COMPILE_COMMAND}\n" not in text:
        found.append(f"{where} was not written by `{COMPILE_COMMAND}`")
    for name, version in sorted(pins.items()):
        if name not in entries:
            found.append(f"{where} lacks {name}=={version} (pyproject.toml)")
        elif entries[name][0] != version:
            found.append(f"{where} has {name}=={entries[name][0]}, pyproject.toml pins {version}")
    direct = {name for name, (_, _, via) in entries.items() if DIRECT in via}
    for name in sorted(direct - set(pins)):
        found.append(
            f"{where} holds {name} for pyproject.toml, which no longer asks for it in {LOCKS[image]}"
        )
    for name, (version, hashes, _) in sorted(entries.items()):
        if not hashes:
            found.append(f"{where}: {name}=={version} has no --hash")
        if name == PROJECT:
            found.append(f"{where} holds {PROJECT} itself (the Dockerfile installs its wheel with --no-deps)")
    base = CONSTRAINED_BY.get(image)
    if base is not None and (requirements / f"{base}.lock").is_file():
        under = parse_lock((requirements / f"{base}.lock").read_text())
        for name, (version, _, _) in sorted(entries.items()):
            if name in under and under[name][0] != version:
                found.append(f"{where} has {name}=={version}, {base}.lock {under[name][0]}")
    return found


def image_python() -> str:
    """The Python minor version of the Dockerfile's PYTHON_IMAGE (python:3.11.13-slim-bookworm: 3.11)."""
    m = re.search(r"^ARG PYTHON_IMAGE=python:(\d+\.\d+)\.", DOCKERFILE.read_text(), re.M)
    if m is None:
        raise SystemExit("Dockerfile: no `ARG PYTHON_IMAGE=python:X.Y.Z-...` line")
    return m.group(1)


def pip_compile(log: TextIO = sys.stdout) -> Path:
    """pip-compile of PIP_TOOLS in a virtual environment of its own, made on first use (cached by version)."""
    from tritonpipeline.local.tritonserver import cache_root

    venv = cache_root() / "pip-tools" / "-".join(p.split("==")[1] for p in PIP_TOOLS) / "venv"
    done = venv / ".installed"
    if not done.exists():
        print(f">> installing {' '.join(PIP_TOOLS)} into {venv} (first time)", file=log, flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, *PIP_TOOLS], check=True)
        done.touch()
    return venv / "bin" / "pip-compile"


def compile_locks(upgrade: bool) -> None:
    """Write every lock (the one others are resolved under first), from pyproject.toml."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not sys.platform.startswith("linux") or here != image_python():
        raise SystemExit(
            f"the locks are resolved for the images' platform, Linux with Python {image_python()}: "
            f"run `{COMPILE_COMMAND}` there (this is {sys.platform}, Python {here})"
        )
    tool = pip_compile()
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_PIP_ENV}
    env["CUSTOM_COMPILE_COMMAND"] = COMPILE_COMMAND
    REQUIREMENTS.mkdir(exist_ok=True)
    for image in sorted(LOCKS, key=lambda i: i in CONSTRAINED_BY):
        cmd = [str(tool), "--quiet", "--generate-hashes", "--allow-unsafe", "--strip-extras"]
        cmd += ["--no-emit-index-url", "--no-emit-find-links", "--no-emit-trusted-host"]
        cmd += [f"--extra={extra}" for extra in LOCKS[image]]
        if image in CONSTRAINED_BY:
            cmd.append(f"--constraint={lock_path(CONSTRAINED_BY[image]).relative_to(ROOT)}")
        if upgrade:
            cmd.append("--upgrade")
        cmd += [f"--output-file={lock_path(image).relative_to(ROOT)}", "pyproject.toml"]
        print(f">> {lock_path(image).relative_to(ROOT)}: extras {', '.join(LOCKS[image])}", flush=True)
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only say what no longer matches pyproject.toml")
    parser.add_argument("--upgrade", action="store_true", help="newest transitive versions that fit the pins")
    args = parser.parse_args(argv)
    if not args.check:
        compile_locks(args.upgrade)
    found = [p for image in LOCKS for p in problems(image)]
    for line in found:
        print(line, file=sys.stderr)
    if found:
        print(f"run `{COMPILE_COMMAND}` and commit requirements/", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
