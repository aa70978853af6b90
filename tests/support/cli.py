"""What tests/unit/test_cli.py and tests/component/test_cli.py share."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from helpers import EXAMPLES, example
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.spec import parse_pipeline

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def write_cr(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def write_invalid_cr(directory: Path) -> Path:
    """directory/invalid.yaml: the diamond example with a step input naming a step that is not there."""
    doc = example("diamond")
    doc["spec"]["pipelines"][0]["steps"][1]["inputs"]["FEATS_IN_B"] = "rigth.OUTPUT_C"
    return write_cr(directory / "invalid.yaml", doc)


def names_in(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


# --------------------------------------------------------------------------- graph


def _router_name(example_name: str) -> str:
    (router,) = compile_pipeline(parse_pipeline(example(example_name))).plan.routers
    return router.name


# --------------------------------------------------------------------------- no command destroys user files


def snapshot(root: Path) -> dict[str, str | bytes]:
    """Every entry under root, symlinks not followed: file bytes, link targets, and directories."""
    out: dict[str, str | bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = f"link -> {os.readlink(path)}"
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = path.read_bytes()
    return out
