"""Invalid TritonPipeline specs: every problem is reported with its exact field path and a clear reason.

Each bad spec is a small mutation of a valid example, so a failure points at exactly one rule.
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from string import Formatter
from typing import Any

import pytest
import yaml

import pipeline_gen
from helpers import EXAMPLES, example
from tritonpipeline.cli import compile_file, main
from tritonpipeline.compiler import compile_pipeline, plan_types, rules
from tritonpipeline.compiler.triton_config import parse_text as triton_parse_text
from tritonpipeline.errors import Problem, SpecError
from tritonpipeline.render.crd import crd, passes_through
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import Settings
from tritonpipeline.spec import MAX_STEPS, parse_pipeline, parse_text


def problems_of(doc: dict[str, Any]) -> list[Problem]:
    """Parse + compile a mapping; it must fail, and every problem comes back at once."""
    with pytest.raises(SpecError) as info:
        compile_pipeline(parse_pipeline(doc))
    assert info.value.problems, "a SpecError must carry at least one problem"
    return info.value.problems


def problems_of_text(text: str) -> list[Problem]:
    with pytest.raises(SpecError) as info:
        for tp in parse_text(text, "bad.yaml"):
            compile_pipeline(tp)
    return info.value.problems


def compiles(doc: dict[str, Any]) -> None:
    compile_pipeline(parse_pipeline(doc))


# --------------------------------------------------------------------------- mutation helpers
# Short accessors into the example documents (indices follow the example files).


def spec(d: dict[str, Any]) -> dict[str, Any]:
    return d["spec"]


def model(d: dict[str, Any], i: int) -> dict[str, Any]:
    return d["spec"]["models"][i]


def pipe(d: dict[str, Any]) -> dict[str, Any]:
    return d["spec"]["pipelines"][0]


def step(d: dict[str, Any], j: int) -> dict[str, Any]:
    return d["spec"]["pipelines"][0]["steps"][j]


def _two_decoupled_heads(d: dict[str, Any]) -> None:
    model(d, 1)["decoupled"] = True  # head_b -> step left
    model(d, 2)["decoupled"] = True  # head_c -> step right


def _dead_right_step(d: dict[str, Any]) -> None:
    # merge takes both its inputs from `left`; `right` still runs but feeds nothing
    model(d, 3)["inputs"][1]["dims"] = [4]
    step(d, 3)["inputs"]["RIGHT"] = "left.OUTPUT_B"


def _self_loop(d: dict[str, Any]) -> None:
    step(d, 1)["inputs"]["FEATS_IN_B"] = "left.OUTPUT_B"  # head_b: FP32 [4] -> FP32 [4]


def _two_step_cycle(d: dict[str, Any]) -> None:
    step(d, 1)["inputs"]["FEATS_IN_B"] = "merge.JOINED"  # join.JOINED is FP32 [4] like FEATS_IN_B


def _control_declared_as_input(d: dict[str, Any]) -> None:
    model(d, 1)["inputs"].append({"name": "START", "dataType": "INT32", "dims": [1]})


def _with_state(d: dict[str, Any], **initial: Any) -> dict[str, Any]:
    """The streaming example's accumulator as an ONNX model (a backend that keeps implicit states) with one
    state; `initial`: its initialState."""
    m = model(d, 1)
    del m["backend"]
    m["platform"] = "onnxruntime_onnx"
    state = {"inputName": "STATE_IN", "outputName": "STATE_OUT", "dataType": "FP32", "dims": [1]}
    if initial:
        state["initialState"] = {"name": "zero", "dims": [1], "zeroData": True, **initial}
    m["sequenceBatching"]["states"] = [state]
    return m


def _state_declared_as_input(d: dict[str, Any]) -> None:
    _with_state(d)["inputs"].append({"name": "STATE_IN", "dataType": "FP32", "dims": [1]})


def _state_mapped_by_step(d: dict[str, Any]) -> None:
    _with_state(d)
    step(d, 1)["inputs"]["STATE_IN"] = "dequantize.VALUE"


def _growable_state_on_cpu(d: dict[str, Any]) -> None:
    m = _with_state(d)
    m["sequenceBatching"]["states"][0].update(useGrowableMemory=True, useSameBufferForInputOutput=True)
    m["instances"] = [{"kind": "CPU"}]


def _state_on_python(d: dict[str, Any]) -> None:
    m = _with_state(d)
    del m["platform"]
    m["backend"] = "python"


def _state_on_tensorflow(d: dict[str, Any]) -> None:
    _with_state(d)["platform"] = "tensorflow_savedmodel"


def _no_batching_anywhere(d: dict[str, Any]) -> None:
    for m in spec(d)["models"]:
        m["maxBatchSize"] = 0  # extractor keeps its dynamicBatching block


def _extra_step_without_inputs(d: dict[str, Any]) -> None:
    pipe(d)["steps"].append({"name": "lonely", "model": "head_c"})


def _second_pipeline_same_name(d: dict[str, Any]) -> None:
    spec(d)["pipelines"].append(copy.deepcopy(pipe(d)))


LONG = "m" * 65  # one over the 64-character limit


def _dotted_model_unnamed_step(d: dict[str, Any]) -> None:
    model(d, 2)["name"] = "head.c-1.5"  # a model's name may hold '.'; step `right` loses its own name
    step(d, 2)["model"] = "head.c-1.5"
    del step(d, 2)["name"]
    step(d, 3)["inputs"]["RIGHT"] = "head.c-1.5.OUTPUT_C"  # what a user would write: reported once


def _completed_model_with_args(d: dict[str, Any], args: list[str]) -> None:
    """A model on its own whose interface the backend completes, and server args given."""
    spec(d)["models"].append({"name": "llm", "backend": "vllm", "instances": [{"kind": "MODEL"}]})
    spec(d)["server"]["args"] = args


def _default_onnx_runtime_dequantize_without_gpus(d: dict[str, Any]) -> None:
    """No instance group: Triton runs two CPU instances of an ONNX Runtime model."""
    spec(d)["server"]["gpus"] = 0
    model(d, 0).update(backend="onnxruntime")
    del model(d, 0)["instances"]


@dataclass(frozen=True)
class Case:
    id: str
    base: str  # example file
    mutate: Callable[[dict[str, Any]], Any]
    path: str
    reason: str  # substring of the message (literal)
    only: bool = True  # the problem is the only one reported (no cascade noise)


def _warmup_of_a(value: str) -> Callable[[dict[str, Any]], None]:
    """The diamond's extractor warmed up with a sample of two, INPUT_A given as `value`."""
    sample = f'model_warmup [{{ name: "w" batch_size: 2 inputs {{ key: "INPUT_A" value {{ {value} }} }} }}]'
    return lambda d: model(d, 0).update(extraConfig=sample)


def _scalar_extractor_input(d: dict[str, Any]) -> None:
    """The fanout extractor without batching, its input of dims [1] reshaped to a scalar."""
    del model(d, 0)["dynamicBatching"]
    model(d, 0).update(maxBatchSize=0)
    model(d, 0)["inputs"][0].update(dims=[1], reshape=[])


def _unbatched_dequantize_on_two_gpus(d: dict[str, Any]) -> None:
    """dequantize without batching (full shapes) and one instance per GPU in a pod of two GPUs."""
    spec(d)["server"]["gpus"] = 2
    model(d, 0).update(maxBatchSize=0)
    for t in (*model(d, 0)["inputs"], *model(d, 0)["outputs"]):
        t["dims"] = [-1, 1]


