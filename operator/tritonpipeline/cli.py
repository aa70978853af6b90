"""`tritonpipeline` command line: validate, render, graph and serve TritonPipeline files; import one from a
Triton model repository."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import importlib.metadata
import ipaddress
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import typing
import urllib.parse
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import extras, yamltext
from .compiler import Artifacts, graph_problems_beside, tracing
from .compiler.importer import (
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
from .compiler.visualize import to_dot, to_mermaid
from .errors import Problem, SpecError, clip, quote, reason
from .kube import checks, ownership
from .kube.meta import GRPC_PORT, HTTP_PORT, METRICS_PORT
from .local.repository import (
    check_model_dirs,
    first_subdir_entries,
    has_version_dir,
    latest_version,
    local_model_root,
    model_sources,
    overlap_problem,
    python_files,
    write_repository,
)
from .runtime.logs import FORMATS
from .settings import BAD_VALUE, MAX_CONFIGMAP_BYTES, Settings, SettingsError, env_name
from .spec import DNS_LABEL_RE, STDIN, GatewayImplementation, Tracing, TritonPipeline, load_numbered
from .triton import security, tritonserver_options

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_SERVER = 0, 1, 2, 3
FILE_HELP = (
    "a YAML file of TritonPipelines; - reads standard input (a relative modelRepository.uri: from here)"
)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
DEBUG_ENV = "TRITONPIPELINE_DEBUG"  # set: unexpected errors show their traceback
ERROR_PREFIX = "error: "  # how every error line the CLI prints starts (tests/test_cli_errors.py)


def error(message: str) -> None:
    """Print an error on stderr: every error the CLI prints goes through here, and each of its lines
    (a SpecError renders one line a problem) starts with `error: `."""
    for line in message.splitlines() or [""]:
        print(line if line.startswith(ERROR_PREFIX) else ERROR_PREFIX + line, file=sys.stderr)


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one `error:` line naming the command's --help (argparse
    printed the whole usage, then `tritonpipeline serve: error: ...`)."""

    def error(self, message: str) -> typing.NoReturn:
        error(f"{message} (`{self.prog} --help` shows the usage)")
        self.exit(EXIT_USAGE)


@dataclass(frozen=True)
class Compiled:
    source: str
    pipeline: TritonPipeline
    artifacts: Artifacts
    model_root: Path | None
    label: str = ""  # "document N: " where the file holds several documents


def compile_file(path: str, *, cpu_only: bool = False, models: str | None = None) -> list[Compiled]:
    """Parse, compile and (for local sources) check model directories of every document in a file.
    Raises SpecError listing all problems of all documents."""
    if models is not None and not Path(models).is_dir():
        what = "is not a directory" if Path(models).exists() else "does not exist"
        raise SpecError.one(f"--models {quote(models)} {what}: it names the directory of the model files")
    out: list[Compiled] = []
    problems: list[Problem] = []
    for numbered in load_numbered(path, beside=graph_problems_beside):
        tp, prefix = numbered.pipeline, numbered.label
        # the compiler's problems, then what the cluster would refuse, as the operator and webhook do
        artifacts, found = checks.check(tp, Settings.from_env(), cpu_only=cpu_only)
        root = local_model_root(tp, path, models)
        if root is not None:
            found += check_model_dirs(tp, root)
        if found:
            problems += [Problem(prefix + p.path, p.message) for p in found]
        elif artifacts is not None:
            out.append(Compiled(path, tp, artifacts, root, prefix))
    if problems:
        raise SpecError(problems, path)
    return out


def _select(compiled: list[Compiled], name: str | None, source: str) -> Compiled:
    if name is None:
        if len(compiled) == 1:
            return compiled[0]
        names = ", ".join(c.pipeline.name for c in compiled)
        raise SpecError(
            [Problem("", f"the file holds several TritonPipelines ({names}); choose one with --name")], source
        )
    matches = [c for c in compiled if c.pipeline.name == name]
    if len(matches) > 1:
        spaces = ", ".join(repr(c.pipeline.metadata.namespace or "") for c in matches)
        raise SpecError(
            [Problem("metadata.name", f"several TritonPipelines are named {name!r} (namespaces {spaces})")],
            source,
        )
    if matches:
        return matches[0]
    names = ", ".join(c.pipeline.name for c in compiled)
    raise SpecError([Problem("metadata.name", f"no TritonPipeline named {name!r} (found: {names})")], source)


def _summary(c: Compiled) -> str:
    plan = c.artifacts.plan
    routers = plan.routers
    parts = [
        f"{len(plan.models)} model(s)",
        f"{len(plan.ensembles)} ensemble(s)",
        f"{len(routers)} router(s) inserted",
    ]
    return f"{c.source}: TritonPipeline {c.pipeline.name!r} is valid ({', '.join(parts)})"


def _warnings(compiled: list[Compiled]) -> list[Problem]:
    """kube/checks.py's warnings of every document, paths prefixed like errors when there are several."""
    return [Problem(c.label + w.path, w.message) for c in compiled for w in checks.warnings(c.pipeline)]


