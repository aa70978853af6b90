"""What the commands share: exit codes, the one error printer and its parser, and a pipeline file compiled
as validate, render, graph, serve and manifests read it."""

from __future__ import annotations

import argparse
import os
import sys
import typing
from dataclasses import dataclass, replace
from pathlib import Path

from ..compiler import Artifacts
from ..errors import Problem, SpecError, quote
from ..local.repository import check_model_dirs, local_model_root
from ..render.checks import validate
from ..settings import Settings
from ..spec import STDIN, Numbered, TritonPipeline, read_documents, read_file, same_names

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_SERVER = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
ERROR_PREFIX = "error: "  # how every error line the CLI prints starts (tests/component/test_cli_errors.py)
OUTPUT_EXISTS = (
    "output file {file} exists (perhaps edited since it was written): pass --force to replace it, or choose "
    "another name"
)


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


def compile_file(
    path: str, *, cpu_only: bool = False, models: str | None = None, settings: Settings | None = None
) -> list[Compiled]:
    """Parse, compile and (for local sources) check model directories of every document in a file, under
    `settings` (default: read from the environment, once for the file). Raises SpecError listing all
    problems of all documents."""
    if models is not None and not Path(models).is_dir():
        what = "is not a directory" if Path(models).exists() else "does not exist"
        raise SpecError.one(f"--models {quote(models)} {what}: it names the directory of the model files")
    out: list[Compiled] = []
    problems: list[Problem] = []
    for document in read_documents(read_file(path), str(Path(path))):
        if isinstance(document, Problem):
            problems.append(document)
            continue
        if settings is None:  # read once, at the file's first document
            settings = Settings.from_env()
        # the schema's problems, the compiler's, then what the cluster would refuse, as the webhook and
        # the operator see them (render/checks.py `validate`)
        verdict = validate(document.body, settings, cpu_only=cpu_only)
        found = list(verdict.problems)
        root = None
        if verdict.pipeline is not None:
            root = local_model_root(verdict.pipeline, path, models)
            found += check_model_dirs(verdict.pipeline, root) if root is not None else []
        if found:
            problems += [Problem(document.label + p.path, p.message) for p in found]
        else:
            tp, artifacts = verdict.valid()
            out.append(Compiled(path, tp, artifacts, root, document.label))
    problems += same_names([Numbered(c.pipeline, c.label) for c in out]) if not problems else []
    if problems:
        raise SpecError(problems, path)
    return out


def select(compiled: list[Compiled], name: str | None, source: str) -> Compiled:
    """The pipeline --name chooses (the only one when the file holds one)."""
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


def with_router(c: Compiled, choice: str, cpu: bool) -> Compiled:
    """The pipeline with its routers and conditions on the backend `choice` asks for (serve and render
    --router), or with `auto` on the one spec.server.router names: `auto` takes the native router (and its
    switch) when it builds here (a C compiler) and says why not otherwise; `native` insists. A library
    this machine carries (TRITONPIPELINE_NATIVE_ROUTER, as the operator image sets it) is used instead of
    a build."""
    from ..compiler import compile_pipeline
    from ..local.native_router import INSTALLED_ENV, NativeRouterUnavailable, build, installed

    asked = "--router native"
    if choice == "auto":
        choice, asked = c.pipeline.spec.server.router, "spec.server.router: native"
    if choice == "python" or not (c.artifacts.plan.routers or c.artifacts.plan.orchestrators):
        return c
    try:
        library = installed() if os.environ.get(INSTALLED_ENV) else build()
    except (NativeRouterUnavailable, RuntimeError) as exc:
        if choice == "native":
            raise SpecError.one(f"{asked}: {exc}") from None
        print(f"note: the routers and conditions run on the Python backend ({exc})")
        return c
    return replace(c, artifacts=compile_pipeline(c.pipeline, cpu_only=cpu, native_router=library))


def routing_lines(artifacts: Artifacts) -> list[str]:
    """serve's and render's line per inserted router and per pipeline with conditions: what runs it (the
    Python orchestrator is the pipeline's own model.py; the native switch, a step of its ensemble)."""
    lines = []
    for r in artifacts.plan.routers:
        consumers = ", ".join(cons.label for _, cons in r.outputs)
        lines.append(f"  router {r.name} ({artifacts.router_backend}): {r.source} -> {consumers}")
    for o in artifacts.plan.orchestrators:
        if f"{o.name}/1/model.py" in artifacts.files:
            what = "a generated Python orchestrator"
            if o.speculative:  # the spec asked, the orchestrator cannot
                what += " (speculative needs the native switch: the branches wait for the condition)"
        elif o.name in artifacts.speculative:
            what = "the native switch in its ensemble, every branch run for every request (speculative)"
        else:
            what = "the native switch in its ensemble"
        lines.append(f"  conditions of {o.name!r}: {what}")
    return lines


def protected(path: str) -> list[str]:
    """The pipeline file an output must not overwrite: none when it is standard input."""
    return [] if path == STDIN else [path]