CASES = [
    # ---- unknown fields
    Case("unknown-top-level-field", "diamond", lambda d: d.update(spce={}), "spce", "unknown field"),
    Case(
        "unknown-nested-field-lists-allowed",
        "diamond",
        lambda d: spec(d)["server"].update(replica=2),
        "spec.server.replica",
        "replicas",  # the allowed field names are listed so the typo is easy to fix
    ),
    Case(
        "unknown-field-in-step",
        "diamond",
        lambda d: step(d, 1).update(modle="head_b"),
        "spec.pipelines[0].steps[1].modle",
        "unknown field",
    ),
    Case(
        "unknown-field-in-model-tensor",
        "diamond",
        lambda d: model(d, 0)["inputs"][0].update(shape=[4]),
        "spec.models[0].inputs[0].shape",
        "unknown field",
    ),
    # ---- kind / apiVersion
    Case("wrong-kind", "diamond", lambda d: d.update(kind="Pipeline"), "kind", "'Pipeline'"),
    Case(
        "wrong-api-version",
        "diamond",
        lambda d: d.update(apiVersion="serving.tritonpipeline.io/v1"),
        "apiVersion",
        "'serving.tritonpipeline.io/v1'",
    ),
    Case("missing-spec-models", "diamond", lambda d: spec(d).pop("models"), "spec.models", "missing"),
    # ---- names
    Case(
        "model-name-path-traversal",
        "diamond",
        lambda d: model(d, 0).update(name="../x"),
        "spec.models[0].name",
        "'../x'",
    ),
    Case(
        "model-name-over-64-chars",
        "diamond",
        lambda d: model(d, 0).update(name=LONG),
        "spec.models[0].name",
        "64 characters",
    ),
    Case(
        "step-of-a-dotted-model-without-a-name",
        "diamond",
        lambda d: _dotted_model_unnamed_step(d),
        "spec.pipelines[0].steps[2].name",
        "model 'head.c-1.5' holds a '.', which a step's name cannot (a reference is STEP.TENSOR): give this "
        "step a name of its own, such as 'head_c-1_5'",
    ),
    Case(
        "pipeline-name-with-dot",
        "diamond",
        lambda d: pipe(d).update(name="dia.mond"),
        "spec.pipelines[0].name",
        "invalid name 'dia.mond'",
    ),
    Case(
        "step-maps-an-input-of-a-model-declaring-none",
        "diamond",
        lambda d: model(d, 1).pop("inputs"),
        "spec.pipelines[0].steps[1].inputs.FEATS_IN_B",
        "model 'head_b' declares no inputs: Triton completes them from the backend when it loads the model, "
        "but a pipeline checks and maps only declared tensors; list 'FEATS_IN_B'",
    ),
    Case(
        "output-of-a-model-declaring-none",
        "diamond",
        lambda d: model(d, 3).pop("outputs"),
        "spec.pipelines[0].outputs[0].from",
        "model 'join' declares no outputs",
    ),
    Case(
        "model-left-to-auto-complete-that-args-turn-off",
        "diamond",
        lambda d: _completed_model_with_args(d, ["--strict-model-config=true"]),
        "spec.models[4].outputs",
        "model 'llm' declares no outputs, so it relies on Triton to complete its config from the backend, "
        "and spec.server.args turns that off (--strict-model-config=true)",
    ),
    Case(
        "model-left-to-auto-complete-that-args-turn-off-in-any-spelling",
        "diamond",
        lambda d: _completed_model_with_args(d, ["--strict-model-config=false", "--disable-auto"]),
        "spec.models[4].outputs",
        "(--disable-auto): declare its inputs and outputs, or drop --disable-auto",
    ),
    Case(
        "step-runs-a-model-its-backend-makes-decoupled-declared-not",
        "fanout",
        lambda d: model(d, 2).update(backend="vllm"),
        "spec.models[2].decoupled",
        "model 'head_c' runs on backend 'vllm', whose models are decoupled (its auto_complete_config sets "
        "model_transaction_policy.decoupled: true, and its initialize asserts it), and pipeline 'vision' "
        "runs it as step 'head_c': set decoupled: true",
    ),
    Case(
        "pipeline-name-with-quote",
        "diamond",
        lambda d: pipe(d).update(name='dia"mond'),
        "spec.pipelines[0].name",
        "invalid name 'dia\"mond'",
    ),
    Case(
        "step-name-with-space",
        "diamond",
        lambda d: step(d, 1).update(name="left head"),
        "spec.pipelines[0].steps[1].name",
        "'left head'",
    ),
    Case(
        "step-name-path-traversal",
        "diamond",
        lambda d: step(d, 0).update(name="../../etc"),
        "spec.pipelines[0].steps[0].name",
        "'../../etc'",
    ),
    Case(
        "tensor-name-with-control-character",
        "diamond",
        lambda d: model(d, 1)["outputs"][0].update(name="OUTPUT\x1b[2JB"),
        "spec.models[1].outputs[0].name",
        "invalid tensor name 'OUTPUT\\x1b[2JB'",
    ),
    Case(
        "tensor-name-over-256-chars",
        "diamond",
        lambda d: model(d, 0)["inputs"][0].update(name="T" * 257),
        "spec.models[0].inputs[0].name",
        "invalid tensor name",
    ),
    Case(
        "pipeline-input-name-with-a-control-character",
        "diamond",
        lambda d: pipe(d)["inputs"][0].update(name="IM\tAGE"),
        "spec.pipelines[0].inputs[0].name",
        "without control characters",
    ),
    Case(
        "metadata-name-uppercase",
        "diamond",
        lambda d: d["metadata"].update(name="Diamond"),
        "metadata.name",
        "'Diamond'",
    ),
    Case(
        "metadata-name-64-chars",
        "diamond",
        lambda d: d["metadata"].update(name="d" * 64),
        "metadata.name",
        "63 characters",
    ),
    Case(
        "step-named-inputs-is-reserved",
        "fanout",
        lambda d: (
            step(d, 1).update(name="inputs"),
            step(d, 1)["inputs"].update(FEATS_IN_B="extract.FEATS_A"),
        ),
        "spec.pipelines[0].steps[1].name",
        "reserved",
        only=False,
    ),
    # ---- conditions (`when`, orFrom, default): examples/conditional.yaml
    Case(
        "condition-with-two-operators",
        "conditional",
        lambda d: step(d, 1)["when"].update(lessThan=1),
        "spec.pipelines[0].steps[1].when",
        "exactly one operator",
    ),
    Case(
        "switch-names-an-unknown-step",
        "conditional",
        lambda d: spec(d)["pipelines"][1]["switch"][0]["cases"][0]["steps"].append("lagre"),
        "spec.pipelines[1].switch[0].cases[0].steps[1]",
        "no step 'lagre' in pipeline 'switched'",
    ),
    Case(
        "switch-names-a-step-twice",
        "conditional",
        lambda d: spec(d)["pipelines"][1]["switch"][0]["default"].append("large"),
        "spec.pipelines[1].switch[0].default[1]",
        "already runs when classify.LABEL equals 1 (spec.pipelines[1].switch[0].cases[0])",
    ),
    Case(
        "switch-case-of-another-type",
        "conditional",
        lambda d: spec(d)["pipelines"][1]["switch"][0]["cases"][0].update(equals=True),
        "spec.pipelines[1].switch[0].cases[0].equals",
        "give an integer",
    ),
    Case(
        "switch-on-a-tensor-of-many-values",
        "conditional",
        lambda d: spec(d)["pipelines"][1]["switch"][0].update(tensor="inputs.IMAGE"),
        "spec.pipelines[1].switch[0].tensor",
        "one value per request",
        only=False,  # and classify, which computed the tensor, feeds nothing now
    ),
    Case(
        "condition-reads-a-branch",
        "conditional",
        lambda d: step(d, 3)["when"].update(tensor="large.OUTPUT_B"),
        "spec.pipelines[0].steps[3].when.tensor",
        "runs under a condition itself",
        only=False,
    ),
    Case(
        "condition-not-scalar",
        "conditional",
        lambda d: step(d, 1)["when"].update(tensor="inputs.IMAGE"),
        "spec.pipelines[0].steps[1].when.tensor",
        "one value per request",
    ),
    Case(
        "condition-equals-on-floats",
        "conditional",
        lambda d: (
            pipe(d)["inputs"].append({"name": "T", "dataType": "FP32", "dims": [1]}),
            step(d, 1)["when"].update(tensor="inputs.T"),
        ),
        "spec.pipelines[0].steps[1].when",
        "equals does not fit inputs.T, a FP32 tensor",
    ),
    Case(
        "condition-value-of-another-type",
        "conditional",
        lambda d: step(d, 1)["when"].update(equals="zero"),
        "spec.pipelines[0].steps[1].when.equals",
        "give an integer",
    ),
    Case(
        "branch-read-by-an-unconditional-step",
        "conditional",
        lambda d: step(d, 3).pop("when"),
        "spec.pipelines[0].steps[3].inputs.FEATS_IN_C",
        "branches meet only at a pipeline output",
    ),
    Case(
        "decoupled-step-without-a-condition",
        "conditional",
        lambda d: model(d, 0).update(decoupled=True),
        "spec.pipelines[0].steps[0]",
        "may stand in a branch (its responses are streamed) but not among them",
        only=False,  # and switched's classify
    ),
    Case(
        "condition-with-sequence-and-decoupled-steps",
        "conditional",
        lambda d: (model(d, 1).update(decoupled=True), model(d, 2).update(sequenceBatching={})),
        "spec.pipelines[0].steps[2]",
        "holds sequence-batched or decoupled steps, not both",
        only=False,  # and switched's large
    ),
    Case(
        "decoupled-branch-writes-outputs-of-two-origins",
        "conditional",
        lambda d: (
            model(d, 2).update(decoupled=True),
            pipe(d)["outputs"].append({"name": "RAW", "from": "score.OUTPUT_C"}),
            step(d, 3)["inputs"].update(FEATS_IN_C="inputs.IMAGE"),
        ),
        "spec.pipelines[0].outputs[1].from",
        "(the outputs its steps that run when classify.LABEL equals 1 write) receives tensors",
    ),
    Case(
        "speculative-without-conditions",
        "diamond",
        lambda d: pipe(d).update(speculative=True),
        "spec.pipelines[0].speculative",
        "speculative runs the branches of a pipeline with conditions beside its other steps",
    ),
    Case(
        "speculative-with-a-sequence-step-in-a-branch",
        "conditional",
        lambda d: (pipe(d).update(speculative=True), model(d, 2).update(sequenceBatching={})),
        "spec.pipelines[0].speculative",
        "step 'large' (model 'head_b') runs when classify.LABEL equals 1 and is sequence-batched: a "
        "speculative pipeline runs every branch for every request, which would advance its sequences' state",
        only=False,  # and what a sequence step needs upstream
    ),
    Case(
        "speculative-with-a-decoupled-step-in-a-branch",
        "conditional",
        lambda d: (pipe(d).update(speculative=True), model(d, 1).update(decoupled=True)),
        "spec.pipelines[0].speculative",
        "step 'small' (model 'extractor') runs when classify.LABEL equals 0 and is decoupled: a "
        "speculative pipeline runs every branch for every request, which would stream the responses of "
        "branches not taken",
    ),
    Case(
        "or-from-without-conditions",
        "diamond",
        lambda d: pipe(d)["outputs"][0].update(orFrom=["left.OUTPUT_B"]),
        "spec.pipelines[0].outputs[0].orFrom",
        "is for outputs of conditional steps",
        only=False,
    ),
    Case(
        "or-from-after-an-unconditional-source",
        "conditional",
        lambda d: pipe(d)["outputs"][3].update(orFrom=["classify.LABEL"]),
        "spec.pipelines[0].outputs[3].orFrom[0]",
        "runs for every request (first written wins)",
    ),
    Case(
        "or-from-of-another-shape",
        "conditional",
        lambda d: pipe(d)["outputs"][0].update(orFrom=["score.OUTPUT_C"]),
        "spec.pipelines[0].outputs[0].orFrom[0]",
        "every source of one output agrees",
    ),
    Case(
        "default-of-an-unconditional-output",
        "conditional",
        lambda d: pipe(d)["outputs"][3].update(default=0),
        "spec.pipelines[0].outputs[3].default",
        "its default is never used",
    ),
    Case(
        "default-of-a-bf16-output",
        "conditional",
        lambda d: (
            model(d, 3)["outputs"][0].update(dataType="BF16"),
            pipe(d)["outputs"][1].update(default=0.0),
        ),
        "spec.pipelines[0].outputs[1].default",
        "cannot fill a BF16 output",
    ),
    Case(
        "default-of-another-type",
        "conditional",
        lambda d: pipe(d)["outputs"][2].update(default="zero"),
        "spec.pipelines[0].outputs[2].default",
        "output SMALL is FP32 (from small.FEATS_A); its default 'zero' is not: give a number",
    ),
    # a value no member of a union takes: one problem at the field (not one per member, at `.int`...)
    Case(
        "condition-value-not-a-scalar",
        "conditional",
        lambda d: step(d, 1)["when"].update(equals={"a": 1}),
        "spec.pipelines[0].steps[1].when.equals",
        "expected true/false, a number or a string, got a mapping {'a': 1}",
    ),
    Case(
        "threshold-not-a-number",
        "conditional",
        lambda d: step(d, 1).update(when={"tensor": "classify.LABEL", "greaterThan": "5"}),
        "spec.pipelines[0].steps[1].when.greaterThan",
        "expected a number, got a string '5'",
    ),
    Case(
        "default-not-a-scalar",
        "conditional",
        lambda d: pipe(d)["outputs"][2].update(default=[0.0]),
        "spec.pipelines[0].outputs[2].default",
        "expected true/false, a number or a string, got a list [0.0]",
    ),
    Case(
        "default-of-a-variable-size-output",
        "conditional",
        lambda d: (model(d, 3)["outputs"][0].update(dims=[-1]), pipe(d)["outputs"][1].update(default=0.0)),
        "spec.pipelines[0].outputs[1].default",
        "a default fills a tensor of fixed size",
    ),
    # ---- references
    Case(
        "unknown-step",
        "diamond",
        lambda d: step(d, 1)["inputs"].update(FEATS_IN_B="rigth.OUTPUT_C"),
        "spec.pipelines[0].steps[1].inputs.FEATS_IN_B",
        "unknown step 'rigth'",
    ),
    Case(
        "unknown-output-of-step",
        "diamond",
        lambda d: step(d, 1)["inputs"].update(FEATS_IN_B="extract.FEATS_B"),
        "spec.pipelines[0].steps[1].inputs.FEATS_IN_B",
        "no output 'FEATS_B'",
    ),
    Case(
        "pipeline-output-from-unknown-tensor",
        "diamond",
        lambda d: pipe(d)["outputs"][0].update({"from": "merge.JOINT"}),
        "spec.pipelines[0].outputs[0].from",
        "no output 'JOINT'",
    ),
    Case(
        "pipeline-output-straight-from-input",
        "diamond",
        lambda d: pipe(d)["outputs"].append({"name": "RAW", "from": "inputs.IMAGE"}),
        "spec.pipelines[0].outputs[1].from",
        "step output",
    ),
    Case(
        "unknown-model",
        "diamond",
        lambda d: step(d, 1).update(model="head_x"),
        "spec.pipelines[0].steps[1].model",
        "unknown model 'head_x'",
    ),
    Case(
        "step-version-not-served",
        "diamond",
        lambda d: (
            model(d, 1).update(versionPolicy={"policy": "specific", "versions": [1, 2]}),
            step(d, 1).update(version=3),
        ),
        "spec.pipelines[0].steps[1].version",
        "serves versions 1, 2 only (its versionPolicy): Triton refuses the ensemble",
    ),
    Case(
        "step-version-zero",
        "diamond",
        lambda d: step(d, 1).update(version=0),
        "spec.pipelines[0].steps[1].version",
        "must be >= 1, got 0",
    ),
    Case(
        "unknown-pipeline-input",
        "diamond",
        lambda d: step(d, 0)["inputs"].update(INPUT_A="inputs.IMG"),
        "spec.pipelines[0].steps[0].inputs.INPUT_A",
        "unknown pipeline input 'IMG'",
        only=False,  # IMAGE is then also reported unused
    ),
    Case(
        "reference-without-dot",
        "diamond",
        lambda d: step(d, 0)["inputs"].update(INPUT_A="IMAGE"),
        "spec.pipelines[0].steps[0].inputs.INPUT_A",
        "'IMAGE'",
        only=False,
    ),
    Case(
        "reference-with-empty-tensor",
        "diamond",
        lambda d: step(d, 1)["inputs"].update(FEATS_IN_B="extract."),
        "spec.pipelines[0].steps[1].inputs.FEATS_IN_B",
        "'extract.'",
    ),
    Case(
        "reference-not-a-string",
        "diamond",
        lambda d: step(d, 1)["inputs"].update(FEATS_IN_B=3),
        "spec.pipelines[0].steps[1].inputs.FEATS_IN_B",
        "expected a string",
    ),
    Case(
        "mapping-to-undeclared-model-input",
        "diamond",
        lambda d: step(d, 1).update(
            inputs={"FEATS_IN_X": "extract.FEATS_A", "FEATS_IN_B": "extract.FEATS_A"}
        ),
        "spec.pipelines[0].steps[1].inputs.FEATS_IN_X",
        "no input 'FEATS_IN_X'",
    ),
    # ---- types and shapes
    Case(
        "dtype-mismatch",
        "diamond",
        lambda d: model(d, 1)["inputs"][0].update(dataType="FP16"),
        "spec.pipelines[0].steps[1].inputs.FEATS_IN_B",
        "FP16",
    ),
    Case(
        "dims-rank-mismatch",
        "diamond",
        lambda d: model(d, 1)["inputs"][0].update(dims=[4, 1]),
        "spec.pipelines[0].steps[1].inputs.FEATS_IN_B",
        "[-1, 4, 1]",  # batch dimension + declared dims
    ),
    Case(
        "dims-size-mismatch",
        "diamond",
        lambda d: model(d, 2)["inputs"][0].update(dims=[5]),
        "spec.pipelines[0].steps[2].inputs.FEATS_IN_C",
        "[-1, 5]",
    ),
    Case(
        "pipeline-input-dims-with-batch-dim",
        "diamond",
        lambda d: pipe(d)["inputs"][0].update(dims=[-1, 4]),
        "spec.pipelines[0].steps[0].inputs.INPUT_A",
        "exclude the batch dimension",
    ),
    Case(
        "dims-contain-zero",
        "diamond",
        lambda d: model(d, 0)["inputs"][0].update(dims=[4, 0]),
        "spec.models[0].inputs[0].dims[1]",
        "not 0",
    ),
    Case(
        "dims-below-minus-one",
        "diamond",
        lambda d: model(d, 0)["outputs"][0].update(dims=[-2]),
        "spec.models[0].outputs[0].dims[0]",
        "-2",
    ),
    Case(
        "dims-empty",
        "diamond",
        lambda d: pipe(d)["inputs"][0].update(dims=[]),
        "spec.pipelines[0].inputs[0].dims",
        "at least 1",
    ),
    # ---- graph shape
    Case(
        "cycle-two-steps",
        "diamond",
        _two_step_cycle,
        "spec.pipelines[0].steps[1].inputs",
        "left -> merge -> left",
    ),
    Case("cycle-self-loop", "diamond", _self_loop, "spec.pipelines[0].steps[1].inputs", "left -> left"),
    Case(
        "duplicate-step-name-explicit",
        "diamond",
        lambda d: step(d, 2).update(name="left"),
        "spec.pipelines[0].steps[2].name",
        "duplicate step name 'left'",
        only=False,  # merge's reference to `right` is then unknown too
    ),
    Case(
        "duplicate-step-name-from-model",
        "fanout",
        lambda d: pipe(d)["steps"].append({"model": "head_b", "inputs": {"FEATS_IN_B": "extract.FEATS_A"}}),
        "spec.pipelines[0].steps[3].model",
        "duplicate step name 'head_b'",
    ),
    Case(
        "duplicate-pipeline-output-name",
        "diamond",
        lambda d: pipe(d)["outputs"].append({"name": "RESULT", "from": "left.OUTPUT_B"}),
        "spec.pipelines[0].outputs[1].name",
        "pipeline output 'RESULT' is listed twice (also outputs[0]), from merge.JOINED and from "
        "left.OUTPUT_B: a tensor has exactly one producer",
    ),
    Case(
        "pipeline-output-listed-twice",
        "diamond",
        lambda d: pipe(d)["outputs"].append(dict(pipe(d)["outputs"][0])),
        "spec.pipelines[0].outputs[1].name",
        "pipeline output 'RESULT' is listed twice (also outputs[0]), both from merge.JOINED (Triton loads "
        "such an ensemble and answers the output once); list it once",
    ),
    Case(
        "pipeline-output-named-like-input",
        "diamond",
        lambda d: pipe(d)["outputs"].append({"name": "IMAGE", "from": "left.OUTPUT_B"}),
        "spec.pipelines[0].outputs[1].name",
        "'IMAGE'",
    ),
    Case(
        "duplicate-pipeline-input-name",
        "diamond",
        lambda d: pipe(d)["inputs"].append({"name": "IMAGE", "dataType": "FP32", "dims": [4]}),
        "spec.pipelines[0].inputs[1].name",
        "duplicate pipeline input 'IMAGE'",
    ),
    Case(
        "duplicate-model-output-name",
        "diamond",
        lambda d: model(d, 0)["outputs"].append({"name": "FEATS_A", "dataType": "FP32", "dims": [4]}),
        "spec.models[0].outputs[1].name",
        "'FEATS_A'",
    ),
    Case(
        "shared-fanout-one-tensor-two-output-names",
        "fanout",
        lambda d: (
            pipe(d).update(fanOut="shared"),
            pipe(d)["outputs"].append({"name": "FEATURES_TOO", "from": "extract.FEATS_A"}),
        ),
        "spec.pipelines[0].outputs[3].from",
        "fanOut: router",
    ),
    Case(
        "unused-pipeline-input",
        "diamond",
        lambda d: pipe(d)["inputs"].append({"name": "EXTRA", "dataType": "FP32", "dims": [4]}),
        "spec.pipelines[0].inputs[1]",
        "'EXTRA' is not used",
    ),
    Case(
        "unmapped-required-input",
        "diamond",
        lambda d: step(d, 3)["inputs"].pop("RIGHT"),
        "spec.pipelines[0].steps[3].inputs",
        "required input 'RIGHT'",
    ),
    Case("dead-step", "diamond", _dead_right_step, "spec.pipelines[0].steps[2]", "'right'"),
    Case(
        "step-without-inputs",
        "diamond",
        _extra_step_without_inputs,
        "spec.pipelines[0].steps[4].inputs",
        "no inputs",
        only=False,  # head_c's required input is unmapped as well
    ),
    Case(
        "rejoin-of-decoupled-and-plain-branch",
        "diamond",
        lambda d: model(d, 2).update(decoupled=True),
        "spec.pipelines[0].steps[3].inputs",
        "right.OUTPUT_C comes from decoupled step 'right'",
    ),
    Case(
        "sequence-step-after-decoupled-step",
        "streaming",
        lambda d: model(d, 0).update(decoupled=True),
        "spec.pipelines[0].steps[1]",
        "reads the responses of decoupled step 'dequantize'",
    ),
    Case(
        "several-instances-before-a-sequence-step",
        "streaming",
        lambda d: model(d, 0).update(instances=[{"kind": "GPU", "count": 2}]),
        "spec.pipelines[0].steps[0]",
        "may run 2 instances at once and feeds sequence-batched step 'accumulator' "
        "(dequantize -> accumulator)",
    ),
    Case(
        "several-instances-per-gpu-before-a-sequence-step-without-batching",
        "streaming",
        _unbatched_dequantize_on_two_gpus,
        "spec.pipelines[0].steps[0]",
        "may run 2 instances at once",
    ),
    Case(
        "onnx-runtime-default-instances-before-a-sequence-step-in-a-pod-without-gpus",
        "streaming",
        _default_onnx_runtime_dequantize_without_gpus,
        "spec.pipelines[0].steps[0]",
        "may run 2 instances at once",
    ),
    Case(
        "reshape-with-other-elements",
        "fanout",
        lambda d: model(d, 0)["inputs"][0].update(reshape=[2, 3]),
        "spec.models[0].inputs[0].reshape",
        "reshape [2, 3] does not hold the same elements as dims [4]",
    ),
    Case(
        "reshape-with-other-variable-dimensions",
        "fanout",
        lambda d: model(d, 0)["outputs"][0].update(dims=[-1, 4], reshape=[4, -1]),
        "spec.models[0].outputs[0].reshape",
        "reshape [4, -1] does not hold the same elements as dims [-1, 4]",
        only=False,  # the step's output no longer matches its readers either
    ),
    Case(
        "image-format-without-three-dims",
        "fanout",
        lambda d: model(d, 0)["inputs"][0].update(format="NCHW"),
        "spec.models[0].inputs[0].format",
        "format NCHW needs 3 dims (without the batch dimension), got [4]",
    ),
    Case(
        "scalar-reshape-without-batching",
        "fanout",
        _scalar_extractor_input,
        "spec.models[0].inputs[0].reshape",
        "an empty reshape makes the tensor a scalar, which a model without batching (maxBatchSize 0) "
        "cannot have",
        only=False,  # the steps' shapes change with the batching
    ),
    Case(
        "shape-tensor-off-tensorrt",
        "fanout",
        lambda d: model(d, 0)["outputs"][0].update(isShapeTensor=True),
        "spec.models[0].outputs[0].isShapeTensor",
        "isShapeTensor is for TensorRT models (backend tensorrt or platform tensorrt_plan), and model "
        "'extractor' runs on backend 'python'",
    ),
    Case(
        "optimization-profile-off-tensorrt",
        "fanout",
        lambda d: model(d, 0)["instances"][0].update(profile=["0"]),
        "spec.models[0].instances[0].profile",
        "profile picks TensorRT optimization profiles, and model 'extractor' runs on backend 'python'",
    ),
    Case(
        "optimization-profile-not-an-index",
        "fanout",
        lambda d: (
            model(d, 0).update(backend="tensorrt") or model(d, 0)["instances"][0].update(profile=["-1"])
        ),
        "spec.models[0].instances[0].profile[0]",
        "invalid profile '-1': a TensorRT optimization profile's index, such as 0",
    ),
    Case(
        "implicit-state-on-a-backend-without-it",
        "streaming",
        _state_on_python,
        "spec.models[1].sequenceBatching.states",
        "model 'accumulator' runs on backend 'python', which would never update the state",
    ),
    Case(
        "implicit-state-on-a-platform-without-it",
        "streaming",
        _state_on_tensorflow,
        "spec.models[1].sequenceBatching.states",
        "model 'accumulator' runs on platform 'tensorflow_savedmodel', which would never update the state",
    ),
    Case(
        "initial-state-of-another-type",
        "streaming",
        lambda d: _with_state(d, dataType="INT32"),
        "spec.models[1].sequenceBatching.states[0].initialState.dataType",
        "the initial state's dataType INT32 differs from the state's FP32",
    ),
    Case(
        "initial-state-of-another-rank",
        "streaming",
        lambda d: _with_state(d, dims=[1, 1], dataType="FP32"),
        "spec.models[1].sequenceBatching.states[0].initialState.dims",
        "the initial state's dims [1, 1] and the state's [1] differ in rank",
    ),
    Case(
        "initial-state-of-another-size",
        "streaming",
        lambda d: _with_state(d, dims=[2], dataType="FP32"),
        "spec.models[1].sequenceBatching.states[0].initialState.dims",
        "the initial state's dims [2] differ from the state's [1] where the state's are fixed",
    ),
    Case(
        "growable-state-in-two-buffers",
        "streaming",
        lambda d: _with_state(d)["sequenceBatching"]["states"][0].update(useGrowableMemory=True),
        "spec.models[1].sequenceBatching.states[0].useGrowableMemory",
        "useGrowableMemory needs useSameBufferForInputOutput",
    ),
    Case(
        "growable-state-on-cpu",
        "streaming",
        _growable_state_on_cpu,
        "spec.models[1].sequenceBatching.states[0].useGrowableMemory",
        "useGrowableMemory works with GPU instances only, and model 'accumulator' runs instances of kind CPU",
    ),
    Case(
        "optional-pipeline-input-to-a-required-input",
        "fanout",
        lambda d: pipe(d)["inputs"][0].update(optional=True),
        "spec.pipelines[0].steps[0].inputs.INPUT_A",
        "pipeline input 'IMAGE' is optional but feeds extract.INPUT_A, a required input of model 'extractor'",
    ),
    Case(
        "rejoin-of-two-decoupled-steps",
        "diamond",
        _two_decoupled_heads,
        "spec.pipelines[0].steps[3].inputs",
        "decoupled",
    ),
    # ---- enums
    Case(
        "enum-fan-out",
        "fanout",
        lambda d: pipe(d).update(fanOut="broadcast"),
        "spec.pipelines[0].fanOut",
        "'broadcast'",
    ),
    Case(
        "enum-session-affinity",
        "streaming",
        lambda d: spec(d)["routing"].update(sessionAffinity="Cookie"),
        "spec.routing.sessionAffinity",
        "'Cookie'",
    ),
    Case(
        "enum-instance-kind",
        "fanout",
        lambda d: model(d, 0)["instances"][0].update(kind="TPU"),
        "spec.models[0].instances[0].kind",
        "'TPU'",
    ),
    Case(
        "enum-data-type",
        "diamond",
        lambda d: model(d, 0)["inputs"][0].update(dataType="FLOAT32"),
        "spec.models[0].inputs[0].dataType",
        "'FLOAT32'",
    ),
    Case(
        "enum-autoscaling-metric",
        "fanout",
        lambda d: spec(d).update(autoscaling={"maxReplicas": 3, "metric": "cpu"}),
        "spec.autoscaling.metric",
        "'cpu'",
    ),
    Case(
        "enum-autoscaling-engine",
        "fanout",
        lambda d: spec(d).update(autoscaling={"maxReplicas": 3, "engine": "vpa"}),
        "spec.autoscaling.engine",
        "'vpa'",
    ),
    Case(
        "enum-sequence-strategy",
        "streaming",
        lambda d: model(d, 1)["sequenceBatching"].update(strategy="newest"),
        "spec.models[1].sequenceBatching.strategy",
        "'newest'",
    ),
    Case(
        "enum-routing-provider",
        "streaming",
        lambda d: spec(d)["routing"].update(provider="traefik"),
        "spec.routing.provider",
        "'traefik'",
    ),
    # ---- bounds and batching
    Case(
        "min-replicas-above-max",
        "fanout",
        lambda d: spec(d).update(autoscaling={"minReplicas": 5, "maxReplicas": 3}),
        "spec.autoscaling.minReplicas",
        "minReplicas must be <= maxReplicas",
    ),
    Case(
        "extra-config-not-triton-text",
        "diamond",
        lambda d: model(d, 0).update(extraConfig="optimization {"),
        "spec.models[0].extraConfig",
        """is not Triton's config text format: line 1, column 14: Expected "}".""",
    ),
    Case(
        "extra-config-too-long",
        "diamond",
        lambda d: model(d, 0).update(extraConfig="#" * (64 * 1024 + 1)),
        "spec.models[0].extraConfig",
        "allows at most 65536 characters",
    ),
    Case(
        "batch-input-without-a-source",
        "diamond",
        lambda d: model(d, 0).update(
            extraConfig='batch_input [{ kind: BATCH_ITEM_SHAPE target_name: "S" data_type: TYPE_INT32 }]'
        ),
        "spec.models[0].extraConfig",
        "batch_input[0] (BATCH_ITEM_SHAPE) takes one source_input, got 0",
    ),
    Case(
        "batch-input-of-another-type",
        "diamond",
        lambda d: model(d, 0).update(
            extraConfig='batch_input [{ target_name: "N" data_type: TYPE_FP16 source_input: "INPUT_A" }]'
        ),
        "spec.models[0].extraConfig",
        "batch_input[0] has data_type TYPE_FP16: Triton refuses the model",
    ),
    Case(
        "batch-output-from-an-unknown-input",
        "diamond",
        lambda d: model(d, 0).update(
            extraConfig='batch_output [{ target_name: "FEATS_A" source_input: "INPUT" }]'
        ),
        "spec.models[0].extraConfig",
        "batch_output[0] names source_input 'INPUT', which is none of the model's inputs (INPUT_A)",
    ),
    Case(
        "batch-output-to-an-unknown-output",
        "diamond",
        lambda d: model(d, 0).update(
            extraConfig='batch_output [{ target_name: "FEATS" source_input: "INPUT_A" }]'
        ),
        "spec.models[0].extraConfig",
        "batch_output[0] names target_name 'FEATS', which is none of the model's outputs (FEATS_A)",
    ),
    Case(
        "batch-output-to-one-output-twice",
        "diamond",
        lambda d: model(d, 0).update(
            extraConfig='batch_output [{ target_name: ["FEATS_A", "FEATS_A"] source_input: "INPUT_A" }]'
        ),
        "spec.models[0].extraConfig",
        "batch_output[0] names target_name 'FEATS_A' twice",
    ),
    Case(
        "response-cache-on-a-sequence-model",
        "streaming",
        lambda d: model(d, 1).update(extraConfig="response_cache { enable: true }"),
        "spec.models[1].extraConfig",
        "response_cache is enabled on a model with sequenceBatching: Triton refuses the model",
    ),
    Case(
        "metric-without-buckets",
        "diamond",
        lambda d: model(d, 0).update(
            extraConfig='model_metrics { metric_control [{ metric_identifier { family: "f" } '
            "histogram_options {} }] }"
        ),
        "spec.models[0].extraConfig",
        "model_metrics.metric_control[0] needs histogram_options.buckets: Triton refuses the model",
    ),
    Case(
        "warmup-with-a-variable-size",
        "diamond",
        _warmup_of_a("data_type: TYPE_FP32 dims: [ 4, -1 ] random_data: true"),
        "spec.models[0].extraConfig",
        "model_warmup[0] gives input 'INPUT_A' dims [4, -1]: Triton refuses the model",
    ),
    Case(
        "warmup-without-data",
        "diamond",
        _warmup_of_a("data_type: TYPE_FP32 dims: [ 4 ]"),
        "spec.models[0].extraConfig",
        "model_warmup[0] gives input 'INPUT_A' no data (zero_data, random_data or input_data_file)",
    ),
    Case(
        "warmup-of-another-type",
        "diamond",
        _warmup_of_a("data_type: TYPE_FP16 dims: [ 4 ] zero_data: true"),
        "spec.models[0].extraConfig",
        "model_warmup[0] gives input 'INPUT_A' data type FP16, and the model's input is FP32",
    ),
    Case(
        "extra-config-sets-a-rendered-field",
        "diamond",
        lambda d: model(d, 0).update(extraConfig='default_model_filename: "a.onnx"\nmax_batch_size: 4'),
        "spec.models[0].extraConfig",
        "sets max_batch_size, which the spec renders from maxBatchSize: set that instead",
    ),
    Case(
        "autoscaling-target-infinite",
        "fanout",
        lambda d: spec(d).update(autoscaling={"maxReplicas": 3, "target": float("inf")}),
        "spec.autoscaling.target",
        "must be a finite number, got inf",
    ),
    Case(
        "autoscaling-target-past-the-hpas-range",
        "fanout",
        lambda d: spec(d).update(autoscaling={"maxReplicas": 3, "target": 1e16}),
        "spec.autoscaling.target",
        "must be <= 1000000000000000, got 1e+16",
    ),
    Case(
        "ensemble-max-batch-above-step",
        "diamond",
        lambda d: (model(d, 2).update(maxBatchSize=4), pipe(d).update(maxBatchSize=8)),
        "spec.pipelines[0].maxBatchSize",
        "right (head_c: 4)",
    ),
    Case(
        "dynamic-batching-without-max-batch-size",
        "fanout",
        _no_batching_anywhere,
        "spec.models[0].dynamicBatching",
        "maxBatchSize",
    ),
    Case(
        "preferred-batch-size-above-max",
        "fanout",
        lambda d: model(d, 0)["dynamicBatching"].update(preferredBatchSizes=[4, 16]),
        "spec.models[0].dynamicBatching.preferredBatchSizes[1]",
        "16",
    ),
    Case(
        "sequence-preferred-batch-size-above-max",
        "streaming",
        lambda d: model(d, 1)["sequenceBatching"].update(strategy="oldest", preferredBatchSizes=[32]),
        "spec.models[1].sequenceBatching.preferredBatchSizes[0]",
        "32",
    ),
    Case(
        "oldest-only-fields-on-direct",
        "streaming",
        lambda d: model(d, 1)["sequenceBatching"].update(maxCandidateSequences=4),
        "spec.models[1].sequenceBatching",
        "maxCandidateSequences",
    ),
    Case(
        "dynamic-and-sequence-batching",
        "streaming",
        lambda d: model(d, 1).update(dynamicBatching={"maxQueueDelayMicroseconds": 10}),
        "spec.models[1]",
        "cannot both be set",
    ),
    Case(
        "negative-max-batch-size",
        "diamond",
        lambda d: model(d, 0).update(maxBatchSize=-1),
        "spec.models[0].maxBatchSize",
        ">= 0",
    ),
    # ---- backend / platform
    Case(
        "backend-and-platform",
        "diamond",
        lambda d: model(d, 0).update(platform="onnxruntime_onnx"),
        "spec.models[0]",
        "exactly one of backend",
    ),
    Case(
        "neither-backend-nor-platform",
        "diamond",
        lambda d: model(d, 0).pop("backend"),
        "spec.models[0]",
        "exactly one of backend",
    ),
    Case(
        "backend-with-uppercase",
        "diamond",
        lambda d: model(d, 0).update(backend="Python"),
        "spec.models[0].backend",
        "'Python'",
    ),
    # ---- sequence controls
    Case(
        "sequence-control-mapped-by-step",
        "streaming",
        lambda d: step(d, 1)["inputs"].update(START="dequantize.VALUE"),
        "spec.pipelines[0].steps[1].inputs.START",
        "sequence control",
    ),
    Case(
        "control-name-on-non-sequence-model",
        "streaming",
        lambda d: step(d, 0)["inputs"].update(START="inputs.CHUNK"),
        "spec.pipelines[0].steps[0].inputs.START",
        "only available on models with sequenceBatching",
    ),
    Case(
        "control-tensor-also-an-input",
        "streaming",
        _control_declared_as_input,
        "spec.models[1].sequenceBatching.controls.start",
        "'START'",
    ),
    Case(
        "state-tensor-also-an-input",
        "streaming",
        _state_declared_as_input,
        "spec.models[1].sequenceBatching.states[0].inputName",
        "'STATE_IN'",
    ),
    Case(
        "implicit-state-mapped-by-step",
        "streaming",
        _state_mapped_by_step,
        "spec.pipelines[0].steps[1].inputs.STATE_IN",
        "'STATE_IN' is an implicit state of model 'accumulator'",
    ),
    Case(
        "same-name-for-two-controls",
        "streaming",
        lambda d: model(d, 1)["sequenceBatching"]["controls"].update(end="START"),
        "spec.models[1].sequenceBatching.controls",
        "need different names",
    ),
    # ---- names across the spec
    Case(
        "pipeline-named-like-a-model",
        "diamond",
        lambda d: pipe(d).update(name="join"),
        "spec.pipelines[0].name",
        "'join'",
    ),
    Case(
        "pipeline-named-like-the-generated-gauge",
        "diamond",
        lambda d: (
            pipe(d).update(name="tritonpipeline__open_streams"),
            spec(d).update(routing={"sessionAffinity": "Stream"}),
        ),
        "spec.pipelines[0].name",
        "reserved for the open-streams gauge model",
    ),
    Case(
        "duplicate-model-name",
        "diamond",
        lambda d: spec(d)["models"].append(copy.deepcopy(model(d, 0))),
        "spec.models[4].name",
        "duplicate model name 'extractor'",
    ),
    Case(
        "duplicate-pipeline-name",
        "diamond",
        _second_pipeline_same_name,
        "spec.pipelines[1].name",
        "duplicate pipeline name 'diamond'",
    ),
    # ---- server, repository, routing
    Case(
        "uri-http-scheme",
        "diamond",
        lambda d: spec(d)["modelRepository"].update(uri="http://example.com/models"),
        "spec.modelRepository.uri",
        "'http'",
    ),
    Case(
        "uri-pvc-without-claim",
        "diamond",
        lambda d: spec(d)["modelRepository"].update(uri="pvc:///triton"),
        "spec.modelRepository.uri",
        "no claim name",
    ),
    Case(
        "replicas-as-string",
        "fanout",
        lambda d: spec(d)["server"].update(replicas="2"),
        "spec.server.replicas",
        "expected an integer",
    ),
    Case(
        "replicas-as-float",
        "fanout",
        lambda d: spec(d)["server"].update(replicas=1.5),
        "spec.server.replicas",
        "1.5",
    ),
    Case(
        "replicas-as-bool",
        "fanout",
        lambda d: spec(d)["server"].update(replicas=True),
        "spec.server.replicas",
        "boolean",
    ),
    Case(
        "negative-gpus",
        "fanout",
        lambda d: spec(d)["server"].update(gpus=-1),
        "spec.server.gpus",
        ">= 0",
    ),
    Case(
        "server-arg-without-dashes",
        "fanout",
        lambda d: spec(d)["server"].update(args=["log-verbose=1"]),
        "spec.server.args[0]",
        "'log-verbose=1'",
    ),
    Case(
        "bad-gpu-resource",
        "fanout",
        lambda d: spec(d)["server"].update(gpuResource="nvidia com/gpu"),
        "spec.server.gpuResource",
        "'nvidia com/gpu'",
    ),
    Case(
        "bad-routing-header",
        "streaming",
        lambda d: spec(d)["routing"].update(header="x seq"),
        "spec.routing.header",
        "'x seq'",
    ),
    Case(
        "non-scalar-model-parameter",
        "diamond",
        lambda d: model(d, 0).update(parameters={"EXECUTION_ENV_PATH": ["a", "b"]}),
        "spec.models[0].parameters",
        "'EXECUTION_ENV_PATH'",
    ),
    Case(
        "models-not-a-list",
        "diamond",
        lambda d: spec(d).update(models={"name": "extractor"}),
        "spec.models",
        "expected a list",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_invalid_spec_reports_path_and_reason(case: Case) -> None:
    doc = example(case.base)
    compiles(doc)  # the base is valid, so the mutation alone is to blame
    case.mutate(doc)
    problems = problems_of(doc)
    rendered = "\n".join(map(str, problems))
    matching = [p for p in problems if p.path == case.path]
    assert matching, f"no problem at {case.path}; got:\n{rendered}"
    assert any(case.reason in p.message for p in matching), f"{case.reason!r} not in:\n{rendered}"
    if case.only:
        assert len(problems) == 1, f"expected exactly one problem, got:\n{rendered}"


def _template(message: str) -> re.Pattern[str]:
    """A rule's message constant as a pattern: each `{field}` matches any text."""
    parts = [
        re.escape(literal) + (".*?" if field is not None else "")
        for literal, field, _, _ in Formatter().parse(message)
    ]
    return re.compile("".join(parts), re.DOTALL)


def test_every_compiler_rule_has_a_case() -> None:
    """Each message of compiler/rules/messages.py is produced by some case of the table, so no rule goes
    untested (a new rule needs a new case)."""
    produced: list[str] = []
    for case in CASES:
        doc = example(case.base)
        case.mutate(doc)
        produced += [p.message for p in problems_of(doc)]
    messages = {
        name: value
        for name, value in vars(rules).items()
        if name.isupper() and isinstance(value, str) and name not in vars(plan_types)  # not INPUTS
    }
    assert len(messages) > 30
    missing = [name for name, m in messages.items() if not any(_template(m).search(p) for p in produced)]
    assert not missing, f"no case of the table produces rules.{', rules.'.join(missing)}"


# --------------------------------------------------------------------------- largest values
# An integer Triton's config holds as int32 or uint32 takes the largest value of its type, and a 64-bit one
# the largest a float64 holds exactly (2^53 - 1: the apiserver's bounds are float64s); one more is refused at
# its field instead of failing the compile (protobuf's "Value out of range"), or wrapping around inside
# Triton (a microsecond field is turned into 64-bit nanoseconds there).

INT32, UINT32, EXACT = (1 << 31) - 1, (1 << 32) - 1, (1 << 53) - 1


def _lone_model(**fields: Any) -> dict[str, Any]:
    """A document of one Python model that no pipeline runs, with `fields`."""
    m = {
        "name": "m",
        "backend": "python",
        "maxBatchSize": 8,
        "inputs": [{"name": "X", "dataType": "FP32", "dims": [4]}],
        "outputs": [{"name": "Y", "dataType": "FP32", "dims": [4]}],
    }
    return {
        "apiVersion": "serving.tritonpipeline.io/v1alpha1",
        "kind": "TritonPipeline",
        "metadata": {"name": "largest"},
        "spec": {"modelRepository": {"uri": "s3://bucket/models"}, "models": [{**m, **fields}]},
    }


def _oldest(**fields: Any) -> dict[str, Any]:
    return {"sequenceBatching": {"strategy": "oldest", **fields}}


# (id, the model's fields with LARGEST where the value goes, its field path, where the rendered config
# holds it, the largest value)
LARGEST = object()
LARGEST_VALUES: list[tuple[str, dict[str, Any], str, Callable[[Any], Any], int]] = [
    (
        "dims",
        {"inputs": [{"name": "X", "dataType": "FP32", "dims": [LARGEST]}]},
        "inputs[0].dims[0]",
        lambda c: c.input[0].dims[0],
        EXACT,
    ),
    (
        "reshape",
        {"inputs": [{"name": "X", "dataType": "FP32", "dims": [LARGEST], "reshape": [LARGEST]}]},
        "inputs[0].reshape[0]",
        lambda c: c.input[0].reshape.shape[0],
        EXACT,
    ),
    (
        "queue-delay",
        {"dynamicBatching": {"maxQueueDelayMicroseconds": LARGEST}},
        "dynamicBatching.maxQueueDelayMicroseconds",
        lambda c: c.dynamic_batching.max_queue_delay_microseconds,
        EXACT,
    ),
    (
        "queue-timeout",
        {"dynamicBatching": {"defaultQueuePolicy": {"defaultTimeoutMicroseconds": LARGEST}}},
        "dynamicBatching.defaultQueuePolicy.defaultTimeoutMicroseconds",
        lambda c: c.dynamic_batching.default_queue_policy.default_timeout_microseconds,
        EXACT,
    ),
    (
        "queue-size",
        {"dynamicBatching": {"defaultQueuePolicy": {"maxQueueSize": LARGEST}}},
        "dynamicBatching.defaultQueuePolicy.maxQueueSize",
        lambda c: c.dynamic_batching.default_queue_policy.max_queue_size,
        UINT32,
    ),
    (
        "priority-levels",
        {"dynamicBatching": {"priorityLevels": LARGEST, "defaultPriorityLevel": 1}},
        "dynamicBatching.priorityLevels",
        lambda c: c.dynamic_batching.priority_levels,
        EXACT,
    ),
    (
        "sequence-idle",
        {"sequenceBatching": {"maxSequenceIdleMicroseconds": LARGEST}},
        "sequenceBatching.maxSequenceIdleMicroseconds",
        lambda c: c.sequence_batching.max_sequence_idle_microseconds,
        EXACT,
    ),
    (
        "candidate-sequences",
        _oldest(maxCandidateSequences=LARGEST),
        "sequenceBatching.maxCandidateSequences",
        lambda c: c.sequence_batching.oldest.max_candidate_sequences,
        INT32,
    ),
    (
        "oldest-queue-delay",
        _oldest(maxQueueDelayMicroseconds=LARGEST),
        "sequenceBatching.maxQueueDelayMicroseconds",
        lambda c: c.sequence_batching.oldest.max_queue_delay_microseconds,
        EXACT,
    ),
    (
        "num-versions",
        {"versionPolicy": {"policy": "latest", "numVersions": LARGEST}},
        "versionPolicy.numVersions",
        lambda c: c.version_policy.latest.num_versions,
        UINT32,
    ),
    (
        "versions",
        {"versionPolicy": {"policy": "specific", "versions": [LARGEST]}},
        "versionPolicy.versions[0]",
        lambda c: c.version_policy.specific.versions[0],
        EXACT,
    ),
]


def _placed(node: Any, value: int) -> Any:
    if node is LARGEST:
        return value
    if isinstance(node, dict):
        return {k: _placed(v, value) for k, v in node.items()}
    if isinstance(node, list):
        return [_placed(v, value) for v in node]
    return node


@pytest.mark.parametrize(
    ("fields", "path", "rendered", "largest"),
    [row[1:] for row in LARGEST_VALUES],
    ids=[row[0] for row in LARGEST_VALUES],
)
def test_a_triton_config_integer_takes_its_largest_value_and_no_more(
    fields: dict[str, Any], path: str, rendered: Callable[[Any], Any], largest: int
) -> None:
    tp = parse_pipeline(_lone_model(**_placed(fields, largest)))
    artifacts = compile_pipeline(tp)
    render_children(tp, artifacts, Settings())  # what the operator applies renders too
    assert rendered(triton_parse_text(artifacts.files["m/config.pbtxt"])) == largest
    problems = problems_of(_lone_model(**_placed(fields, largest + 1)))
    assert Problem(f"spec.models[0].{path}", f"must be <= {largest}, got {largest + 1}") in problems


def _numbers(schema: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The spec's own numbers (a Kubernetes type's are Kubernetes' to bound, when it gets the object)."""
    if isinstance(schema, dict) and not passes_through(schema):
        if schema.get("type") in ("integer", "number"):
            yield path, schema
        for key, value in schema.get("properties", {}).items():
            yield from _numbers(value, f"{path}.{key}")
        yield from _numbers(schema.get("items"), f"{path}[]")


def test_every_number_the_spec_takes_has_a_largest_value() -> None:
    """A new integer field without `le` fails here: the CRD then admits what the compiler, Triton or the
    objects the operator renders cannot hold."""
    (version,) = crd()["spec"]["versions"]
    numbers = dict(_numbers(version["schema"]["openAPIV3Schema"]["properties"]["spec"], "spec"))
    assert len(numbers) > 30
    assert [path for path, schema in numbers.items() if "maximum" not in schema] == []


# --------------------------------------------------------------------------- precise messages
# A few messages must say everything a user needs, not just point at the field.


def test_unknown_step_lists_the_known_steps() -> None:
    doc = example("diamond")
    step(doc, 1)["inputs"]["FEATS_IN_B"] = "rigth.OUTPUT_C"
    (p,) = problems_of(doc)
    assert p.path == "spec.pipelines[0].steps[1].inputs.FEATS_IN_B"
    for name in ("extract", "left", "right", "merge"):
        assert name in p.message


def test_dtype_mismatch_names_both_types_and_the_producer() -> None:
    doc = example("diamond")
    model(doc, 2)["inputs"][0]["dataType"] = "INT64"
    (p,) = problems_of(doc)
    assert p.path == "spec.pipelines[0].steps[2].inputs.FEATS_IN_C"
    assert "extract.FEATS_A" in p.message and "FP32" in p.message and "INT64" in p.message


def test_dims_mismatch_shows_both_shapes_with_batch_dimension() -> None:
    doc = example("diamond")
    model(doc, 3)["inputs"][1]["dims"] = [2]  # RIGHT, fed by head_c's OUTPUT_C of dims [1]
    (p,) = problems_of(doc)
    assert p.path == "spec.pipelines[0].steps[3].inputs.RIGHT"
    assert "[-1, 1]" in p.message and "[-1, 2]" in p.message


def test_cycle_is_reported_once_with_every_member() -> None:
    doc = example("diamond")
    _two_step_cycle(doc)
    problems = problems_of(doc)
    cycles = [p for p in problems if "cycle" in p.message]
    assert len(cycles) == 1
    assert re.search(r"\bleft\b.*\bmerge\b.*\bleft\b", cycles[0].message)


def test_decoupled_rejoin_names_both_decoupled_steps() -> None:
    doc = example("diamond")
    _two_decoupled_heads(doc)
    (p,) = problems_of(doc)
    assert "'merge'" in p.message
    assert "left.OUTPUT_B" in p.message and "right.OUTPUT_C" in p.message


def test_decoupled_branch_rejoined_with_a_plain_branch_is_refused() -> None:
    """Triton's rule: a step's inputs must all originate from the same decoupled step, and "no decoupled
    step" is an origin too; only `left` is decoupled, so `merge` pairs streamed with plain responses."""
    doc = example("diamond")
    model(doc, 1)["decoupled"] = True  # head_b -> step left
    (p,) = problems_of(doc)
    assert p.path == "spec.pipelines[0].steps[3].inputs"
    assert "step 'merge'" in p.message
    assert "left.OUTPUT_B comes from decoupled step 'left'" in p.message
    assert "right.OUTPUT_C from no decoupled step" in p.message
    assert "different decoupled models" in p.message  # Triton's own words, to search its log for


def test_decoupled_step_joined_with_a_pipeline_input_is_refused() -> None:
    doc = example("diamond")
    model(doc, 0)["decoupled"] = True  # extractor -> extract -> left
    pipe(doc)["inputs"].append({"name": "SCALE", "dataType": "FP32", "dims": [1]})
    del pipe(doc)["steps"][2]  # merge's RIGHT comes straight from the pipeline input instead
    step(doc, 2)["inputs"]["RIGHT"] = "inputs.SCALE"
    (p,) = problems_of(doc)
    assert p.path == "spec.pipelines[0].steps[2].inputs"
    assert "left.OUTPUT_B comes from decoupled step 'extract'" in p.message
    assert "inputs.SCALE from no decoupled step" in p.message


def test_rejoin_after_a_nested_decoupled_step_is_refused() -> None:
    doc = example("diamond")
    model(doc, 0)["decoupled"] = True  # extract
    model(doc, 1)["decoupled"] = True  # left, downstream of extract: its responses are its own
    (p,) = problems_of(doc)
    assert p.path == "spec.pipelines[0].steps[3].inputs"
    assert "decoupled step 'left'" in p.message and "decoupled step 'extract'" in p.message


def test_decoupled_step_before_the_fan_out_may_rejoin() -> None:
    doc = example("diamond")
    model(doc, 0)["decoupled"] = True  # both branches descend from `extract`: one origin
    compiles(doc)


def test_pipeline_outputs_from_different_decoupled_origins_are_refused() -> None:
    doc = example("fanout")
    model(doc, 1)["decoupled"] = True  # head_b: SCORE_B streams, FEATURES and SCORE_C do not
    (p,) = problems_of(doc)
    assert p.path == "spec.pipelines[0].outputs[1].from"
    assert (
        "pipeline 'vision'" in p.message and "head_b.OUTPUT_B comes from decoupled step 'head_b'" in p.message
    )


def test_pipeline_outputs_of_one_decoupled_origin_are_fine() -> None:
    doc = example("fanout")
    model(doc, 0)["decoupled"] = True  # extractor: every output descends from it
    compiles(doc)


def test_implicit_states_on_a_custom_backend_are_fine() -> None:
    """A backend that is none of NVIDIA's is built on the backend API, which keeps implicit states where the
    backend asks (Triton's qa/L0_implicit_state runs its own backend, 'implicit_state', so)."""
    doc = example("streaming")
    m = _with_state(doc)
    del m["platform"]
    m["backend"] = "implicit_state"
    compiles(doc)
    m["backend"] = "onnxruntime"
    compiles(doc)


def test_ensemble_max_batch_size_equal_to_smallest_step_is_fine() -> None:
    doc = example("diamond")
    model(doc, 2)["maxBatchSize"] = 4
    pipe(doc)["maxBatchSize"] = 4
    compiles(doc)


# --------------------------------------------------------------------------- positive edge cases


def test_minus_one_is_a_wildcard_on_either_side() -> None:
    doc = example("diamond")
    model(doc, 1)["inputs"][0]["dims"] = [-1]  # consumer accepts any size
    model(doc, 2)["outputs"][0]["dims"] = [-1]  # producer of any size feeds RIGHT [1]
    compiles(doc)


def test_minus_one_does_not_hide_a_rank_mismatch() -> None:
    doc = example("diamond")
    model(doc, 1)["inputs"][0]["dims"] = [-1, -1]
    (p,) = problems_of(doc)
    assert p.path == "spec.pipelines[0].steps[1].inputs.FEATS_IN_B"
    assert "[-1, -1, -1]" in p.message


def test_optional_input_may_stay_unmapped() -> None:
    doc = example("diamond")
    model(doc, 3)["inputs"][1]["optional"] = True  # join.RIGHT
    del step(doc, 3)["inputs"]["RIGHT"]
    del pipe(doc)["steps"][2]  # `right` would otherwise feed nothing
    compiles(doc)


def test_optional_input_may_still_be_mapped() -> None:
    doc = example("diamond")
    model(doc, 3)["inputs"][1]["optional"] = True
    compiles(doc)


def test_string_and_bytes_are_the_same_triton_type() -> None:
    doc = example("diamond")
    for m in spec(doc)["models"]:
        for t in m["inputs"] + m["outputs"]:
            t["dataType"] = "BYTES"
    pipe(doc)["inputs"][0]["dataType"] = "STRING"
    model(doc, 1)["inputs"][0]["dataType"] = "STRING"
    compiles(doc)


def test_valid_unusual_names_are_accepted() -> None:
    doc = example("diamond")
    pipe(doc)["name"] = "_" + "p" * 63  # 64 characters, leading underscore
    step(doc, 1)["name"] = "left-head"
    step(doc, 3)["inputs"]["LEFT"] = "left-head.OUTPUT_B"
    compiles(doc)


def test_a_dotted_model_runs_in_a_named_step() -> None:
    doc = example("diamond")
    _dotted_model_unnamed_step(doc)
    step(doc, 2)["name"] = "right"
    step(doc, 3)["inputs"]["RIGHT"] = "right.OUTPUT_C"
    artifacts = compile_pipeline(parse_pipeline(doc))
    assert "head.c-1.5/config.pbtxt" in artifacts.files
    assert b'model_name: "head.c-1.5"' in artifacts.files["diamond/config.pbtxt"]


@pytest.mark.parametrize(
    "args",
    [[], ["--strict-model-config=false"], ["--strict-model-config=true", "--strict-model-config", "0"]],
)
def test_a_model_left_to_auto_complete_is_valid_on_its_own(args: list[str]) -> None:
    doc = example("diamond")
    _completed_model_with_args(doc, args)
    artifacts = compile_pipeline(parse_pipeline(doc))
    config = artifacts.files["llm/config.pbtxt"]
    assert b"input" not in config and b"output" not in config
    assert b'backend: "vllm"' in config
    assert b"model_transaction_policy" not in config  # no step runs it: the backend completes it


def test_a_model_its_backend_makes_decoupled_is_run_by_a_step_once_declared_so() -> None:
    """Declared decoupled, a vLLM model may be a step (its config then says so, as for every step's
    model, whose policy is written out: false for the others)."""
    doc = example("fanout")
    model(doc, 2).update(backend="vllm", decoupled=True)
    del pipe(doc)["steps"][1]  # head_b: the pipeline's outputs must all come from head_c's responses
    pipe(doc)["outputs"] = [{"name": "SCORE_C", "from": "head_c.OUTPUT_C"}]
    files = compile_pipeline(parse_pipeline(doc)).files
    assert b"model_transaction_policy {\n  decoupled: true\n}" in files["head_c/config.pbtxt"]
    assert b"model_transaction_policy {\n  decoupled: false\n}" in files["extractor/config.pbtxt"]
    assert b"model_transaction_policy" not in files["head_b/config.pbtxt"]  # no step runs it


# --------------------------------------------------------------------------- everything at once


def test_structural_problems_are_all_reported_at_once() -> None:
    doc = example("fanout")
    doc["kind"] = "Pipeline"
    model(doc, 0)["name"] = "bad name"
    spec(doc)["server"]["replicas"] = "two"
    pipe(doc)["fanOut"] = "broadcast"
    problems = problems_of(doc)
    paths = {p.path for p in problems}
    assert {"kind", "spec.models[0].name", "spec.server.replicas", "spec.pipelines[0].fanOut"} <= paths


def test_a_problem_outside_the_graph_does_not_hide_the_graphs(tmp_path: Path) -> None:
    """A field the compiler does not read (autoscaling, routing) fails the parse: the graph is compiled
    without it, so validate, the webhook and the operator report the graph's problems with it. A field
    it reads (a model's) leaves no graph to compile: nothing is guessed."""
    from tritonpipeline.runtime.compiling import verdict

    doc = example("diamond")
    spec(doc)["autoscaling"] = {"minReplicas": 5, "maxReplicas": 2}
    spec(doc)["routing"] = {"sessionAffinity": "Sometimes"}
    pipe(doc)["steps"][1]["inputs"]["FEATS_IN_B"] = "rigth.OUTPUT_C"
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError) as info:
        compile_file(str(path))
    paths = [p.path for p in info.value.problems]
    assert sorted(paths[:2]) == ["spec.autoscaling.minReplicas", "spec.routing.sessionAffinity"], paths
    assert paths[2:] == ["spec.pipelines[0].steps[1].inputs.FEATS_IN_B"], (
        info.value.problems
    )  # the graph's, after
    assert [p.path for p in verdict(doc).problems] == paths
    model(doc, 0)["maxBatchSize"] = "eight"
    assert "spec.pipelines[0].steps[1].inputs.FEATS_IN_B" not in {p.path for p in verdict(doc).problems}


def test_graph_problems_are_all_reported_at_once() -> None:
    doc = example("diamond")
    step(doc, 1)["inputs"]["FEATS_IN_B"] = "rigth.OUTPUT_C"  # unknown step
    model(doc, 2)["inputs"][0]["dataType"] = "INT8"  # dtype mismatch on right
    pipe(doc)["inputs"].append({"name": "EXTRA", "dataType": "FP32", "dims": [4]})  # unused input
    model(doc, 0)["dynamicBatching"] = {"preferredBatchSizes": [64]}
    with pytest.raises(SpecError) as info:
        compile_pipeline(parse_pipeline(doc))
    got = {p.path for p in info.value.problems}
    assert len(info.value.problems) >= 3
    assert {
        "spec.pipelines[0].steps[1].inputs.FEATS_IN_B",
        "spec.pipelines[0].steps[2].inputs.FEATS_IN_C",
        "spec.pipelines[0].inputs[1]",
        "spec.models[0].dynamicBatching.preferredBatchSizes[0]",
    } <= got
    rendered = str(info.value)
    assert rendered.count("\n") == len(info.value.problems) - 1  # one line per problem


def test_problems_in_several_documents_are_all_reported() -> None:
    text = (EXAMPLES / "diamond.yaml").read_text()
    bad = text.replace("kind: TritonPipeline", "kind: Pipeline")
    problems = problems_of_text(f"{bad}\n---\n{text.replace('apiVersion: serving', 'apiVersion: x-serving')}")
    assert Problem("document 1: kind", "expected 'TritonPipeline', got 'Pipeline'") in problems
    paths = {p.path for p in problems}
    assert "document 2: apiVersion" in paths


OTHER_OBJECTS = """\
apiVersion: v1
kind: Namespace
metadata: {name: ml}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: models, namespace: ml}
spec: {accessModes: [ReadOnlyMany], resources: {requests: {storage: 1Gi}}}
---
"""


def test_other_kubernetes_objects_in_the_file_are_passed_over() -> None:
    """A file kept for `kubectl apply` holds the pipeline's Namespace and claim too: they are not
    TritonPipelines to check, and a problem of the pipeline keeps its document's place."""
    text = (EXAMPLES / "diamond.yaml").read_text()
    (tp,) = parse_text(OTHER_OBJECTS + text)
    assert tp.name == "diamond"
    bad = text.replace("kind: TritonPipeline", "kind: TritonPipeline\nextra: 1")
    assert Problem(
        "document 3: extra", "unknown field (allowed: apiVersion, kind, metadata, spec, status)"
    ) in (problems_of_text(OTHER_OBJECTS + bad))
    (dup,) = problems_of_text(OTHER_OBJECTS + text + "\n---\n" + text)
    assert (dup.path, "also document 3" in dup.message) == ("document 4: metadata.name", True)


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ("apiVersion: serving.tritonpipeline.io/v1alpha1\nkind: Pipeline\n", "document 2: kind"),
        ("apiVersion: v1\nkind: TritonPipeline\n", "document 2: apiVersion"),
        ("kind: Namespace\nmetadata: {name: ml}\n", "document 2: apiVersion"),
    ],
    ids=["our-group-other-kind", "our-kind-other-group", "no-api-version"],
)
def test_a_document_meant_as_a_pipeline_is_checked_not_passed_over(document: str, path: str) -> None:
    text = (EXAMPLES / "diamond.yaml").read_text()
    assert path in {p.path for p in problems_of_text(text + "\n---\n" + document)}


