"""Lay compiled artifacts out on disk as a Triton model repository (the I/O side of the compiler)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Protocol

from google.protobuf import text_format

from ..compiler.autocomplete import POLICY_FIELD, PYTHON_MODEL_FILE, complete, completion
from ..compiler.plan_types import LINK_TO_MODEL_FILE
from ..compiler.triton_config import model_config, readable_extra_config
from ..errors import Problem, SpecError, quote, reason
from ..importer import MODEL_FILES
from ..spec import PLATFORM_BACKEND, Model, TritonPipeline
from ..triton import tritonserver_options

MARKER = ".tritonpipeline-rendered"  # in every rendered repository: the entries it wrote (JSON)


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


def first_subdir_entries(model_dir: Path) -> tuple[str, dict[str, bool]] | None:
    """What Triton looks at to pick the backend of a config that names none: the model directory's first
    subdirectory in byte order, whatever its name (core's AutoCompleteBackendFields), and its entries
    (name -> is a directory); None when it has no subdirectory."""
    subdirs = sorted(e.name for e in model_dir.iterdir() if e.is_dir())
    if not subdirs:
        return None
    return subdirs[0], {e.name: e.is_dir() for e in (model_dir / subdirs[0]).iterdir()}


SELF_DECOUPLED = (
    "{file} makes the model decoupled in auto_complete_config (line {line}): declare `decoupled: true` "
    "(a step's model is loaded with the policy the spec declares, and Triton refuses a model whose "
    "backend changes it)"
)
COMPLETION_REFUSED = (
    "{file}'s auto_complete_config ({call}; read, not run) is refused by the Python backend with the "
    "config the spec renders: {why}: Triton fails to load the model"
)
BATCHING_RAISED = (
    "{file}'s auto_complete_config sets max_batch_size {given} (read, not run), so Triton loads the model "
    "with it, and the spec says maxBatchSize {have}: declare maxBatchSize: {given} (steps and pipelines are "
    "checked with the spec's)"
)
# the spec field behind each config field the Python backend's completion concerns (autocomplete.Refusal)
COMPLETED_FIELD = {
    "": "name",
    "input": "inputs",
    "output": "outputs",
    "max_batch_size": "maxBatchSize",
    "sequence_batching": "sequenceBatching",
    "model_transaction_policy": "decoupled",
    POLICY_FIELD: "decoupled",
}
PYTHON_FILE_MAX_BYTES = 1 << 20  # larger files are not read for what they set (no model.py is that big)


def _versions(model_dir: Path) -> dict[int, Path]:
    """The version directories Triton finds under a model directory, by number."""
    return {int(e.name): e for e in model_dir.iterdir() if VERSION_DIR_RE.match(e.name) and e.is_dir()}


def latest_version(model_dir: Path, specific: Sequence[int] = ()) -> Path | None:
    """The highest version directory Triton loads: of all (version policy `latest` or `all`), or of the
    `specific` versions a policy lists."""
    versions = {n: e for n, e in _versions(model_dir).items() if not specific or n in specific}
    return versions[max(versions)] if versions else None


NO_MODEL_FILE = (
    "no {file} in {where}: the file {backend} loads from each version Triton serves, and Triton cannot load "
    "the model without it (the Python backend's load even hangs: 'Python model file not found'); add it, or "
    "name another file with extraConfig's default_model_filename"
)
NO_LISTED_VERSION = (
    "model directory {dir!r} has none of the versions versionPolicy lists ({versions}; found: {found}): "
    "Triton refuses the model ('at least one version must be available under the version policy')"
)


def served_versions(model: Model, model_dir: Path) -> list[int]:
    """The version numbers Triton loads from a model directory under the model's versionPolicy: the
    latest `numVersions` (default 1), all, or the `specific` ones that are there."""
    found, policy = sorted(_versions(model_dir)), model.version_policy
    if policy is None or policy.policy == "latest":
        count = policy.num_versions if policy is not None and policy.num_versions else 1
        return found[-count:]
    if policy.policy == "specific":
        return [v for v in found if v in policy.versions]
    return found


STEP_VERSION_NOT_LOADED = (
    "Triton loads versions {served} of {dir!r} (versionPolicy {policy}; version directories: {found}), "
    "not {version}: it refuses the ensemble ('ensemble {pipeline!r} depends on {model!r} whose required "
    "version {version} is not loaded')"
)


def python_files(version_dir: Path | None) -> dict[str, str]:
    """The Python files (name -> text) of a version directory; {} without one. Files that cannot be read
    as UTF-8 text are left out (Triton's load says why)."""
    found: dict[str, str] = {}
    for entry in sorted(version_dir.iterdir()) if version_dir is not None else []:
        if entry.suffix != ".py" or not entry.is_file() or entry.stat().st_size > PYTHON_FILE_MAX_BYTES:
            continue
        try:
            found[entry.name] = entry.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return found


def check_model_dirs(tp: TritonPipeline, root: Path) -> list[Problem]:
    """Every declared model must have a directory under the model root, holding a version directory; a
    Python model's config as the spec renders it must be one its model.py's auto_complete_config
    completes without refusal (Triton's auto-complete on), and to the maxBatchSize the spec declares."""
    if not root.is_dir():
        return [
            Problem("spec.modelRepository.uri", f"model repository directory {str(root)!r} does not exist")
        ]
    problems = []
    stepped = {step.model for pipeline in tp.spec.pipelines for step in pipeline.steps}
    completing = tritonserver_options.auto_complete_off(tp.spec.server.args) is None
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
            specific = _specific(model)
            if problem:
                problems.append(Problem(f"spec.models[{i}].name", problem))
            elif specific and latest_version(d, specific) is None:
                found = ", ".join(str(v) for v in sorted(_versions(d)))
                listed = ", ".join(str(v) for v in specific)
                message = NO_LISTED_VERSION.format(dir=str(d), versions=listed, found=found)
                problems.append(Problem(f"spec.models[{i}].versionPolicy.versions", message))
            else:
                problems += _model_file_problems(model, i, d)
                if model.backend == "python" and completing:
                    problems += _completion_problems(model, i, d, run_by_step=model.name in stepped)
    return problems + _step_version_problems(tp, root)


def _step_version_problems(tp: TritonPipeline, root: Path) -> list[Problem]:
    """Each step that calls a version calls one Triton loads from the model's directory (a version a
    `specific` policy does not list is the compiler's finding)."""
    models = {m.name: m for m in tp.spec.models}
    problems = []
    for p, pipeline in enumerate(tp.spec.pipelines):
        for j, step in enumerate(pipeline.steps):
            model, d = models.get(step.model), root / step.model
            if step.version is None or model is None or not d.is_dir():
                continue
            specific = _specific(model)
            served = served_versions(model, d)
            if step.version in served or not served or (specific and step.version not in specific):
                continue  # none loads: the model's problem; one the policy does not list: the compiler's
            policy = model.version_policy.policy if model.version_policy is not None else "latest"
            message = STEP_VERSION_NOT_LOADED.format(
                served=", ".join(map(str, served)),
                dir=str(d),
                policy=policy,
                found=", ".join(map(str, sorted(_versions(d)))),
                version=step.version,
                pipeline=pipeline.name,
                model=step.model,
            )
            problems.append(Problem(f"spec.pipelines[{p}].steps[{j}].version", message))
    return problems


def _completion_problems(model: Model, i: int, model_dir: Path, *, run_by_step: bool) -> list[Problem]:
    """What the Python backend does with the config the spec renders, given the auto_complete_config of
    the model's model.py (read, never run): each call it refuses (Triton fails to load the model), and a
    max_batch_size it raises (Triton loads the model batching otherwise than the spec says)."""
    version, file = latest_version(model_dir, _specific(model)), model_file(model) or PYTHON_MODEL_FILE
    done = completion(python_files(version).get(file, ""))
    if version is None or done is None:
        return []
    try:
        cfg = model_config(model, cpu_only=True, run_by_step=run_by_step)
    except text_format.ParseError:  # the compiler's finding (extraConfig)
        return []
    where, declared = f"{model.name}/{version.name}/{file}", cfg.max_batch_size
    problems = []
    for refused in complete(cfg, done):
        path = f"spec.models[{i}].{COMPLETED_FIELD.get(refused.field, 'name')}"
        if refused.field == POLICY_FIELD and done.decoupled:
            message = SELF_DECOUPLED.format(file=where, line=done.policy_line)
        else:
            message = COMPLETION_REFUSED.format(file=where, call=refused.call, why=refused.why)
        problems.append(Problem(path, message))
    if not problems and cfg.max_batch_size != declared:
        message = BATCHING_RAISED.format(file=where, given=cfg.max_batch_size, have=declared)
        problems.append(Problem(f"spec.models[{i}].maxBatchSize", message))
    return problems


def _specific(model: Model) -> list[int]:
    """The versions a `specific` version policy lists; [] for the others."""
    policy = model.version_policy
    return list(policy.versions) if policy is not None and policy.policy == "specific" else []


def model_file(model: Model) -> str | None:
    """The file (or directory) Triton's backend loads from each version directory: the extraConfig's
    default_model_filename, else the backend's default, as core picks a backend by it (MODEL_FILES:
    model.py for python). None where that is not known: an ensemble, a custom backend, a backend with
    several (tensorflow). An extraConfig that does not parse is the compiler's finding."""
    extra = readable_extra_config(model)
    if extra is not None and extra.default_model_filename:
        return str(extra.default_model_filename)
    wanted = (
        [("platform", model.platform)]
        if model.platform
        else [
            ("backend", model.backend),
            *(("platform", p) for p, b in PLATFORM_BACKEND.items() if b == model.backend),
        ]
    )
    names = [name for name, key, value, _ in MODEL_FILES if (key, value) in wanted]
    return names[0] if len(names) == 1 else None


def _model_file_problems(model: Model, i: int, model_dir: Path) -> list[Problem]:
    """Each version Triton loads holds the model file its backend loads (Triton fails to load the model
    otherwise: 'unable to find ...')."""
    name = model_file(model)
    if name is None:
        return []
    missing = [v for v in served_versions(model, model_dir) if not (model_dir / str(v) / name).exists()]
    if not missing:
        return []
    where = ", ".join(f"{model_dir}/{v}/" for v in missing)
    backend = model.platform or model.backend
    return [Problem(f"spec.models[{i}].name", NO_MODEL_FILE.format(file=name, where=where, backend=backend))]


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
    artifacts: RepositoryFiles,
    dest: str | Path,
    model_root: Path | None,
    *,
    force: bool = False,
    protect: Iterable[str | Path] = (),
) -> Path:
    """Write a complete repository at `dest`: generated files, plus each declared model's files from
    `model_root` linked (symlinks), not copied, and a MARKER listing what was written. Atomic: on error
    nothing is left behind. Never touches the model source or the `protect`ed files (the CR): an output
    that overlaps them is refused. `force` replaces only a tree an earlier render wrote, unchanged."""
    dest = Path(dest).resolve()
    files, linked = _linked_files(artifacts.files, artifacts.models, model_root)
    links = _model_links(artifacts.models, model_root) + linked
    sources = [*model_sources(artifacts.models, model_root), *(target for _, target in links)]
    overlap = overlap_problem(dest, sources, protect, what="output directory")
    if overlap:
        raise SpecError.one(overlap)
    try:
        _check_replaceable(dest, force)
        _make_parent(dest)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    except OSError as exc:
        raise _write_error(dest, exc) from None
    try:
        _fill(tmp, files, links)
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
            os.rename(dest, old / "repo")
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _write_error(dest, exc) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _fill(tmp: Path, files: Mapping[str, bytes], links: list[tuple[str, Path]]) -> None:
    """Lay the links and generated files out in `tmp`, then the MARKER listing all of them."""
    tmp.chmod(0o755)
    linked = {rel: target for rel, target in links}
    for rel in files:
        through = [p for p in (rel, *(str(q) for q in PurePosixPath(rel).parents)) if p in linked]
        if through:  # writing it would follow the link and overwrite the user's model file
            raise SpecError.one(
                f"generated file {quote(rel)} would overwrite the model file {quote(linked[through[0]])}"
            )
    for rel, target in links:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, tmp / rel)
    for rel, data in files.items():
        out = tmp / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    digests = {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
    marker = {"writtenBy": "tritonpipeline", "entries": tree(tmp), "sha256": digests}
    (tmp / MARKER).write_text(json.dumps(marker, indent=1, sort_keys=True) + "\n")


LINK_OUTSIDE_MODEL = (
    "labelFilename {file!r} of model {model!r} is not a file in its directory {dir!r}: a router copying "
    "the output links to it"
)


def _linked_files(
    files: Mapping[str, bytes], models: Sequence[str], model_root: Path | None
) -> tuple[dict[str, bytes], list[tuple[str, Path]]]:
    """`files` less the generated LINK_TO_MODEL_FILE ones, and those as (path, resolved target) links
    into the models' directories (a router's labels file). Without a model root they stay as written."""
    rest: dict[str, bytes] = {}
    links = []
    for rel, data in files.items():
        if model_root is None or not data.startswith(LINK_TO_MODEL_FILE):
            rest[rel] = data
            continue
        model, _, file = data[len(LINK_TO_MODEL_FILE) :].decode().partition("/")
        directory = (model_root / model).resolve()
        target = (directory / file).resolve()
        if model not in models or not target.is_relative_to(directory) or not target.is_file():
            message = LINK_OUTSIDE_MODEL.format(file=file, model=model, dir=str(directory))
            raise SpecError.one(message)
        links.append((rel, target))
    return rest, links


def _model_links(models: Sequence[str], model_root: Path | None) -> list[tuple[str, Path]]:
    """(path in the repository, resolved target) of every model file to link; a shipped config.pbtxt is
    left out (the generated one replaces it)."""
    if model_root is None:
        return []
    links = []
    for name in models:
        src_dir = model_root / name
        try:
            entries = sorted(src_dir.iterdir())
            links += [(f"{name}/{e.name}", e.resolve()) for e in entries if e.name != "config.pbtxt"]
        except OSError as exc:
            raise SpecError(
                [
                    Problem(
                        "spec.modelRepository.uri",
                        f"cannot read model directory {quote(src_dir)}: {reason(exc, src_dir)}",
                    )
                ]
            ) from None
    return links


def model_sources(models: Iterable[str], model_root: Path | None) -> list[Path]:
    """The model root and each declared model's directory (which may be a symlink to elsewhere)."""
    return [model_root, *(model_root / m for m in models)] if model_root else []


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def overlap_problem(
    dest: Path, sources: Iterable[Path], protect: Iterable[str | Path], *, what: str
) -> str | None:
    """Why writing (or replacing) `dest` could destroy user files, or None: it is, lies inside or contains
    a model source, or it is or contains a protected file. All paths are compared resolved."""
    dest = dest.resolve()
    for src in sources:
        src = src.resolve()
        if _inside(dest, src):
            where = "is" if dest == src else "lies inside"
            return f"{what} {quote(dest)} {where} the model source {quote(src)}; choose a path outside it"
        if _inside(src, dest):
            return f"{what} {quote(dest)} contains the model source {quote(src)}; choose a path outside it"
    for kept in protect:
        kept = Path(kept).resolve()
        if _inside(kept, dest):
            where = "is" if dest == kept else "contains"
            return f"{what} {quote(dest)} {where} the TritonPipeline file {quote(kept)}; choose another path"
    return None


def tree(root: Path) -> dict[str, str]:
    """Every entry under `root`, symlinks not followed: relative path -> 'dir', 'link' or 'file'."""
    out: dict[str, str] = {}
    for entry in os.scandir(root):
        rel = entry.name
        if entry.is_symlink():
            out[rel] = "link"
        elif entry.is_dir():
            out[rel] = "dir"
            out.update({f"{rel}/{k}": v for k, v in tree(Path(entry.path)).items()})
        else:
            out[rel] = "file"
    return out


def _is_cache(rel: str, kind: str) -> bool:
    """Python's bytecode caches (Triton's Python backend writes them next to a generated model.py)."""
    parts = PurePosixPath(rel).parts
    return "__pycache__" in parts and (kind == "dir" or rel.endswith(".pyc"))


def _check_replaceable(dest: Path, force: bool) -> None:
    """An existing `dest` must be empty, or (with force) a tree an earlier render wrote and nobody
    added to since: its MARKER lists every entry."""
    if dest.exists() and not dest.is_dir():
        raise SpecError.one(f"output path {quote(dest)} exists and is not a directory")
    if not dest.is_dir() or not any(dest.iterdir()):
        return
    if not force:
        raise SpecError.one(f"output directory {quote(dest)} is not empty (pass --force to replace it)")
    marker = dest / MARKER
    try:
        written = json.loads(marker.read_text())["entries"] if not marker.is_symlink() else None
    except (OSError, ValueError, KeyError, TypeError):
        written = None
    if not isinstance(written, dict):
        raise SpecError.one(
            f"output directory {quote(dest)} was not written by tritonpipeline (it has no {MARKER} "
            "file); --force only replaces an earlier render: remove it yourself or choose another"
        )
    extra = sorted(
        rel
        for rel, kind in tree(dest).items()
        if rel != MARKER and written.get(rel) != kind and not _is_cache(rel, kind)
    )
    if extra:
        raise SpecError.one(
            f"output directory {quote(dest)} holds {len(extra)} file(s) an earlier render did not "
            f"write ({', '.join(quote(e) for e in extra[:3])}{', ...' if len(extra) > 3 else ''}); "
            "--force does not remove them: move them away or choose another directory"
        )
    changed = sorted(
        rel for rel, digest in _digests(marker).items() if _digest(dest / rel) not in (digest, None)
    )
    if changed:
        raise SpecError.one(
            f"output directory {quote(dest)} holds {len(changed)} generated file(s) changed since they were "
            f"rendered ({', '.join(quote(e) for e in changed[:3])}{', ...' if len(changed) > 3 else ''}); "
            "--force does not overwrite edits: keep them elsewhere (or put the change in the spec, e.g. "
            "extraConfig), then remove the directory or choose another"
        )


def _digests(marker: Path) -> dict[str, str]:
    """The sha256 of each generated file as a render wrote it ({} for a marker from before they were
    recorded)."""
    try:
        found = json.loads(marker.read_text()).get("sha256", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def _digest(path: Path) -> str | None:
    """sha256 of a regular file, None when it is gone or not one (a link, a directory)."""
    if path.is_symlink() or not path.is_file():
        return None
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _make_parent(dest: Path) -> None:
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:  # a path component is a file
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), exc.filename) from None


def _write_error(dest: Path, exc: OSError) -> SpecError:
    temp = f".{dest.name}."  # our temporary directories are no news to the user
    named = exc.filename and not any(part.startswith(temp) for part in Path(str(exc.filename)).parts)
    why = reason(exc, dest) if named else (exc.strerror or str(exc))
    return SpecError.one(f"cannot write output directory {quote(dest)}: {why}")
