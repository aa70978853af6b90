"""`tritonpipeline import`: a TritonPipeline from a Triton model repository's config.pbtxt files. This
module reads the repository and writes the result; the mapping itself is importer/'s."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import quote, reason
from ..importer import (
    COMPLETED,
    CONFIG,
    ERROR,
    NOT_CARRIED,
    WARNING,
    Finding,
    document_yaml,
    import_repository,
    pipeline_name,
)
from ..local.repository import (
    first_subdir_entries,
    has_version_dir,
    latest_version,
    overlap_problem,
    python_files,
)
from ..settings import MAX_CONFIGMAP_BYTES
from .arguments import output_path
from .common import ERROR_PREFIX, EXIT_INVALID, EXIT_OK, OUTPUT_EXISTS, error

NAME = "import"
EXAMPLES = (
    (
        "tritonpipeline import model_repository -o pipeline.yaml",
        "write a pipeline from a Triton model repository you have",
    ),
    (
        "tritonpipeline import examples/published/tutorials --strict",
        "print it; exit 1, writing nothing, if a setting is not carried",
    ),
)


def add(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        NAME,
        help="write a TritonPipeline from a Triton model repository's config.pbtxt files",
        description="Read every MODEL_REPOSITORY/<model>/config.pbtxt (Triton's text format) and write one "
        "TritonPipeline: every model, and every ensemble as a pipeline. Each setting the spec cannot carry "
        "is printed on stderr as `MODEL: field: why`; problems that leave nothing to write (a config that "
        "does not parse, an ensemble calling a missing model, ...) as `error:` lines, with exit 1. Model "
        "files are never read or needed.",
    )
    p.add_argument("repository", metavar="MODEL_REPOSITORY")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        type=output_path,
        help="write the YAML here (atomically; default: stdout); a relative repository path is rewritten "
        "relative to FILE's directory",
    )
    p.add_argument("--name", help="metadata.name (default: the directory's name as a DNS-1035 label)")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 and write nothing when any setting is not carried (or the result would not validate)",
    )
    return p


# its messages (the mapper's own are in importer/findings.py)
IMPORT_NO_DIR = "not a Triton model repository: {dir} does not exist"
IMPORT_NOT_DIR = "not a Triton model repository: {dir} is not a directory"
IMPORT_UNREADABLE = "cannot read {path}: {why}"
IMPORT_NOT_UTF8 = "{path}: not UTF-8 text"
IMPORT_NOT_A_FILE = "{path} is not a file"
IMPORT_BROKEN_LINK = (
    "{path} is a link to {target}, which does not exist: read as no config.pbtxt, as Triton reads it"
)
IMPORT_CONFIG_TOO_LARGE = (
    "{path}: {size} bytes; a model's config is rendered into a ConfigMap, which holds at most {limit} bytes"
)
IMPORT_OUT_NO_DIR = "cannot write output file {file}: directory {dir} does not exist"
IMPORT_OUT_IS_DIR = "cannot write output file {file}: it is a directory"
IMPORT_URI_NOTE = (
    "note: spec.modelRepository.uri is {uri}, the repository {dir} relative to the output file's "
    "directory (relative paths in the spec resolve against the file's directory)"
)
IMPORT_STRICT = (
    "--strict: {count} setting(s) not carried or not valid as imported (listed above); nothing written"
)
IMPORT_WROTE = "wrote {file}: {models} model(s), {pipelines} pipeline(s), {left} setting(s) not carried"
IMPORT_WARNED = ", {warned} warning(s)"  # after IMPORT_WROTE when the import warned: each line counted


@dataclass
class ModelRepositoryDir:
    """What `import` reads from a model repository directory."""

    configs: dict[str, str]  # model directory -> config.pbtxt text
    no_config: dict[str, bool]  # directory without config.pbtxt -> whether it holds version directories
    unreadable: list[str]  # directories whose config.pbtxt could not be read
    version_files: dict[str, tuple[str, dict[str, bool]]]  # model dir -> its first subdirectory, entries
    misplaced: dict[str, str]  # directory without config.pbtxt -> one a level down (`1/config.pbtxt`)
    python_files: dict[str, dict[str, str]]  # model dir -> the Python files of the version Triton loads
    model_dirs: list[Path]  # every (non-hidden) subdirectory: never written into
    errors: list[str]
    warnings: list[str] = field(default_factory=list)  # what the import carries but the user should know


def read_model_repository(root: Path, shown: str) -> ModelRepositoryDir:
    """Every non-hidden subdirectory's config.pbtxt (Triton ignores files beside the model directories;
    hidden entries are left out). `shown`: the directory as the user gave it, for messages."""
    found = ModelRepositoryDir({}, {}, [], {}, {}, {}, [], [])
    try:
        entries = sorted(root.iterdir(), key=lambda e: e.name)
    except OSError as exc:
        found.errors.append(IMPORT_UNREADABLE.format(path=quote(shown), why=reason(exc, root)))
        return found
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        found.model_dirs.append(entry)
        config = entry / CONFIG
        path = os.path.join(shown, entry.name, CONFIG)
        try:
            if config.is_file():
                with config.open("rb") as f:
                    data = f.read(MAX_CONFIGMAP_BYTES + 1)  # /dev/zero behind a link is not read to the end
                if len(data) > MAX_CONFIGMAP_BYTES:
                    size = config.stat().st_size or f"more than {MAX_CONFIGMAP_BYTES}"
                    found.unreadable.append(entry.name)
                    found.errors.append(
                        IMPORT_CONFIG_TOO_LARGE.format(path=path, size=size, limit=MAX_CONFIGMAP_BYTES)
                    )
                    continue
                found.configs[entry.name] = data.decode("utf-8")
            elif config.exists():
                found.unreadable.append(entry.name)
                found.errors.append(IMPORT_NOT_A_FILE.format(path=path))
                continue
            else:  # Triton completes an empty config, picking the backend by the model file
                if config.is_symlink():  # Triton finds no file there either
                    found.warnings.append(IMPORT_BROKEN_LINK.format(path=path, target=os.readlink(config)))
                found.no_config[entry.name] = has_version_dir(entry)
                below = sorted(p.parent.name for p in entry.glob(f"*/{CONFIG}") if p.is_file())
                if below:
                    found.misplaced[entry.name] = f"{below[0]}/{CONFIG}"
            entries_seen = first_subdir_entries(entry)
            if entries_seen is not None:
                found.version_files[entry.name] = entries_seen
            python = python_files(latest_version(entry))
            if python:
                found.python_files[entry.name] = python
        except UnicodeDecodeError:
            found.unreadable.append(entry.name)
            found.errors.append(IMPORT_NOT_UTF8.format(path=path))
        except OSError as exc:
            found.unreadable.append(entry.name)
            found.errors.append(IMPORT_UNREADABLE.format(path=path, why=reason(exc, config)))
    return found


def _import_uri(given: str, output: str | None) -> tuple[str, str | None]:
    """spec.modelRepository.uri: the directory as given, unless it is relative and the output file lives
    where it would resolve elsewhere; then relative to the output file's directory (and a note)."""
    if output is None or os.path.isabs(given):
        return given, None
    out_dir = os.path.dirname(output) or "."
    if os.path.realpath(os.path.join(out_dir, given)) == os.path.realpath(given):
        return given, None
    uri = os.path.relpath(os.path.realpath(given), os.path.realpath(out_dir))
    return uri, IMPORT_URI_NOTE.format(uri=quote(uri), dir=quote(given))