def test_a_documents_place_counts_empty_documents_for_every_kind_of_problem() -> None:
    """helm template writes comment-only documents between the objects: a problem of a key twice and any
    other problem of one document name the same place, the one an editor shows."""
    text = (EXAMPLES / "diamond.yaml").read_text()
    empty = "# Source: chart/templates/namespace.yaml\n---\n"
    bad = text.replace("kind: TritonPipeline", "kind: TritonPipeline\nextra: 1")
    twice = text.replace("kind: TritonPipeline", "kind: TritonPipeline\nkind: TritonPipeline")
    assert {p.path for p in problems_of_text(OTHER_OBJECTS + empty + bad)} == {"document 4: extra"}
    assert {p.path for p in problems_of_text(OTHER_OBJECTS + empty + twice)} == {"document 4: kind"}


def test_a_list_of_pipelines_as_kubectl_get_writes_it_is_read_item_by_item() -> None:
    item = yaml.safe_load((EXAMPLES / "diamond.yaml").read_text())
    item["metadata"].update(
        uid="0d4f", resourceVersion="7", generation=2, creationTimestamp="2026-11-28T10:00:00Z"
    )
    item["status"] = {"observedGeneration": 2}
    other = copy.deepcopy(item)
    other["metadata"]["name"] = "other"
    listed = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": [item, other]}
    assert [tp.name for tp in parse_text(yaml.safe_dump(listed))] == ["diamond", "other"]
    other["spec"]["models"][0]["bogus"] = 1
    other["metadata"]["name"] = "diamond"
    paths = {p.path for p in problems_of_text(yaml.safe_dump(listed))}
    assert paths == {"items[1].spec.models[0].bogus"}, paths


