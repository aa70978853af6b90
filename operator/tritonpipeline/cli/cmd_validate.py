"""`tritonpipeline validate`: check pipeline files, every problem one `error:` line with its field."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import Problem, SpecError
from ..render import checks, ownership
from ..settings import Settings
from ..spec import STDIN, TritonPipeline
from .arguments import FILE_HELP, add_models
from .common import EXIT_INVALID, EXIT_OK, EXIT_USAGE, Compiled, compile_file, error

NAME = "validate"
EXAMPLES = (
    (
        "tritonpipeline validate examples/fanout.yaml examples/diamond.yaml",
        "check pipelines: every problem, one `error:` line each with its field; exit 1 if any",
    ),
    ("tritonpipeline validate examples/fanout.yaml --output json", "the same as JSON, for CI"),
    (
        "kubectl get tp vision -n ml -o yaml | tritonpipeline validate -",
        "check a pipeline as a cluster holds it",
    ),
)


def add(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        NAME, help="check TritonPipeline files (exit 0 valid, 1 invalid)"
    )
    p.add_argument("files", nargs="+", metavar="FILE", help=FILE_HELP)
    p.add_argument("--output", choices=("text", "json"), default="text", help="report format")
    add_models(p)
    return p


def summary(c: Compiled) -> str:
    plan = c.artifacts.plan
    parts = [
        f"{len(plan.models)} model(s)",
        f"{len(plan.ensembles)} ensemble(s)",
        f"{len(plan.routers)} router(s) inserted",
    ]
    return f"{c.source}: TritonPipeline {c.pipeline.name!r} is valid ({', '.join(parts)})"


def warnings(compiled: list[Compiled]) -> list[Problem]:
    """render/checks.py's warnings of every document, paths prefixed like errors when there are several."""
    return [Problem(c.label + w.path, w.message) for c in compiled for w in checks.warnings(c.pipeline)]


def execute(args: argparse.Namespace) -> int:
    if args.files.count(STDIN) > 1:
        error(f"{STDIN} (standard input) can be given once")
        return EXIT_USAGE
    results: list[dict[str, Any]] = []
    validated: list[tuple[dict[str, Any], TritonPipeline]] = []  # a valid pipeline, its file's result
    failed = False
    settings = Settings.from_env()  # once for every file
    for path in args.files:
        try:
            compiled = compile_file(path, models=args.models, settings=settings)
            warned = warnings(compiled)
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
                    print(summary(c))
                for w in warned:
                    print(f"warning: {path}: {w}", file=sys.stderr)
        except SpecError as exc:
            failed = True
            results.append({"file": path, "valid": False, "pipelines": [], "errors": exc.as_dicts()})
            if args.output == "text":
                error(exc.render())
    for result, collided in name_collisions(validated):
        failed = True
        result["valid"] = False
        result["errors"] = [*result["errors"], *collided.as_dicts()]
        if args.output == "text":
            error(collided.render())
    if args.output == "json":
        print(json.dumps(results, indent=2))
    return EXIT_INVALID if failed else EXIT_OK


def name_collisions(
    validated: list[tuple[dict[str, Any], TritonPipeline]],
) -> list[tuple[dict[str, Any], SpecError]]:
    """The pipelines validated together that make an object of the same kind and name as another pipeline
    of their namespace (render/ownership.py `collisions`): each with its file's result and the problem."""
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