def _files(path: str) -> list[str]:
    """The pipeline file an output must not overwrite: none when it is standard input."""
    return [] if path == STDIN else [path]


def cmd_validate(args: argparse.Namespace) -> int:
    if args.files.count(STDIN) > 1:
        error(f"{STDIN} (standard input) can be given once")
        return EXIT_USAGE
    results: list[dict[str, Any]] = []
    validated: list[tuple[dict[str, Any], TritonPipeline]] = []  # a valid pipeline, its file's result
    failed = False
    for path in args.files:
        try:
            compiled = compile_file(path, models=args.models)
            warned = _warnings(compiled)
            results.append(
                {
                    "file": path,
                    "valid": True,
                    "pipelines": [
                        {
                            "name": c.pipeline.name,
                            "graph": c.artifacts.graph_summary(),
                            "digest": c.artifacts.digest(),
                        }
                        for c in compiled
                    ],
                    "errors": [],
                    "warnings": SpecError(warned, path).as_dicts(),
                }
            )
            validated += [(results[-1], c.pipeline) for c in compiled]
            if args.output == "text":
                for c in compiled:
                    print(_summary(c))
                for w in warned:
                    print(f"warning: {path}: {w}", file=sys.stderr)
        except SpecError as exc:
            failed = True
            results.append({"file": path, "valid": False, "pipelines": [], "errors": exc.as_dicts()})
            if args.output == "text":
                error(exc.render())
    for result, collided in _name_collisions(validated):
        failed = True
        result["valid"] = False
        result["errors"] = [*result["errors"], *collided.as_dicts()]
        if args.output == "text":
            error(collided.render())
    if args.output == "json":
        print(json.dumps(results, indent=2))
    return EXIT_INVALID if failed else EXIT_OK


def _name_collisions(
    validated: list[tuple[dict[str, Any], TritonPipeline]],
) -> list[tuple[dict[str, Any], SpecError]]:
    """The pipelines validated together that make an object of the same kind and name as another pipeline
    of their namespace (kube/ownership.py `collisions`): each with its file's result and the problem."""
    found = []
    for result, tp in validated:
        others = [o.name for _, o in validated if o.metadata.namespace == tp.metadata.namespace]
        problems = [
            Problem("metadata.name", ownership.NAME_COLLISION.format(other=other, kind=kind, name=name))
            for other, kind, name in ownership.collisions(tp.name, others)
        ]
        if problems:
            found.append((result, SpecError(problems, result["file"])))
    return found


def cmd_render(args: argparse.Namespace) -> int:
    c = _select(compile_file(args.file, cpu_only=args.cpu, models=args.models), args.name, args.file)
    dest = write_repository(
        c.artifacts, args.output_dir, c.model_root, force=args.force, protect=_files(args.file)
    )
    print(f"rendered {c.pipeline.name!r} into {dest} ({len(c.artifacts.files)} generated files)")
    if c.model_root is None:
        print(
            f"note: model files live at {c.pipeline.spec.model_repository.uri}; only generated configs were "
            "written (pass --models DIR to link local copies)"
        )
    for r in c.artifacts.plan.routers:
        print(f"  router {r.name}: {r.source} -> {', '.join(cons.label for _, cons in r.outputs)}")
    return EXIT_OK


def cmd_graph(args: argparse.Namespace) -> int:
    c = _select(compile_file(args.file, models=args.models), args.name, args.file)
    if args.output:
        sources = model_sources(c.artifacts.models, c.model_root)
        overlap = overlap_problem(Path(args.output), sources, _files(args.file), what="output file")
        if overlap:
            raise SpecError.one(overlap)
        if os.path.lexists(args.output) and not os.path.isdir(args.output) and not args.force:
            raise SpecError.one(OUTPUT_EXISTS.format(file=quote(args.output)))
    plan = c.artifacts.plan
    fmt = args.format
    text = to_mermaid(plan) if fmt == "mermaid" else to_dot(plan)
    if fmt in ("png", "svg"):
        dot = shutil.which("dot")
        if dot is None:
            error(
                "--format png/svg needs Graphviz's `dot` (apt-get install graphviz); use --format dot or "
                "mermaid"
            )
            return EXIT_USAGE
        if not args.output:
            error(f"--format {fmt} writes a binary file: pass -o FILE")
            return EXIT_USAGE
        done = subprocess.run([dot, f"-T{fmt}", "-o", args.output], input=text.encode(), capture_output=True)
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip().splitlines() or [
                f"exit code {done.returncode}"
            ]
            raise SpecError.one(f"cannot write output file {quote(args.output)}: dot: {why[-1]}")
        print(f"wrote {args.output}")
        return EXIT_OK
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as exc:
            raise SpecError.one(
                f"cannot write output file {quote(args.output)}: {reason(exc, args.output)}"
            ) from None
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return EXIT_OK