def _output_problems(output: Path, model_dirs: list[Path], force: bool) -> list[str]:
    """Why `import -o` cannot write `output`: a directory, no such directory, an existing file without
    --force, or inside a model directory of the repository (its config.pbtxt and model files are never
    touched)."""
    if output.is_dir():
        return [IMPORT_OUT_IS_DIR.format(file=quote(str(output)))]
    parent = output.parent
    if not parent.is_dir():
        return [IMPORT_OUT_NO_DIR.format(file=quote(str(output)), dir=quote(str(parent)))]
    for written in (output, Path(os.path.realpath(output))):  # a link: the file it names is written
        overlap = overlap_problem(written, model_dirs, [], what="output file")
        if overlap:
            return [overlap]
    if (output.exists() or output.is_symlink()) and not force:
        return [OUTPUT_EXISTS.format(file=quote(str(output)))]
    return []


def _import_line(finding: Finding, shown: str, no_config: Collection[str] = ()) -> str:
    """One stderr line: an error at the config file it concerns (at the model's directory where it has
    none: `no_config`), a warning, or `MODEL: field: why`."""
    if finding.kind == NOT_CARRIED:
        return str(finding)
    if finding.kind == WARNING:
        return f"warning: {finding}"
    if finding.kind == COMPLETED:
        return f"note: {finding}"
    if not finding.model:
        return ERROR_PREFIX + str(finding)
    where = os.path.join(shown, finding.model, "" if finding.model in no_config else CONFIG)
    if finding.position is not None:
        where += f":{finding.position[0]}:{finding.position[1]}"
    return f"{ERROR_PREFIX}{where}: " + ": ".join(part for part in (finding.field, finding.message) if part)


