"""Lay compiled artifacts out on disk as a Triton model repository (the I/O side of the compiler)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from .errors import Problem, SpecError
from .spec import TritonPipeline


def local_model_root(
    tp: TritonPipeline, cr_file: str | Path | None, override: str | Path | None = None
) -> Path | None:
    """Directory holding the model files: `override`, or a local modelRepository.uri resolved against
    the CR file's directory. None for pvc://, s3:// and gs:// sources (they exist only in a cluster)."""
    if override is not None:
        return Path(override).resolve()
    if tp.spec.model_repository.scheme != "local":
        return None
    uri = Path(tp.spec.model_repository.uri).expanduser()
    base = Path(cr_file).resolve().parent if cr_file else Path.cwd()
    return (uri if uri.is_absolute() else base / uri).resolve()


# Triton serves <model>/<version>/ for each subdirectory it reads as a version number and loads the
# files from <model>/<that number>/, so only canonical decimal names work (`01` is ignored with a warning,
# `v1` and `latest` are ignored); `warmup`, `initial_state` and `configs` are reserved, not versions.
VERSION_DIR_RE = re.compile(r"^(0|[1-9][0-9]*)$")
NO_VERSION_DIR = (
    "model directory {dir!r} has no version directory: Triton loads a model from a numeric version "
    "subdirectory such as {dir}/1/ (found: {found})"
)


def has_version_dir(model_dir: Path) -> bool:
    """Whether Triton finds a version to load under a model directory."""
    return any(VERSION_DIR_RE.match(e.name) and e.is_dir() for e in model_dir.iterdir())


def check_model_dirs(tp: TritonPipeline, root: Path) -> list[Problem]:
    """Every declared model must have a directory under the model root, holding a version directory."""
    if not root.is_dir():
        return [
            Problem("spec.modelRepository.uri", f"model repository directory {str(root)!r} does not exist")
        ]
    problems = []
    for i, model in enumerate(tp.spec.models):
        d = root / model.name
        if not d.is_dir():
            problems.append(
                Problem(
                    f"spec.models[{i}].name", f"model directory {model.name!r} not found under {str(root)!r}"
                )
            )
        else:
            problem = _version_problem(d)
            if problem:
                problems.append(Problem(f"spec.models[{i}].name", problem))
    return problems


def _version_problem(model_dir: Path) -> str | None:
    try:
        if has_version_dir(model_dir):
            return None
        entries = sorted(e.name + ("/" if e.is_dir() else "") for e in model_dir.iterdir())
    except OSError as err:
        return f"model directory {str(model_dir)!r} cannot be read: {err.strerror or err}"
    found = ", ".join(entries[:8]) + (", ..." if len(entries) > 8 else "") if entries else "nothing"
    return NO_VERSION_DIR.format(dir=str(model_dir), found=found)


class RepositoryFiles(Protocol):
    """What a repository is made of: generated files, and the declared models whose files are linked."""

    @property
    def files(self) -> Mapping[str, bytes]: ...

    @property
    def models(self) -> Sequence[str]: ...


def write_repository(
    artifacts: RepositoryFiles, dest: str | Path, model_root: Path | None, *, force: bool = False
) -> Path:
    """Write a complete repository at `dest`: generated files, plus each declared model's files from
    `model_root` linked (symlinks), not copied. Atomic: on error nothing is left behind."""
    dest = Path(dest).resolve()
    if dest.exists() and not dest.is_dir():
        raise SpecError([Problem("", f"output path {str(dest)!r} exists and is not a directory")])
    if dest.is_dir() and any(dest.iterdir()) and not force:
        raise SpecError(
            [Problem("", f"output directory {str(dest)!r} is not empty (pass --force to replace it)")]
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        tmp.chmod(0o755)
        if model_root is not None:
            for name in artifacts.models:
                src_dir = model_root / name
                (tmp / name).mkdir()
                for entry in sorted(src_dir.iterdir()):
                    if entry.name == "config.pbtxt":
                        continue  # the generated config replaces any shipped one
                    os.symlink(entry.resolve(), tmp / name / entry.name)
        for rel, data in artifacts.files.items():
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
            os.rename(dest, old / "repo")
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