# `import`: its messages (the importer's own are in compiler/importer.py)
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
OUTPUT_EXISTS = (
    "output file {file} exists (perhaps edited since it was written): pass --force to replace it, or choose "
    "another name"
)
IMPORT_URI_NOTE = (
    "note: spec.modelRepository.uri is {uri}, the repository {dir} relative to the output file's "
    "directory (relative paths in the spec resolve against the file's directory)"
)
IMPORT_STRICT = (
    "--strict: {count} setting(s) not carried or not valid as imported (listed above); nothing written"
)
IMPORT_WROTE = "wrote {file}: {models} model(s), {pipelines} pipeline(s), {left} setting(s) not carried"


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


def cmd_import(args: argparse.Namespace) -> int:
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
    print(
        IMPORT_WROTE.format(
            file=output,
            models=len(spec["models"]),
            pipelines=len(spec["pipelines"]),
            left=sum(f.kind == NOT_CARRIED for f in findings),
        )
    )
    return EXIT_OK


def _gpu_present() -> bool:
    return Path("/dev/nvidia0").exists() or Path("/dev/nvidiactl").exists()


def _with_router(c: Compiled, choice: str, cpu: bool) -> Compiled:
    """The pipeline with its routers on the backend `choice` asks for (serve --router), or with `auto` on
    the one spec.server.router names: `auto` takes the native router when it builds here (a C compiler) and
    says why not otherwise; `native` insists. A library this machine carries (TRITONPIPELINE_NATIVE_ROUTER,
    as the operator image sets it) is used instead of a build."""
    from .compiler import compile_pipeline
    from .local.native_router import INSTALLED_ENV, NativeRouterUnavailable, build, installed

    if choice == "auto":
        choice = c.pipeline.spec.server.router
    if choice == "python" or not c.artifacts.plan.routers:
        return c
    try:
        library = installed() if os.environ.get(INSTALLED_ENV) else build()
    except (NativeRouterUnavailable, RuntimeError) as exc:
        if choice == "native":
            raise SpecError.one(f"--router native: {exc}") from None
        print(f"note: the routers run on the Python backend ({exc})")
        return c
    return replace(c, artifacts=compile_pipeline(c.pipeline, cpu_only=cpu, native_router=library))


def cmd_serve(args: argparse.Namespace) -> int:
    from .local.server import HOME_ENV

    if not os.environ.get(HOME_ENV):  # a tritonserver tree of its own needs no wheel's (NVIDIA's image)
        extras.need("serve", "tritonpipeline serve")
    from .local.server import (
        TritonError,
        installed_numpy,
        missing_backends,
        numpy_warning,
        port_in_use,
        server_home,
    )

    cpu = args.cpu if args.cpu is not None else not _gpu_present()
    c = _select(compile_file(args.file, cpu_only=cpu, models=args.models), args.name, args.file)
    if c.model_root is None:
        raise SpecError(
            [
                Problem(
                    "spec.modelRepository.uri",
                    f"serve needs local model files, got "
                    f"{c.pipeline.spec.model_repository.uri!r}; pass --models DIR",
                )
            ],
            args.file,
        )
    try:
        home = server_home()
    except TritonError as exc:
        error(str(exc))
        return EXIT_SERVER
    lacking = missing_backends(c.pipeline.spec.models, home, c.model_root)
    if lacking:
        raise SpecError(lacking, args.file)
    for port_flag in SERVE_PORT_FLAGS:  # before any model loads: tritonserver finds out after all have
        number = getattr(args, port_flag.lstrip("-").replace("-", "_"))
        busy = port_in_use(args.host, number)
        if busy:
            message = SERVE_PORT_IN_USE.format(flag=port_flag, host=args.host, port=number, why=busy)
            error(message)
            return EXIT_SERVER
    if cpu and args.cpu is None:
        print("no GPU found: GPU instance groups run on the CPU (pass --gpu to keep them)")
    c = _with_router(c, args.router, cpu)
    warning = numpy_warning(installed_numpy())
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return _serve(c, args)


# the signals that stop `serve`; from its first temporary file on, each only asks to stop, so that what it
# made is removed whenever one comes (issue 55: a stop during the load left /dev/shm regions behind)
SERVE_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SERVE_TEMP_PREFIX = "tritonpipeline-serve-"  # serve's work directory and log in the temporary directory


def shown_path(path: Path) -> str:
    """A path for a message: relative to the current directory when it is under it, as the user names it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def _tracing_line(traced: Tracing, trace_file: Path) -> str:
    """Where serve's traces go, in words."""
    every = "every request" if traced.rate == 1 else f"1 request in {traced.rate}"
    levels = "+".join(traced.level)
    if traced.mode == "triton":
        return f"Triton's trace file {shown_path(trace_file)} ({levels}, {every})"
    where = traced.url or "http://localhost:4318/v1/traces (Triton's default)"
    return f"OpenTelemetry spans to {where} ({levels}, {every})"