def test_a_file_of_other_objects_only_says_what_it_holds() -> None:
    (p,) = problems_of_text(OTHER_OBJECTS)
    assert p.path == ""
    assert p.message == (
        "no TritonPipeline document found (the file holds Namespace ml, PersistentVolumeClaim models)"
    )


# --------------------------------------------------------------------------- YAML text problems


def _line_of(text: str, needle: str, nth: int = 1) -> int:
    """1-based line of the nth occurrence of needle."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    return hits[nth - 1]


def test_malformed_yaml_reports_line_and_column() -> None:
    text = (EXAMPLES / "diamond.yaml").read_text()
    broken = text.replace("dims: [4]}]", "dims: [4}]", 1)
    (p,) = problems_of_text(broken)
    line = _line_of(broken, "dims: [4}]")
    assert p.path.startswith(f"line {line}, column ")
    assert p.message.startswith("invalid YAML")


def test_duplicate_step_input_key_is_refused_at_its_field_path() -> None:
    # the classic silent overwrite: YAML would keep only the second FEATS_IN_B and drop the first
    text = (EXAMPLES / "diamond.yaml").read_text()
    bad = text.replace(
        "{FEATS_IN_B: extract.FEATS_A}", "{FEATS_IN_B: extract.FEATS_A, FEATS_IN_B: right.OUTPUT_C}"
    )
    assert bad != text
    (p,) = problems_of_text(bad)
    assert p.path == "spec.pipelines[0].steps[1].inputs.FEATS_IN_B"
    assert "duplicate key 'FEATS_IN_B'" in p.message
    assert f"line {_line_of(bad, 'FEATS_IN_B: right.OUTPUT_C')}" in p.message


def test_duplicate_block_keys_at_several_levels_are_all_reported() -> None:
    text = (EXAMPLES / "diamond.yaml").read_text()
    bad = text.replace("  server:\n    gpus: 0", "  server:\n    gpus: 0\n    gpus: 1")
    bad = bad.replace("kind: TritonPipeline\n", "kind: TritonPipeline\nkind: TritonPipeline\n")
    bad = bad.replace("      maxBatchSize: 8\n", "      maxBatchSize: 8\n      maxBatchSize: 4\n", 1)
    problems = problems_of_text(bad)
    assert {p.path for p in problems} == {"kind", "spec.server.gpus", "spec.models[0].maxBatchSize"}
    assert all("duplicate key" in p.message for p in problems)


def test_yaml_merge_key_may_be_overridden() -> None:
    # `<<: *anchor` then an explicit key is an intended override, not a duplicate
    text = (EXAMPLES / "diamond.yaml").read_text()
    text = text.replace(
        "    - name: head_b\n      backend: python\n      maxBatchSize: 8\n",
        "    - &head\n      name: head_b\n      backend: python\n      maxBatchSize: 8\n",
    )
    text = text.replace(
        "    - name: head_c\n      backend: python\n      maxBatchSize: 8\n",
        "    - <<: *head\n      name: head_c\n      maxBatchSize: 4\n",
    )
    assert "<<: *head" in text
    (tp,) = parse_text(text)
    head_c = tp.spec.models[2]
    assert (head_c.name, head_c.backend, head_c.max_batch_size) == ("head_c", "python", 4)
    assert [t.name for t in head_c.inputs] == ["FEATS_IN_C"]


def test_equal_keys_of_different_yaml_types_are_not_duplicates() -> None:
    # 1 (an int) and "1" (a string) are different keys; parameters keep both
    doc_text = (
        (EXAMPLES / "diamond.yaml")
        .read_text()
        .replace(
            "      instances: [{kind: CPU, count: 1}]",
            "      instances: [{kind: CPU, count: 1}]\n      parameters: {'1': a, 'one': b}",
        )
    )
    (tp,) = parse_text(doc_text)
    assert tp.spec.models[0].parameters == {"1": "a", "one": "b"}


@pytest.mark.parametrize(
    ("text", "path", "reason"),
    [
        ("", "", "no TritonPipeline document"),
        ("- just\n- a list\n", "document 1", "got a list"),
        ("kind: [unclosed\n", "line 2, column 1", "invalid YAML"),
        ("a: b: c\n", "line 1, column 5", "invalid YAML"),
    ],
    ids=["empty", "not-a-mapping", "unclosed-flow-sequence", "nested-mapping-on-one-line"],
)
def test_unparseable_documents(text: str, path: str, reason: str) -> None:
    (p,) = problems_of_text(text)
    assert p.path == path
    assert reason in p.message


# --------------------------------------------------------------------------- local model directories


def _write_cr(tmp_path: Path, models_dir: Path) -> Path:
    doc = example("diamond")
    spec(doc)["modelRepository"]["uri"] = str(models_dir)
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _version_one(model_dir: Path, version: str = "1") -> None:
    """A version directory with the model file the diamond example's Python models load."""
    (model_dir / version).mkdir(parents=True)
    (model_dir / version / "model.py").write_text("")