def _write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same directory, renamed over it: a reader
    sees the old file or the new one, and a failure leaves no partial file behind."""
    if path.exists():
        mode = path.stat().st_mode & 0o777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def execute(args: argparse.Namespace) -> int:
    """A TritonPipeline from a Triton model repository's config.pbtxt files."""
    given: str = args.repository
    root = Path(given)
    errors: list[str] = []
    repo: ModelRepositoryDir | None = None
    if not root.exists():
        errors.append(IMPORT_NO_DIR.format(dir=quote(given)))
    elif not root.is_dir():
        errors.append(IMPORT_NOT_DIR.format(dir=quote(given)))
    else:
        repo = read_model_repository(root, given)
        errors += repo.errors
    output = Path(args.output) if args.output else None
    if output is not None:
        errors += _output_problems(output, repo.model_dirs if repo else [], args.force)
    uri, note = _import_uri(given, args.output)
    result = None
    if repo is not None:
        result = import_repository(
            repo.configs,
            repo.no_config,
            name=args.name or pipeline_name(root.resolve().name),
            uri=uri,
            source=given,
            unreadable=repo.unreadable,
            version_files=repo.version_files,
            misplaced=repo.misplaced,
            python_files=repo.python_files,
        )
    findings = list(result.findings) if result is not None else []
    no_config = repo.no_config if repo is not None else {}
    failed = [_import_line(f, given, no_config) for f in findings if f.kind == ERROR]
    failed += errors
    if failed or result is None or result.document is None:  # only the errors: the rest once they are fixed
        for line in failed:
            error(line)
        return EXIT_INVALID
    for warning in repo.warnings if repo is not None else []:
        print(f"warning: {warning}", file=sys.stderr)
    for kind in (COMPLETED, NOT_CARRIED, WARNING):
        for finding in findings:
            if finding.kind == kind:
                print(_import_line(finding, given, no_config), file=sys.stderr)
    left_out = [f for f in findings if f.kind in (NOT_CARRIED, WARNING)]
    if args.strict and left_out:
        error(IMPORT_STRICT.format(count=len(left_out)))
        return EXIT_INVALID
    text = document_yaml(result, given)
    if output is None:
        sys.stdout.write(text)
        return EXIT_OK
    if note:
        print(note, file=sys.stderr)
    try:
        _write_atomically(Path(os.path.realpath(output)), text)  # through a link, to the file it names
    except OSError as exc:
        error(f"cannot write output file {quote(str(output))}: {reason(exc, output)}")
        return EXIT_INVALID
    spec = result.document["spec"]
    left, warned = len(result.of_kind(NOT_CARRIED)), len(result.of_kind(WARNING))
    wrote = IMPORT_WROTE.format(
        file=output, models=len(spec["models"]), pipelines=len(spec["pipelines"]), left=left
    )
    print(wrote + (IMPORT_WARNED.format(warned=warned) if warned else ""))
    return EXIT_OK