def _serve(c: Compiled, args: argparse.Namespace) -> int:
    """Assemble the repository in a temporary directory, run tritonserver on it until a signal, and
    remove what it made: the work directory (repository, admin key), the log, the Python backend's
    shared memory; after a failure, the log stays and the error line names it (--keep keeps all)."""
    from .local.server import Interrupted, LocalTriton, NotReady, TritonError, last_error, load_failures

    stop = threading.Event()
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in SERVE_SIGNALS}
    workdir: Path | None = None
    log: Path | None = None
    server: LocalTriton | None = None
    failed = False  # keep the log, which the error names
    try:
        try:
            workdir = Path(tempfile.mkdtemp(prefix=SERVE_TEMP_PREFIX))
            fd, name = tempfile.mkstemp(prefix=f"{SERVE_TEMP_PREFIX}{c.pipeline.name}-", suffix=".log")
            os.close(fd)
            log = Path(name)
        except OSError as exc:
            where = quote(tempfile.gettempdir())
            raise SpecError.one(f"cannot create a work directory in {where}: {reason(exc)}") from None
        repo = write_repository(c.artifacts, workdir / "repository", c.model_root, protect=_files(args.file))
        print(f"compiled {c.pipeline.name!r}: {len(c.artifacts.files)} generated files in {repo}")
        server_args, left_out = tritonserver_options.for_serve(c.pipeline.spec.server.args)
        for flag, why in left_out:
            print(f"note: spec.server.args[{flag.index}] {flag.text} is not used locally ({why})")
        traced = c.pipeline.spec.server.tracing
        trace_file = Path(args.trace_file or f"{c.pipeline.name}-trace.json").absolute()
        server_args = [*tracing.trace_args(traced, c.pipeline.name, str(trace_file)), *server_args]
        if traced is not None:
            print(f"tracing: {_tracing_line(traced, trace_file)}")
        for r in c.artifacts.plan.routers:
            consumers = ", ".join(cons.label for _, cons in r.outputs)
            print(f"  router {r.name} ({c.artifacts.router_backend}): {r.source} -> {consumers}")
        server = LocalTriton(
            repo,
            http_port=args.http_port,
            grpc_port=args.grpc_port,
            metrics_port=args.metrics_port,
            host=args.host,
            log_file=log,
            extra_args=[f"--exit-timeout-secs={args.exit_timeout}", *server_args],
        )
        if stop.is_set():
            raise Interrupted("interrupted before tritonserver started")
        print(f"starting tritonserver (log: {log}) ...", flush=True)
        server.start()
        server.wait_ready(
            timeout=args.timeout, stop=stop.is_set, progress=lambda line: print(line, flush=True)
        )
        print(f"ready: HTTP http://{server.http_url}  gRPC {server.grpc_url}  metrics {server.metrics_url}")
        key_file = security.write_key(workdir, server.admin_key or "")
        print(
            f"admin APIs ({', '.join(security.ADMIN_APIS)}) need the key in {key_file} (mode 0600) as "
            f"header {security.ADMIN_HEADER!r} (gRPC metadata {security.header_name('grpc')!r}); "
            f"{', '.join(security.OPEN_APIS)} are open"
        )
        for m in server.models():
            print(f"  model {m['name']:<40} version {m.get('version', '-'):<3} {m.get('state', '')}")
        print("serving; Ctrl-C or SIGTERM stops", flush=True)
        while not stop.wait(0.5):
            if server.process is not None and server.process.poll() is not None:
                failed = True
                why = last_error(server.logs()) or "no cause in its log"
                code = server.process.returncode
                error(f"tritonserver exited (code {code}) while serving: {why}; full log: {log}")
                return EXIT_SERVER
        print("stopping tritonserver ...", flush=True)
        code = server.stop(timeout=args.exit_timeout + 5)
        print(f"stopped (tritonserver exit code {code})")
        return EXIT_OK
    except Interrupted as exc:
        print(f"{exc}: stopping tritonserver", file=sys.stderr)
        return EXIT_INTERRUPTED
    except NotReady as exc:  # one line a model that failed (its file and line), not the log's tail
        failed = True
        logged = server.logs() if server is not None else ""
        causes = [f.describe(shown_path) for f in load_failures(logged, server.repository)] if server else []
        if exc.exited and not causes:
            causes = [f"{exc.headline}: {last_error(logged) or 'no cause in its log'}"]
        for cause in causes if exc.exited else [exc.headline, *causes]:
            error(f"{cause}; full log: {log}")
        return EXIT_SERVER
    except TritonError as exc:
        failed = True
        error(f"{exc}; full log: {log}")
        return EXIT_SERVER
    except OSError as exc:
        error(f"cannot serve from {quote(workdir)}: {reason(exc)}")
        return EXIT_SERVER
    finally:
        if server is not None:
            server.stop(timeout=5)
        if args.keep:
            print(f"kept {workdir} (the repository, admin key) and {log}: remove them when done")
        else:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            if log is not None and not failed:
                log.unlink(missing_ok=True)
        for s, h in old.items():
            signal.signal(s, h)


