"""Names: every validated name is a full match (no trailing newline slips through a `$`), tensor names
accept what exported models really use, and such names still give Triton-safe router names and a
pipeline that the real tritonserver serves with the right numbers.
Here the pure tests; those on real components are in tests/component/test_names.py."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from helpers import example
from support.names import _exported
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.triton_config import parse_text
from tritonpipeline.errors import SpecError
from tritonpipeline.render.crd import crd
from tritonpipeline.spec import parse_pipeline

EXPORTED = ["input.1", "onnx::Gemm_0", "/model/embed/input", "1234", "input:0"]


def problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        compile_pipeline(parse_pipeline(doc))
    return [(p.path, p.message) for p in info.value.problems]


def _at(path: str) -> Callable[[dict[str, Any], Any], None]:
    """Setter for a dotted path with [i] indices, creating mappings on the way."""
    parts = [int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", path)]

    def put(doc: dict[str, Any], value: Any) -> None:
        node: Any = doc
        for part in parts[:-1]:
            node = node[part] if isinstance(part, int) else node.setdefault(part, {})
        node[parts[-1]] = value

    return put


# every validated name or identifier of the spec, in a document where it is otherwise valid:
# (example, field path, a valid value)
NAME_FIELDS = [
    ("diamond", "metadata.name", "diamond"),
    ("diamond", "metadata.namespace", "ml"),
    ("diamond", "spec.models[0].name", "extractor"),
    ("diamond", "spec.models[0].backend", "python"),
    ("diamond", "spec.models[0].inputs[0].name", "INPUT_A"),
    ("diamond", "spec.models[0].outputs[0].name", "FEATS_A"),
    ("diamond", "spec.pipelines[0].name", "diamond"),
    ("diamond", "spec.pipelines[0].inputs[0].name", "IMAGE"),
    ("diamond", "spec.pipelines[0].outputs[0].name", "RESULT"),
    ("diamond", "spec.pipelines[0].steps[1].name", "left"),
    ("diamond", "spec.pipelines[0].steps[1].model", "head_b"),
    ("diamond", "spec.server.gpuResource", "nvidia.com/gpu"),
    ("streaming", "spec.routing.header", "x-triton-sequence-id"),
    ("streaming", "spec.routing.host", "triton.example.com"),
    ("streaming", "spec.routing.ingressClassName", "nginx"),
    ("streaming", "spec.routing.tlsSecretName", "triton-tls"),
    ("streaming", "spec.models[1].sequenceBatching.controls.start", "START"),
    ("fanout", "spec.modelRepository.secretRef.name", "s3-creds"),
    ("fanout", "spec.server.nodeSelector.pool", "gpu"),
]


@pytest.mark.parametrize(("base", "path", "good"), NAME_FIELDS, ids=[f[1] for f in NAME_FIELDS])
def test_a_trailing_newline_is_refused_in_every_name(base: str, path: str, good: str) -> None:
    doc = example(base)
    if path.endswith("secretRef.name"):
        doc["spec"]["modelRepository"]["uri"] = "s3://bucket/models"
    put = _at(path)
    put(doc, good)
    compile_pipeline(parse_pipeline(doc))  # the value itself is fine
    put(doc, good + "\n")
    found = problems(doc)
    assert [p for p, _ in found] == [path], found
    assert repr(good + "\n") in found[0][1]


@pytest.mark.parametrize("suffix", ["\n", "\r", "\x00", "\x1b[31m", "\x85"], ids=repr)
def test_tensor_names_refuse_control_characters(suffix: str) -> None:
    doc = example("diamond")
    doc["spec"]["models"][0]["outputs"][0]["name"] = "FEATS" + suffix + "A"
    ((path, message),) = problems(doc)
    assert path == "spec.models[0].outputs[0].name"
    assert "control characters" in message


def test_every_crd_pattern_is_anchored_at_both_ends() -> None:
    """The apiserver (Go) and the spec (Python fullmatch) read the same strings: `^...$` everywhere."""
    patterns: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.append(node["pattern"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(crd())
    assert patterns
    assert all(p.startswith("^") and p.endswith("$") for p in patterns), patterns


@pytest.mark.parametrize("name", EXPORTED)
def test_exported_tensor_names_are_accepted(name: str) -> None:
    doc = example("diamond")
    doc["spec"]["models"][1]["outputs"][0]["name"] = name  # head_b's output, read by `merge`
    doc["spec"]["pipelines"][0]["steps"][3]["inputs"]["LEFT"] = f"left.{name}"
    compile_pipeline(parse_pipeline(doc))


def test_routers_for_exported_names_are_triton_safe_and_distinct() -> None:
    doc = _exported()
    # a second fan-out whose sanitized name would collide with the first: `input.1` and `input_1`
    spec = doc["spec"]
    spec["models"][0]["outputs"].append({"name": "/model_embed/input", "dataType": "FP32", "dims": [4]})
    spec["models"][1]["inputs"].append({"name": "x", "dataType": "FP32", "dims": [4]})
    spec["models"][2]["inputs"].append({"name": "x", "dataType": "FP32", "dims": [4]})
    steps = spec["pipelines"][0]["steps"]
    steps[1]["inputs"]["x"] = steps[2]["inputs"]["x"] = "embed./model_embed/input"
    plan = compile_pipeline(parse_pipeline(doc)).plan
    names = [r.name for r in plan.routers]
    assert len(names) == 2 and len(set(names)) == 2, names
    # model names become directories and object names: the strict rule, up to the router name limit
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]{0,99}", n) for n in names), names


def test_an_internal_tensor_named_like_a_pipeline_output_is_renamed() -> None:
    """embed's output fans out through a router; its ensemble tensor would be `embed./model/embed/input`,
    which a pipeline output already is: two producers of one ensemble tensor, refused by Triton."""
    files = compile_pipeline(parse_pipeline(_exported())).files
    ensemble = parse_text(files["exported/config.pbtxt"])
    embed = next(s for s in ensemble.ensemble_scheduling.step if s.model_name == "embed")
    head_b = next(s for s in ensemble.ensemble_scheduling.step if s.model_name == "head_b")
    assert dict(embed.output_map) == {"/model/embed/input": "embed./model/embed/input~2"}
    assert dict(head_b.output_map) == {"input.1": "embed./model/embed/input"}
    written = [t for s in ensemble.ensemble_scheduling.step for t in s.output_map.values()]
    assert len(written) == len(set(written)), written
