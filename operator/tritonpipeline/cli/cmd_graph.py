"""`tritonpipeline graph`: draw a compiled pipeline (Mermaid, DOT, or PNG/SVG through Graphviz's dot)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..compiler.visualize import to_dot, to_mermaid
from ..errors import SpecError, quote, reason
from ..local.repository import model_sources, overlap_problem
from .arguments import add_file, add_models, add_name, output_path
from .common import EXIT_OK, EXIT_USAGE, OUTPUT_EXISTS, compile_file, error, protected, select

NAME = "graph"
EXAMPLES = (
    ("tritonpipeline graph examples/diamond.yaml", "its graph in Mermaid, the inserted routers marked"),
    (
        "tritonpipeline graph examples/fanout.yaml --format svg -o fanout.svg",
        "as a picture (Graphviz's dot)",
    ),
)


def add(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        NAME, help="draw the compiled graph (Mermaid, DOT, PNG/SVG with graphviz)"
    )
    add_file(p)
    p.add_argument("--format", choices=("mermaid", "dot", "png", "svg"), default="mermaid")
    p.add_argument("-o", "--output", metavar="FILE", type=output_path)
    add_name(p)
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    add_models(p)
    return p


def execute(args: argparse.Namespace) -> int:
    c = select(compile_file(args.file, models=args.models), args.name, args.file)
    if args.output:
        sources = model_sources(c.artifacts.models, c.model_root)
        overlap = overlap_problem(Path(args.output), sources, protected(args.file), what="output file")
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