NAMESPACES_ENV = env_name(Settings, "namespaces")
NOT_A_NAMESPACE = "{name!r} is not a namespace name (lowercase letters, digits and '-', at most 63)"


def check_namespaces(names: tuple[str, ...], source: str) -> None:
    """Raise SettingsError naming `source` (the flag or the variable) for a name no namespace can have:
    `-n a,b` once ran with one namespace "a,b", and its webhook registration failed every 10 s."""
    for name in names:
        if not DNS_LABEL_RE.match(name):
            why = NOT_A_NAMESPACE.format(name=name)
            raise SettingsError(BAD_VALUE.format(env=source, text=",".join(names), why=why))


def cmd_run(args: argparse.Namespace) -> int:
    """Run the operator (kopf) against the cluster in KUBECONFIG or the in-cluster service account."""
    extras.need("operator", "tritonpipeline run")
    import kopf
    from kubernetes.config import ConfigException

    from . import handlers  # noqa: F401 - registers the handlers
    from .kube import peering
    from .kube.client import Kube, KubeError, api_client
    from .kube.security_context import OPENSHIFT_SCC_API
    from .runtime import kopf_json
    from .runtime.logs import configure
    from .runtime.memory import limit_malloc_arenas
    from .runtime.state import OperatorState

    limit_malloc_arenas()  # before kopf's and the API client's threads start
    kopf_json.install()  # kopf reads no JSON nested deeper than jsontext.MAX_DEPTH
    settings = Settings.from_env(namespaces=tuple(args.namespace or ()), metrics_url=args.metrics)
    check_namespaces(settings.namespaces, "--namespace" if args.namespace else NAMESPACES_ENV)
    configure(args.log_format, args.verbose)
    try:
        kube = Kube(api_client(), settings.field_manager)
    except ConfigException as exc:
        error(f"no Kubernetes credentials (in-cluster or KUBECONFIG): {exc}")
        return EXIT_INVALID
    if settings.adapt_security_context == "auto":  # OpenShift: its SCC assigns the pods' ids
        try:
            openshift = kube.resource_exists(*OPENSHIFT_SCC_API)
        except KubeError as exc:  # retried: the pod restarts and asks again rather than guess
            api = "/".join(OPENSHIFT_SCC_API)
            error(f"cannot tell whether the cluster serves {api}: {exc}")
            return EXIT_INVALID
        settings = replace(settings, adapt_security_context="force" if openshift else "disabled")
    state = OperatorState(settings, kube)
    # kopf's identity convention (POD_ID: the chart sets it to the pod's name)
    state.identity = os.environ.get("POD_ID") or f"{getpass.getuser()}@{socket.gethostname()}/{os.getpid()}"
    state.priority = peering.priority(time.time(), random.randrange(1000))
    try:
        kopf.run(
            standalone=not settings.peering,
            peering_name=settings.peering or None,
            priority=state.priority,
            identity=state.identity,  # type: ignore[arg-type]  # kopf's Identity: a NewType of str
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            liveness_endpoint=args.liveness,
            memo=state,
        )
    except Exception as exc:  # kopf's ActivityError (not exported): a start-up handler failed
        outcomes = getattr(exc, "outcomes", None)
        if not isinstance(outcomes, dict):
            raise
        failed = [str(o.exception) for o in outcomes.values() if getattr(o, "exception", None) is not None]
        error(f"the operator cannot start: {'; '.join(failed) or exc}")
        return EXIT_INVALID
    return EXIT_OK


def cmd_assemble(args: argparse.Namespace) -> int:
    """The init container: build the model repository from the ConfigMaps and the model source."""
    from .local.assemble import assemble

    generated = assemble(Path(args.generated), args.source, Path(args.out))
    print(
        f"assembled {len(generated.files)} generated files and {len(generated.models)} model(s) into "
        f"{args.out} (repository {generated.digest[:12]})"
    )
    return EXIT_OK


AUTO_ENGINE_NOTE = (
    "autoscaling.engine auto: rendered the HPA on prometheus-adapter's metrics; the operator makes a KEDA "
    "ScaledObject instead where the cluster serves KEDA (--autoscaling-engine keda renders it)"
)


