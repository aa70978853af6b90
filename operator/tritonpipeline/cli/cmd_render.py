"""`tritonpipeline render`: write a pipeline's complete Triton model repository."""

from __future__ import annotations

import argparse
from typing import Any

from ..local.repository import write_repository
from .arguments import add_file, add_models, add_name, output_path
from .common import EXIT_OK, compile_file, protected, routing_lines, select, with_router

NAME = "render"
EXAMPLES = (
    (
        "tritonpipeline render examples/fanout.yaml -o repository",
        "write its Triton model repository (the model files linked)",
    ),
    (
        "tritonpipeline render examples/fanout.yaml -o repository --cpu --force",
        "again over it, GPU instance groups on the CPU",
    ),
)


def add(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(NAME, help="write a complete Triton model repository")
    add_file(p)
    p.add_argument("-o", "--output-dir", required=True, metavar="DIR", type=output_path)
    add_name(p)
    p.add_argument("--cpu", action="store_true", help="turn GPU instance groups into CPU ones")
    p.add_argument("--force", action="store_true", help="replace a non-empty output directory")
    p.add_argument(
        "--router",
        choices=("native", "python"),
        help="what the routers and conditions run on: the native router (a C backend built here with gcc, "
        "cached: for a tritonserver on this machine's architecture) or the Python backend (default: what "
        "spec.server.router names, python for auto)",
    )
    add_models(p)
    return p


def execute(args: argparse.Namespace) -> int:
    c = select(compile_file(args.file, cpu_only=args.cpu, models=args.models), args.name, args.file)
    # no --router: the spec's native, else the Python backend (auto: any tritonserver runs it)
    c = with_router(
        c, args.router or ("auto" if c.pipeline.spec.server.router == "native" else "python"), args.cpu
    )
    dest = write_repository(
        c.artifacts, args.output_dir, c.model_root, force=args.force, protect=protected(args.file)
    )
    print(f"rendered {c.pipeline.name!r} into {dest} ({len(c.artifacts.files)} generated files)")
    if c.model_root is None:
        print(
            f"note: model files live at {c.pipeline.spec.model_repository.uri}; only generated configs were "
            "written (pass --models DIR to link local copies)"
        )
    for line in routing_lines(c.artifacts):
        print(line)
    return EXIT_OK