def test_missing_model_directory_is_reported_per_model(tmp_path: Path) -> None:
    models_dir = tmp_path / "models"
    for name in ("extractor", "head_b", "join"):  # head_c (spec.models[2]) is missing
        _version_one(models_dir / name)
    cr = _write_cr(tmp_path, models_dir)
    with pytest.raises(SpecError) as info:
        compile_file(str(cr))
    (p,) = info.value.problems
    assert p.path == "spec.models[2].name"
    assert "'head_c'" in p.message and str(models_dir) in p.message
    assert info.value.source == str(cr)


def test_missing_model_repository_directory(tmp_path: Path) -> None:
    cr = _write_cr(tmp_path, tmp_path / "nowhere")
    with pytest.raises(SpecError) as info:
        compile_file(str(cr))
    (p,) = info.value.problems
    assert p.path == "spec.modelRepository.uri"
    assert "does not exist" in p.message


def test_relative_uri_resolves_against_the_cr_file(tmp_path: Path) -> None:
    models_dir = tmp_path / "sub" / "models"
    for name in ("extractor", "head_b", "head_c", "join"):
        _version_one(models_dir / name)
    doc = example("diamond")
    spec(doc)["modelRepository"]["uri"] = "models"
    (tmp_path / "sub" / "cr.yaml").write_text(yaml.safe_dump(doc))
    (compiled,) = compile_file(str(tmp_path / "sub" / "cr.yaml"))
    assert compiled.model_root == models_dir.resolve()