def cmd_manifests(args: argparse.Namespace) -> int:
    """The Kubernetes objects the operator applies for each pipeline of FILE (or --name), as YAML."""
    from .compiler import compile_pipeline
    from .compiler.router_choice import choose_router
    from .kube import autoscaling
    from .kube.manifests import render_children, with_engine
    from .kube.routing import routing_children
    from .spec import parse_pipeline

    compiled = compile_file(args.file, models=args.models)
    chosen = compiled if args.name is None else [_select(compiled, args.name, args.file)]
    settings = Settings.from_env()  # the operator's settings come from the same variables
    objects: list[dict[str, object]] = []
    for c in chosen:
        tp, artifacts = c.pipeline, c.artifacts
        if args.namespace:
            doc = tp.model_dump(mode="json", by_alias=True, exclude_none=True)
            doc["metadata"] = {"name": tp.name, "namespace": args.namespace}
            tp = parse_pipeline(doc, args.file)
        # the routers' backend as the operator chooses it (its router setting from the same variable)
        artifacts = compile_pipeline(tp, router=choose_router(tp, settings.router))
        try:
            children = render_children(tp, artifacts, settings)
        except SpecError as exc:
            raise SpecError(exc.problems, args.file) from None
        if children.routing.gateway_pending and args.gateway_implementation:
            routing = routing_children(tp, settings, args.gateway_implementation)
            children = replace(children, routing=routing)
        if children.routing.gateway_pending:
            print(
                f"note: {tp.name}: routes left out: {children.routing.description}; pass "
                "--gateway-implementation to render them",
                file=sys.stderr,
            )
        if autoscaling.may_choose_keda(tp):  # engine auto: as the operator would choose it
            engine: autoscaling.Engine = "keda" if args.autoscaling_engine == "keda" else "hpa"
            children = with_engine(children, tp, settings, engine)
            if args.autoscaling_engine is None:
                print(f"note: {tp.name}: {AUTO_ENGINE_NOTE}", file=sys.stderr)
        objects += [*children.all(), *children.routing.provider_objects]
        objects += [children.scaled_object] if children.scaled_object else []
    sys.stdout.write(yamltext.dump_all(objects))
    return EXIT_OK


def cmd_crd(args: argparse.Namespace) -> int:
    from .kube.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return EXIT_OK


def output_path(text: str) -> str:
    """argparse type of an output path: not empty (`-o ""` rendered into the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty one")
    return text


def seconds(text: str) -> float:
    """argparse type of a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {quote(text)}")
    return value


def whole_seconds(text: str) -> int:
    """argparse type of a whole number of seconds, 0 or more."""
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number of seconds, 0 or more, got {quote(text)}")
    return int(text)


def ip_address(text: str) -> str:
    """argparse type of an address to bind: an IP literal (tritonserver's HTTP and metrics services take
    no host names: `localhost` bound 255.255.255.255, and serve waited out its timeout)."""
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an IP address such as 127.0.0.1, 0.0.0.0 or ::1, got {quote(text)} (tritonserver "
            "takes no host names)"
        ) from None


def port(text: str) -> int:
    """argparse type of a TCP port: an integer 1-65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number 1-65535, got {quote(text)}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 1-65535, got {value}")
    return value


def endpoint_url(text: str) -> str:
    """argparse type of an endpoint to serve on: http://HOST:PORT (a path is kept)."""
    parts = urllib.parse.urlsplit(text)
    try:
        number = parts.port
    except ValueError:
        number = None
    if parts.scheme != "http" or not parts.hostname or number is None or not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"expected http://HOST:PORT (port 1-65535), got {quote(text)}")
    return text


SERVE_PORT_FLAGS = ("--http-port", "--grpc-port", "--metrics-port")
SERVE_PORT_IN_USE = (
    "{flag} {port}: {host}:{port} cannot be bound ({why}): another server listens there; choose another port"
)


def _check_serve_ports(args: argparse.Namespace) -> None:
    """Each of serve's servers needs a port of its own (a usage error otherwise)."""
    ports = {flag: getattr(args, flag.lstrip("-").replace("-", "_")) for flag in SERVE_PORT_FLAGS}
    seen: dict[int, str] = {}
    for flag, number in ports.items():
        if number in seen:
            args.usage_error(f"{seen[number]} and {flag} are both {number}: each server needs its own port")
        seen[number] = flag


