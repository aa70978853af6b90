"""Conditional steps compiled for the native switch (compiler/switch_plan.py): the pipeline's one
ensemble (the head's steps, then the switch), the switch's config and the plan native_router.c reads.
Served on the real tritonserver in tests/component/test_conditions.py (its `native` cases)."""

from __future__ import annotations

import struct
from typing import Any

from helpers import conditional_by_size, doc_of, example, speculative
from support.ensemble_pitfalls import COUNTED, STREAMED, SUMMED, accumulator, expand, plain
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.plan_types import (
    NATIVE_ROUTER_BACKEND,
    NATIVE_ROUTER_LIBRARY,
    NATIVE_ROUTER_SLOT,
)
from tritonpipeline.compiler.router_choice import RouterChoice
from tritonpipeline.compiler.switch_plan import SWITCH_PARAMETER
from tritonpipeline.compiler.triton_config import mc, parse_text
from tritonpipeline.spec import parse_pipeline

LIBRARY = b"\x7fELF..."


def native(doc: dict[str, Any]) -> dict[str, bytes]:
    return compile_pipeline(parse_pipeline(doc), native_router=LIBRARY).files


def records(files: dict[str, bytes], switch: str) -> list[list[str]]:
    config = parse_text(files[f"{switch}/config.pbtxt"])
    return [r.split(" ") for r in config.parameters[SWITCH_PARAMETER].string_value.split(";")]


def text(token: str) -> str:
    return bytes.fromhex(token).decode()


def test_the_pipeline_is_one_ensemble_of_its_head_then_the_switch() -> None:
    files = native(example("conditional"))
    assert "conditional/1/model.py" not in files  # no Python orchestrator
    config = parse_text(files["conditional/config.pbtxt"])
    assert config.platform == "ensemble" and config.max_batch_size == 8
    classify, switch = config.ensemble_scheduling.step
    assert classify.model_name == "classifier"
    # LABEL is a pipeline output read from classify alone: the classifier writes it under that name
    assert dict(classify.input_map) == {"X": "IMAGE"} and dict(classify.output_map) == {"LABEL": "LABEL"}
    assert switch.model_name == "conditional__switch"
    assert dict(switch.input_map) == {"classify.LABEL": "LABEL", "inputs.IMAGE": "IMAGE"}
    assert dict(switch.output_map) == {n: n for n in ("RESULT", "SCORE", "SMALL")}
    assert [o.name for o in config.output] == ["RESULT", "SCORE", "SMALL", "LABEL"]
    # the branches stay plain ensembles, called by the switch
    assert parse_text(files["conditional__when1/config.pbtxt"]).platform == "ensemble"


def test_the_switch_runs_on_the_native_backend_with_optional_inputs() -> None:
    files = native(example("conditional"))
    config = parse_text(files["conditional__switch/config.pbtxt"])
    assert config.backend == NATIVE_ROUTER_BACKEND
    assert files[f"conditional__switch/1/{NATIVE_ROUTER_LIBRARY}"] == LIBRARY
    assert [(i.name, i.optional) for i in config.input] == [("classify.LABEL", True), ("inputs.IMAGE", True)]
    assert [g.kind for g in config.instance_group] == [mc.ModelInstanceGroup.KIND_CPU]
    # for a cluster (the operator chose native, no library here) the init container puts it in its place
    chosen = RouterChoice("native", "the operator's choice")
    cluster = compile_pipeline(parse_pipeline(example("conditional")), router=chosen).files
    assert f"conditional__switch/1/{NATIVE_ROUTER_SLOT}" in cluster


def test_the_plan_names_each_branch_its_condition_and_outputs() -> None:
    got = records(native(example("conditional")), "conditional__switch")
    assert got[:4] == [
        ["B", b"conditional__when0".hex()],
        ["W", b"classify.LABEL".hex(), "E", "i0"],
        ["I", b"inputs.IMAGE".hex()],
        ["O", b"small.FEATS_A".hex()],
    ]
    served = [[text(t) for t in r[1:]] for r in got if r[0] == "R"]
    assert served == [
        ["RESULT", "small.FEATS_A", "large.OUTPUT_B"],
        ["SCORE", "score.OUTPUT_C"],
        ["SMALL", "small.FEATS_A"],
    ]
    # SMALL's default: FP32 (TRITONSERVER_TYPE_FP32 is 11), a request's rows in front, dims [4], 0.0
    assert got[-1] == ["F", "11", "1", "4", struct.pack("<f", 0.0).hex()]


def test_a_switch_default_is_taken_unless_an_earlier_case_holds() -> None:
    got = records(native(example("conditional")), "switched__switch")
    whens = [r[2:] for r in got if r[0] == "W"]
    assert whens == [["D"], ["E", "i1"]]  # small: the default; large: LABEL equals 1
    assert ["U", "E", "i1"] in got  # the default is not taken where the case holds