def test_model_dir_and_graph_problems_come_together(tmp_path: Path) -> None:
    models_dir = tmp_path / "models"
    (models_dir / "extractor").mkdir(parents=True)
    doc = example("diamond")
    spec(doc)["modelRepository"]["uri"] = str(models_dir)
    step(doc, 1)["inputs"]["FEATS_IN_B"] = "rigth.OUTPUT_C"
    cr = tmp_path / "cr.yaml"
    cr.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError) as info:
        compile_file(str(cr))
    paths = [p.path for p in info.value.problems]
    assert "spec.pipelines[0].steps[1].inputs.FEATS_IN_B" in paths
    assert {"spec.models[1].name", "spec.models[2].name", "spec.models[3].name"} <= set(paths)


def test_model_directory_without_a_version_directory_is_reported(tmp_path: Path) -> None:
    """Triton loads <model>/<number>/; a directory without one passes nothing to load."""
    models_dir = tmp_path / "models"
    _version_one(models_dir / "extractor", "7")  # any canonical number is a version
    (models_dir / "head_b").mkdir(parents=True)
    (models_dir / "head_b" / "model.py").write_text("")  # files straight in the model directory
    (models_dir / "head_c" / "01").mkdir(parents=True)  # Triton ignores leading zeros
    (models_dir / "join" / "v1").mkdir(parents=True)
    (models_dir / "join" / "warmup").mkdir()
    with pytest.raises(SpecError) as info:
        compile_file(str(_write_cr(tmp_path, models_dir)))
    problems = {p.path: p.message for p in info.value.problems}
    assert sorted(problems) == ["spec.models[1].name", "spec.models[2].name", "spec.models[3].name"]
    for message in problems.values():
        assert "no version directory" in message and "such as" in message and "/1/" in message
    assert "(found: model.py)" in problems["spec.models[1].name"]
    assert "(found: v1/, warmup/)" in problems["spec.models[3].name"]