# the examples each command's --help ends with (the top level's --help: each command's first) and
# docs/reference/cli.md shows (tools/reference.py): whole command lines, run from the repository's root.
# tests/test_cli.py parses each with this parser and checks that the repository files it names exist.
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "validate": (
        (
            "tritonpipeline validate examples/fanout.yaml examples/diamond.yaml",
            "check pipelines: every problem, one `error:` line each with its field; exit 1 if any",
        ),
        ("tritonpipeline validate examples/fanout.yaml --output json", "the same as JSON, for CI"),
        (
            "kubectl get tp vision -n ml -o yaml | tritonpipeline validate -",
            "check a pipeline as a cluster holds it",
        ),
    ),
    "render": (
        (
            "tritonpipeline render examples/fanout.yaml -o repository",
            "write its Triton model repository (the model files linked)",
        ),
        (
            "tritonpipeline render examples/fanout.yaml -o repository --cpu --force",
            "again over it, GPU instance groups on the CPU",
        ),
    ),
    "graph": (
        ("tritonpipeline graph examples/diamond.yaml", "its graph in Mermaid, the inserted routers marked"),
        (
            "tritonpipeline graph examples/fanout.yaml --format svg -o fanout.svg",
            "as a picture (Graphviz's dot)",
        ),
    ),
    "serve": (
        (
            "tritonpipeline serve examples/fanout.yaml --cpu",
            "serve it on a local tritonserver (127.0.0.1:8000 HTTP, 8001 gRPC, 8002 metrics), no cluster",
        ),
        (
            "tritonpipeline serve examples/diamond.yaml --http-port 9000 --grpc-port 9001 "
            "--metrics-port 9002",
            "on other ports",
        ),
        (
            "tritonpipeline serve examples/fanout.yaml --models model_repository --timeout 600 --keep",
            "model files from another directory, a longer load, and keep the repository and log",
        ),
    ),
    "run": (
        ("tritonpipeline run", "run the operator on every namespace (KUBECONFIG or the pod's account)"),
        (
            "tritonpipeline run -n team-a,team-b --metrics http://0.0.0.0:8081",
            "on two namespaces, /metrics and /readyz on port 8081",
        ),
    ),
    "manifests": (
        (
            "sed 's|../model_repository|pvc://models/triton|' examples/fanout.yaml "
            "| tritonpipeline manifests - -n ml",
            "the objects the operator applies for a pipeline whose models are on a PVC",
        ),
        (
            "sed 's|../model_repository|pvc://models/triton|' examples/fanout.yaml "
            "| tritonpipeline manifests - -n ml | kubectl diff -f -",
            "what applying them would change in the cluster",
        ),
    ),
    "import": (
        (
            "tritonpipeline import model_repository -o pipeline.yaml",
            "write a pipeline from a Triton model repository you have",
        ),
        (
            "tritonpipeline import examples/published/tutorials --strict",
            "print it; exit 1, writing nothing, if a setting is not carried",
        ),
    ),
    "crd": (("tritonpipeline crd | kubectl apply --server-side -f -", "install the CRD without the chart"),),
    "assemble": (
        (
            "tritonpipeline assemble --generated /tp/generated --source s3://models/triton "
            "--out /tp/repository",
            "what the pods' init container runs: the model repository from the ConfigMaps and the source",
        ),
    ),
}
EXAMPLES_HEADING = "examples:"
INTERNAL_COMMANDS = ("assemble",)  # what the operator's pods run: no example in the top-level --help


def examples_text(examples: tuple[tuple[str, str], ...]) -> str:
    """An --help's examples: each command line, and under it what it does."""
    return "\n".join([EXAMPLES_HEADING, *(f"  {line}\n      {what}" for line, what in examples)])


