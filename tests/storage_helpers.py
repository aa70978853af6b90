"""What the s3:// and gs:// download tests share: the init container's inputs from a rendered pipeline and
the check of what it assembled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import ROOT, example
from tritonpipeline.compiler import Artifacts, compile_pipeline
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import parse_pipeline

MODELS = ROOT / "model_repository"
FANOUT_MODELS = ("extractor", "head_b", "head_c")
# a file deeper than Triton's <model>/<version>/ layout, to prove nested keys
NESTED = "1/assets/vocab/deep/table.txt"


def fanout_from(repository: dict[str, Any]) -> dict[str, Any]:
    doc = example("fanout")
    doc["metadata"] = {"name": "vision", "namespace": "ml"}
    doc["spec"]["modelRepository"] = repository
    return doc


def rendered_init(doc: dict[str, Any], generated: Path) -> tuple[dict[str, Any], Artifacts]:
    """(the init container, the artifacts) of `doc`, with its ConfigMaps written as files into
    `generated` (the projected volume the init container reads)."""
    tp = parse_pipeline(doc)
    artifacts = compile_pipeline(tp)
    children = render_children(tp, artifacts, Settings())
    generated.mkdir()
    for cm in children.configmaps:
        for key, text in cm["data"].items():
            (generated / key).write_text(text)
    return children.deployment["spec"]["template"]["spec"]["initContainers"][0], artifacts


def source_arg(init: dict[str, Any]) -> str:
    return str(init["args"][init["args"].index("--source") + 1])


def assert_assembled(out: Path, artifacts: Artifacts) -> None:
    """`out` holds every file of the fanout models (the uploaded copies), the nested file and the
    generated configs laid over them."""
    for model in FANOUT_MODELS:
        for path in (MODELS / model).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.name != "config.pbtxt":
                assert (out / model / path.relative_to(MODELS / model)).read_bytes() == path.read_bytes()
    assert (out / "extractor" / NESTED).read_text() == "nested\n"
    for path, data in artifacts.files.items():
        assert (out / path).read_bytes() == data
