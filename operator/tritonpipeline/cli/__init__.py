"""`tritonpipeline` command line: validate, render, graph and serve TritonPipeline files; import one from a
Triton model repository; run the operator. One module a command, `cmd_NAME` (its options, its examples,
`execute`), the argument types they share in `arguments`, what else they share in `common`; this module
builds the parser from them and runs the command chosen."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys

from .. import extras
from ..errors import SpecError, clip, reason
from ..settings import SettingsError
from . import (
    cmd_assemble,
    cmd_crd,
    cmd_graph,
    cmd_import,
    cmd_manifests,
    cmd_render,
    cmd_run,
    cmd_serve,
    cmd_validate,
)
from .cmd_import import read_model_repository
from .common import EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, EXIT_USAGE, Parser, compile_file, error

__all__ = ["EXAMPLES", "INTERNAL_COMMANDS", "build_parser", "compile_file", "main", "read_model_repository"]

# the commands in the order --help lists them: each module has NAME, EXAMPLES, add(subparsers) and execute
COMMANDS = (
    cmd_validate,
    cmd_render,
    cmd_graph,
    cmd_serve,
    cmd_run,
    cmd_manifests,
    cmd_import,
    cmd_crd,
    cmd_assemble,
)
DEBUG_ENV = "TRITONPIPELINE_DEBUG"  # set: unexpected errors show their traceback

# the examples each command's --help ends with (the top level's --help: each command's first) and
# docs/reference/cli.md shows (tools/reference.py): whole command lines, run from the repository's root.
# tests/unit/test_cli.py parses each with this parser and checks that the repository files it names exist.
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {c.NAME: c.EXAMPLES for c in COMMANDS}
EXAMPLES_HEADING = "examples:"
INTERNAL_COMMANDS = (cmd_assemble.NAME,)  # what the operator's pods run: no example in the top-level --help


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
    for command in COMMANDS:  # every command's --help ends with its examples
        p = command.add(sub)
        p.set_defaults(func=command.execute)
        p.epilog = examples_text(command.EXAMPLES)
        p.formatter_class = HelpFormatter
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