def test_validate_reports_a_missing_version_directory_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models_dir = tmp_path / "models"
    for name in ("extractor", "head_b", "head_c"):
        _version_one(models_dir / name)
    (models_dir / "join").mkdir()
    assert main(["validate", str(_write_cr(tmp_path, models_dir))]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "spec.models[3].name: model directory" in line and "no version directory" in line


def test_misspelt_input_reference_is_not_followed_by_unused_input_noise() -> None:
    doc = example("diamond")
    step(doc, 0)["inputs"]["INPUT_A"] = "inputs.IMG"
    problems = problems_of(doc)
    assert [p.path for p in problems] == ["spec.pipelines[0].steps[0].inputs.INPUT_A"]
    assert "unknown pipeline input 'IMG' (inputs: IMAGE)" in problems[0].message


# --------------------------------------------------------------------------- long graphs


def chain_doc(length: int, *, loop_at: int | None = None) -> dict[str, Any]:
    """`length` steps s0 -> s1 -> ... of one FP32 [4] model, declared in reverse order (the last step
    first). loop_at=k: step s{k} reads s{k+2} instead of s{k-1}, closing the loop s{k} -> s{k+1} -> s{k+2}."""
    doc = example("diamond")
    spec(doc)["models"] = [model(doc, 1)]  # head_b: FEATS_IN_B [4] -> OUTPUT_B [4]
    steps = []
    for k in range(length):
        src = "inputs.IMAGE" if k == 0 else f"s{k - 1}.OUTPUT_B"
        if k == loop_at:
            src = f"s{k + 2}.OUTPUT_B"
        steps.append({"name": f"s{k}", "model": "head_b", "inputs": {"FEATS_IN_B": src}})
    pipe(doc)["steps"] = steps[::-1]
    pipe(doc)["outputs"] = [{"name": "RESULT", "from": f"s{length - 1}.OUTPUT_B"}]
    return doc


def test_longest_chain_in_reverse_order_compiles_in_dataflow_order() -> None:
    """The longest pipeline the spec (and the CRD) admits, MAX_STEPS steps declared backwards."""
    length = MAX_STEPS
    artifacts = compile_pipeline(parse_pipeline(chain_doc(length)))
    (ensemble,) = artifacts.plan.ensembles
    assert [s.name for s in ensemble.steps] == [f"s{k}" for k in range(length)]


def test_one_step_more_than_the_longest_chain_is_refused() -> None:
    problems = problems_of(chain_doc(MAX_STEPS + 1))
    assert problems == [Problem("spec.pipelines[0].steps", f"allows at most {MAX_STEPS} item(s)")]


def test_cycle_in_a_long_chain_is_reported_with_its_field_path() -> None:
    length, k = MAX_STEPS, MAX_STEPS // 2
    problems = problems_of(chain_doc(length, loop_at=k))
    (p,) = problems
    members = (f"s{k}", f"s{k + 1}", f"s{k + 2}")
    # declared in reverse: step s{i} sits at steps[length - 1 - i]
    assert p.path in {f"spec.pipelines[0].steps[{length - 1 - int(m[1:])}].inputs" for m in members}
    assert p.message.startswith("cycle in pipeline 'diamond': ")
    cycle = p.message.split(": ", 1)[1].split(" -> ")
    assert cycle[0] == cycle[-1] and sorted(cycle[:-1]) == sorted(members)


# --------------------------------------------------------------------------- generated near misses


@pytest.mark.parametrize("kind", pipeline_gen.NEAR_MISS_KINDS)
@pytest.mark.parametrize("seed", range(12))
def test_generated_near_miss_is_refused_at_its_field_path(kind: str, seed: int) -> None:
    """Random shapes one rule away from loadable (Triton would refuse or mis-serve them): the one problem
    is reported at the field that breaks the rule (see tests/pipeline_gen.py)."""
    miss = pipeline_gen.near_miss(random.Random(f"{kind}-{seed}"), kind, "near")
    doc = pipeline_gen.document("near", "pvc://models/repo", [miss.generated])
    (p,) = problems_of(doc)
    assert p.path == miss.path
    assert miss.reason in p.message


@pytest.mark.parametrize(
    ("model", "files", "missing"),
    [
        ({"backend": "python"}, {"1": ["model.py"], "2": []}, "model.py in {d}/2/"),  # the latest is served
        ({"backend": "python"}, {"1": [], "2": ["model.py"]}, None),
        ({"platform": "onnxruntime_onnx"}, {"1": ["model.py"]}, "model.onnx in {d}/1/"),
        ({"backend": "onnxruntime"}, {"1": ["model.onnx"]}, None),
        ({"backend": "onnxruntime"}, {"1": ["weights.onnx"]}, "model.onnx in {d}/1/"),
        (  # the file the config names instead
            {"backend": "python", "extraConfig": 'default_model_filename: "serve.py"'},
            {"1": ["model.py"]},
            "serve.py in {d}/1/",
        ),
        ({"backend": "tensorflow"}, {"1": []}, None),  # savedmodel or graphdef: not known which
        ({"backend": "my_custom"}, {"1": []}, None),  # a custom backend's file is its own business
    ],
)
def test_each_served_version_holds_the_file_its_backend_loads(
    tmp_path: Path, model: dict[str, Any], files: dict[str, list[str]], missing: str | None
) -> None:
    """Triton cannot load a version without it; the Python backend's stub even hangs the load ('Python
    model file not found'), so serve waited instead of saying why."""
    d = tmp_path / "models" / "m"
    for version, names in files.items():
        (d / version).mkdir(parents=True)
        for name in names:
            (d / version / name).write_text("")
    doc = {
        "apiVersion": "serving.tritonpipeline.io/v1alpha1",
        "kind": "TritonPipeline",
        "metadata": {"name": "t"},
        "spec": {
            "modelRepository": {"uri": str(tmp_path / "models")},
            "models": [{"name": "m", **model, "inputs": [{"name": "I", "dataType": "FP32", "dims": [1]}],
                        "outputs": [{"name": "O", "dataType": "FP32", "dims": [1]}]}],
        },
    }  # fmt: skip
    cr = tmp_path / "cr.yaml"
    cr.write_text(yaml.safe_dump(doc))
    if missing is None:
        compile_file(str(cr))
        return
    with pytest.raises(SpecError) as info:
        compile_file(str(cr))
    ((path, message),) = [(p.path, p.message) for p in info.value.problems]
    assert path == "spec.models[0].name" and f"no {missing.format(d=d)}:" in message, message