def test_string_values_travel_in_hex_and_a_bytes_default_as_its_length_and_bytes() -> None:
    doc = conditional_by_size(["x;s", "s"])  # a `;` of a value: hex, not a record separator
    files = native(doc)
    got = records(files, "conditional__switch")
    assert ["W", b"inputs.SIZE".hex(), "I", "s" + b"x;s".hex(), "s" + b"s".hex()] in got
    # no head: the ensemble is the switch alone, reading the pipeline's inputs
    (step,) = parse_text(files["conditional/config.pbtxt"]).ensemble_scheduling.step
    assert dict(step.input_map) == {"inputs.IMAGE": "IMAGE", "inputs.SIZE": "SIZE"}


def test_the_python_router_keeps_the_orchestrator() -> None:
    files = compile_pipeline(parse_pipeline(example("conditional"))).files
    assert parse_text(files["conditional/config.pbtxt"]).backend == "python"
    assert not any(name.startswith("conditional__switch/") for name in files)


def test_streaming_and_sequence_steps_keep_the_python_orchestrator() -> None:
    """The switch neither streams a branch's responses nor passes sequences on: where the native router
    runs, a pipeline with a streaming branch or a sequence step is still served by the orchestrator
    (orchestrator_model.py), decoupled or sequence-batched as it needs."""
    streams = native(doc_of("streams", [expand(), plain("mid")], [STREAMED]))
    counts = native(doc_of("counts", [accumulator(), plain("mid")], [COUNTED, SUMMED]))
    assert "streamed/1/model.py" in streams and "streamed__switch/config.pbtxt" not in streams
    assert parse_text(streams["streamed/config.pbtxt"]).model_transaction_policy.decoupled
    for name in ("counted", "summed"):
        assert f"{name}/1/model.py" in counts and f"{name}__switch/config.pbtxt" not in counts
        assert parse_text(counts[f"{name}/config.pbtxt"]).HasField("sequence_batching")


def speculative_doc() -> dict[str, Any]:
    return speculative(example("conditional"))


def test_a_speculative_pipeline_runs_its_branches_beside_the_head() -> None:
    """`speculative`: every branch's steps (and their routers) in the pipeline's ensemble beside the head's,
    reading the same tensors; the switch reads the condition and every source of its outputs, the
    branches' included, and calls nothing."""
    files = native(speculative_doc())
    config = parse_text(files["conditional/config.pbtxt"])
    steps = {s.model_name: s for s in config.ensemble_scheduling.step}
    assert list(steps) == [
        "classifier",
        "extractor",
        "head_b",
        "head_c",
        "conditional__when1__large__OUTPUT_B__router",
        "conditional__switch",
    ]
    assert dict(steps["extractor"].input_map) == {"INPUT_A": "IMAGE"}  # beside classify: no wait
    assert dict(steps["head_b"].input_map) == {"FEATS_IN_B": "IMAGE"}
    assert dict(steps["conditional__switch"].input_map) == {
        "classify.LABEL": "LABEL",
        "large.OUTPUT_B": "large.OUTPUT_B",
        "score.OUTPUT_C": "score.OUTPUT_C",
        "small.FEATS_A": "small.FEATS_A",
    }
    # every tensor of the ensemble has one producer: an input, or one step's output
    written = [t for s in config.ensemble_scheduling.step for t in s.output_map.values()]
    assert len(written) == len(set(written)) and "IMAGE" not in written
    read = {t for s in config.ensemble_scheduling.step for t in s.input_map.values()}
    assert read <= set(written) | {"IMAGE"}
    # the router a branch needs is still rendered (its ensemble's, as for the head)
    assert "conditional__when1__large__OUTPUT_B__router/config.pbtxt" in files


def test_a_speculative_branch_is_marked_and_passed_nothing() -> None:
    got = records(native(speculative_doc()), "conditional__switch")
    assert got[:4] == [
        ["B", b"conditional__when0".hex()],
        ["S"],
        ["W", b"classify.LABEL".hex(), "E", "i0"],
        ["O", b"small.FEATS_A".hex()],
    ]
    assert not [r for r in got if r[0] == "I"]  # the switch calls no branch, so passes it nothing


def test_speculative_is_reported_where_the_switch_serves_it() -> None:
    """status.graph.conditions marks the pipelines served speculatively; the Python orchestrator waits for
    the condition, so under it nothing is marked."""
    served = compile_pipeline(parse_pipeline(speculative_doc()), native_router=LIBRARY)
    assert [c.get("speculative") for c in served.graph_summary()["conditions"]] == [True, True]
    waits = compile_pipeline(parse_pipeline(speculative_doc()))
    assert [c.get("speculative") for c in waits.graph_summary()["conditions"]] == [None, None]
    assert "conditional/1/model.py" in waits.files