class HelpFormatter(argparse.HelpFormatter):
    """argparse's: the description wrapped to the terminal, but the examples printed as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(EXAMPLES_HEADING):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's)."""
    try:
        return importlib.metadata.version("tritonpipeline")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="tritonpipeline",
        description="Compile TritonPipeline resources into Triton model repositories.",
        epilog=examples_text(tuple(e[0] for name, e in EXAMPLES.items() if name not in INTERNAL_COMMANDS))
        + "\n\n`tritonpipeline COMMAND --help` says more about each command, with more examples.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--models", metavar="DIR", help="model files root (overrides a local modelRepository.uri)"
        )

    p = sub.add_parser("validate", help="check TritonPipeline files (exit 0 valid, 1 invalid)")
    p.add_argument("files", nargs="+", metavar="FILE", help=FILE_HELP)
    p.add_argument("--output", choices=("text", "json"), default="text", help="report format")
    common(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("render", help="write a complete Triton model repository")
    p.add_argument("file", metavar="FILE", help=FILE_HELP)
    p.add_argument("-o", "--output-dir", required=True, metavar="DIR", type=output_path)
    p.add_argument("--name", help="which TritonPipeline, when the file holds several")
    p.add_argument("--cpu", action="store_true", help="turn GPU instance groups into CPU ones")
    p.add_argument("--force", action="store_true", help="replace a non-empty output directory")
    common(p)
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("graph", help="draw the compiled graph (Mermaid, DOT, PNG/SVG with graphviz)")
    p.add_argument("file", metavar="FILE", help=FILE_HELP)
    p.add_argument("--format", choices=("mermaid", "dot", "png", "svg"), default="mermaid")
    p.add_argument("-o", "--output", metavar="FILE", type=output_path)
    p.add_argument("--name", help="which TritonPipeline, when the file holds several")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    common(p)
    p.set_defaults(func=cmd_graph)

    p = sub.add_parser("serve", help="serve a pipeline on a local tritonserver (no cluster needed)")
    p.add_argument("file", metavar="FILE", help=FILE_HELP)
    p.add_argument("--name", help="which TritonPipeline, when the file holds several")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--cpu", dest="cpu", action="store_true", default=None, help="run GPU instance groups on CPU"
    )
    mode.add_argument("--gpu", dest="cpu", action="store_false", help="keep GPU instance groups")
    p.add_argument(
        "--host", type=ip_address, default="127.0.0.1", help="IP address to bind (default 127.0.0.1)"
    )
    p.add_argument("--http-port", type=port, default=HTTP_PORT, help="1-65535 (default %(default)s)")
    p.add_argument("--grpc-port", type=port, default=GRPC_PORT, help="1-65535 (default %(default)s)")
    p.add_argument("--metrics-port", type=port, default=METRICS_PORT, help="1-65535 (default %(default)s)")
    p.add_argument("--timeout", type=seconds, default=180, help="seconds to wait for readiness")
    p.add_argument(
        "--exit-timeout", type=whole_seconds, default=10, help="seconds Triton waits for in-flight requests"
    )
    p.add_argument("--keep", action="store_true", help="keep the rendered repository and log")
    p.add_argument(
        "--trace-file",
        metavar="PATH",
        type=output_path,
        help="with spec.server.tracing mode triton: where Triton writes its trace file (default: "
        "NAME-trace.json in the current directory)",
    )
    p.add_argument(
        "--router",
        choices=("auto", "native", "python"),
        default="auto",
        help="what the routers run on: the native router (a C backend built here with gcc, cached) or the "
        "Python backend; auto: native when it builds here (default)",
    )
    common(p)
    p.set_defaults(func=cmd_serve, usage_error=p.error)
    p = sub.add_parser("run", help="run the Kubernetes operator")
    p.add_argument("-n", "--namespace", action="append", help="watch this namespace (repeat); default: all")
    p.add_argument(
        "--liveness",
        metavar="URL",
        type=endpoint_url,
        help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz: fails when a watch stream is stuck",
    )
    p.add_argument(
        "--metrics",
        metavar="URL",
        type=endpoint_url,
        help="serve Prometheus /metrics and /readyz here, e.g. http://0.0.0.0:8081",
    )
    p.add_argument(
        "--log-format",
        choices=FORMATS,
        default="full",
        help="full (default): UTC time, level, logger, [namespace/name], message; json: one object a line; "
        "plain: level, [namespace/name], message",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="DEBUG lines: what each reconcile did")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "manifests",
        help="print the Kubernetes objects the operator applies for FILE (YAML; review, diff, GitOps)",
        description="Print, as a YAML stream, exactly the objects the operator applies for each pipeline "
        "of FILE: ConfigMaps, Deployment, Service, routing objects and the autoscaler. Objects of a "
        "routing provider or of KEDA are included: the operator applies them where the cluster serves "
        "their API (autoscaling.engine auto: the HPA, or the ScaledObject with --autoscaling-engine keda, "
        "as the operator chooses from the cluster). Owner references are left out (they need the stored "
        "CR's uid), and so is the admin-key Secret the operator creates (a key is never printed): without "
        "the operator, create it yourself or name your own with spec.server.adminKeySecretRef. The "
        "operator's settings come from the same environment variables (TRITONPIPELINE_ASSEMBLER_IMAGE, ...).",
    )
    p.add_argument("file", metavar="FILE", help=FILE_HELP)
    p.add_argument("--name", help="only this TritonPipeline, when the file holds several")
    p.add_argument("-n", "--namespace", help="the namespace to render for (default: the CR's, else default)")
    p.add_argument(
        "--gateway-implementation",
        choices=typing.get_args(GatewayImplementation),
        help="with routing.provider gateway-api: whose hash policy to render with the routes, as the "
        "operator would read it from the Gateway's GatewayClass (default: routing.gateway.implementation; "
        "without either, the routes are left out and stderr says so)",
    )
    p.add_argument(
        "--autoscaling-engine",
        choices=("hpa", "keda"),
        help="with autoscaling.engine auto: the autoscaler to render, as the operator chooses it from the "
        "cluster (keda: a ScaledObject, where KEDA is served; hpa, the default: the HPA on "
        "prometheus-adapter's metrics, and stderr says so)",
    )
    common(p)
    p.set_defaults(func=cmd_manifests)

    p = sub.add_parser(
        "import",
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
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("crd", help="print the TritonPipeline CustomResourceDefinition")
    p.set_defaults(func=cmd_crd)

    p = sub.add_parser("assemble", help="(init container) build the model repository in a pod")
    p.add_argument("--generated", required=True, metavar="DIR", help="the mounted generated ConfigMaps")
    p.add_argument("--source", required=True, help="mounted model source directory, or s3:// / gs:// URI")
    p.add_argument("--out", required=True, metavar="DIR", help="repository to create")
    p.set_defaults(func=cmd_assemble)
    for name, command in sub.choices.items():  # every command's --help ends with its examples
        command.epilog = examples_text(EXAMPLES[name])
        command.formatter_class = HelpFormatter
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        _check_serve_ports(args)
    try:
        return int(args.func(args))
    except SpecError as exc:
        error(exc.render())
        return EXIT_INVALID
    except extras.MissingExtra as exc:
        error(str(exc))
        return EXIT_USAGE
    except SettingsError as exc:
        error(str(exc))
        return EXIT_INVALID
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:  # last resort: the commands name their paths themselves
        error(reason(exc))
        return EXIT_INVALID
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # last resort: one line, never a traceback (unless asked for)
        if os.environ.get(DEBUG_ENV):
            raise
        detail = clip(" ".join(str(exc).split()), 300)
        error(f"unexpected {type(exc).__name__}: {detail} (set {DEBUG_ENV}=1 for the traceback)")
        return EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())
