"""`tritonpipeline import`: a Triton model repository's config.pbtxt files -> one TritonPipeline.

The mapper (importer/) without any server or process, then the command as a real process:
hard errors (one line, exit 1, nothing written), --strict, stdout and -o, the repository uri, and a round
trip through the compiler that compares every rendered config with its original. Expected values come
from the hand-written configs below, never from the code under test.
Here the pure tests; those on real components are in tests/component/test_import.py."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.importing import (
    ECHO,
    ECHO_ENSEMBLE,
    cfg,
    ensemble,
    run_import,
    snapshot,
    step,
    tensor,
    write_repo,
)
from tritonpipeline import cli
from tritonpipeline import importer as imp
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.triton_config import parse_text
from tritonpipeline.importer import (
    ERROR,
    NOT_CARRIED,
    WARNING,
    import_repository,
    pipeline_name,
    section_mappers,
)
from tritonpipeline.importer.ensembles import step_names
from tritonpipeline.spec import parse_pipeline


def run(configs: dict[str, str], no_config: dict[str, bool] | None = None, **kw: Any) -> imp.ImportResult:
    return import_repository(
        configs, no_config or {}, name=kw.pop("name", "t"), uri=kw.pop("uri", "models"), **kw
    )


def of(result: imp.ImportResult, kind: str) -> set[tuple[str, str]]:
    return {(f.model, f.field) for f in result.findings if f.kind == kind}


def only_model(result: imp.ImportResult, name: str) -> dict[str, Any]:
    assert result.document is not None, [str(f) for f in result.findings]
    (model,) = [m for m in result.document["spec"]["models"] if m["name"] == name]
    return model


# --------------------------------------------------------------------------- models


CARRIED = cfg(
    """
    name: "carried"
    backend: "python"
    max_batch_size: 8
    input [
      { name: "A" data_type: TYPE_FP32 dims: [ 3, 4, 4 ] format: FORMAT_NCHW },
      { name: "B" data_type: TYPE_STRING dims: [ -1 ] optional: true allow_ragged_batch: true },
      { name: "D" data_type: TYPE_INT32 dims: [ 1 ] reshape: { shape: [ ] } optional: true }
    ]
    output [
      { name: "C" data_type: TYPE_BF16 dims: [ 2, -1 ] reshape { shape: [ 2, -1, 1 ] } label_filename: "l" }
    ]
    instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] }, { kind: KIND_CPU }, { count: 3 } ]
    dynamic_batching {
      preferred_batch_size: [ 2, 8 ] max_queue_delay_microseconds: 500
      priority_levels: 3 default_priority_level: 2
      default_queue_policy { max_queue_size: 16 }
      priority_queue_policy { key: 3 value { timeout_action: DELAY default_timeout_microseconds: 900 } }
      priority_queue_policy { key: 1 value { allow_timeout_override: true } }
    }
    version_policy { specific { versions: [ 2, 5 ] } }
    model_transaction_policy { decoupled: true }
    parameters { key: "path" value { string_value: "${engine_dir}" } }
    parameters { key: "mode" value { string_value: "7" } }
    """
)


CARRIED_ENSEMBLE = ensemble(
    "p",
    8,
    tensor("X", "FP32", "3, 4, 4"),
    tensor("Y", "BF16", "2, -1"),
    step("carried", {"A": "X"}, {"C": "Y"}),
)


def test_every_carried_model_field() -> None:
    result = run({"carried": CARRIED, "p": CARRIED_ENSEMBLE})
    assert of(result, NOT_CARRIED) == set()
    assert of(result, ERROR) == set()
    assert only_model(result, "carried") == {
        "name": "carried",
        "backend": "python",
        "maxBatchSize": 8,
        "inputs": [
            {"name": "A", "dataType": "FP32", "dims": [3, 4, 4], "format": "NCHW"},
            {"name": "B", "dataType": "STRING", "dims": [-1], "optional": True, "allowRaggedBatch": True},
            {"name": "D", "dataType": "INT32", "dims": [1], "optional": True, "reshape": []},
        ],
        "outputs": [
            {
                "name": "C",
                "dataType": "BF16",
                "dims": [2, -1],
                "reshape": [2, -1, 1],
                "labelFilename": "l",
            }
        ],
        # kind absent is KIND_AUTO, count absent is 1 (Triton's defaults, written out)
        "instances": [
            {"kind": "GPU", "count": 2, "gpus": [0]},
            {"kind": "CPU", "count": 1},
            {"kind": "AUTO", "count": 3},
        ],
        "dynamicBatching": {
            "preferredBatchSizes": [2, 8],
            "maxQueueDelayMicroseconds": 500,
            "priorityLevels": 3,
            "defaultPriorityLevel": 2,
            "defaultQueuePolicy": {"maxQueueSize": 16},
            # Triton's map keyed by level, as a list in level order
            "priorityQueuePolicies": [
                {"allowTimeoutOverride": True, "priorityLevel": 1},
                {"timeoutAction": "DELAY", "defaultTimeoutMicroseconds": 900, "priorityLevel": 3},
            ],
        },
        "versionPolicy": {"policy": "specific", "versions": [2, 5]},
        "decoupled": True,
        "parameters": {"mode": "7", "path": "${engine_dir}"},  # string placeholders verbatim
    }


ORDERED = "max_queue_delay_microseconds: 500 preserve_ordering: true"


def test_preserve_ordering_is_carried_where_triton_takes_it() -> None:
    """In request order with one queue, the import carries it; with priority levels, or a queue policy
    that delays, Triton refuses the config: ERRORs at the field."""
    one_level = re.sub(
        r"priority_levels: 3 default_priority_level: 2|priority_queue_policy \{[^\n]*\n", "", CARRIED
    )
    result = run(
        {"carried": one_level.replace("max_queue_delay_microseconds: 500", ORDERED), "p": CARRIED_ENSEMBLE}
    )
    assert of(result, ERROR) == of(result, NOT_CARRIED) == set()
    assert only_model(result, "carried")["dynamicBatching"]["preserveOrdering"] is True
    result = run(
        {"carried": CARRIED.replace("max_queue_delay_microseconds: 500", ORDERED), "p": CARRIED_ENSEMBLE}
    )
    assert of(result, ERROR) == {("carried", "dynamic_batching")}
    messages = " ".join(f.message for f in result.of_kind(ERROR))
    assert "preserveOrdering allows one priority level at most" in messages
    assert "preserveOrdering takes no queue policy with timeoutAction DELAY" in messages  # level 3's


def test_a_tensorrt_groups_optimization_profiles_are_carried_and_rendered() -> None:
    """TensorRT engines built with several optimization profiles (the GKE marketplace's BERT, qa's
    multi_prof_max_bs): each group names the profiles its instances use; carried, and rendered as is."""
    engine = cfg(
        f"""
        platform: "tensorrt_plan"
        max_batch_size: 8
        input [ {tensor("I", "INT32", "128")} ]
        output [ {tensor("O", "FP32", "2")} ]
        instance_group [
          {{ kind: KIND_GPU count: 1 profile: [ "0" ] }}, {{ kind: KIND_GPU profile: [ "1", "2" ] }}
        ]
        """
    )
    result = run({"bert": engine})
    assert of(result, NOT_CARRIED) == of(result, ERROR) == set()
    instances = only_model(result, "bert")["instances"]
    assert [i["profile"] for i in instances] == [["0"], ["1", "2"]]
    rendered = parse_text(compile_pipeline(parse_pipeline(result.document)).files["bert/config.pbtxt"])
    assert [list(g.profile) for g in rendered.instance_group] == [["0"], ["1", "2"]]


ENSEMBLE_FIELDS_TRITON_REFUSES = {  # qa/L0_model_config's ensemble cases, in Triton's words
    "backend": ('backend: "python"', "must have platform type 'ensemble' and empty backend type"),
    "instance_group": ("instance_group [ { kind: KIND_CPU } ]", "instance group should not be specified"),
    "optimization": ("optimization { priority: PRIORITY_MAX }", "optimization should not be specified"),
    "model_warmup": ('model_warmup [ { name: "w" batch_size: 1 } ]', "model_warmup can not be specified"),
}


@pytest.mark.parametrize("field", list(ENSEMBLE_FIELDS_TRITON_REFUSES))
def test_an_ensemble_field_triton_refuses_is_an_error(field: str) -> None:
    """Not a setting left out: the ensemble as it stands does not load (tests/component/test_triton_loads.py
    shows
    the real tritonserver refusing each)."""
    text, words = ENSEMBLE_FIELDS_TRITON_REFUSES[field]
    result = run({"echo": ECHO, "echo_pipe": ECHO_ENSEMBLE + text + "\n"})
    assert result.document is None
    (finding,) = result.findings
    assert (finding.kind, finding.model, finding.field) == (ERROR, "echo_pipe", field)
    assert f"an ensemble takes no {field}: Triton refuses the config" in finding.message
    assert words in finding.message


def test_a_config_without_name_takes_its_directory_name() -> None:
    result = run({"echo": ECHO.replace('name: "echo"\n', ""), "echo_pipe": ECHO_ENSEMBLE})
    assert only_model(result, "echo")["name"] == "echo"
    assert of(result, NOT_CARRIED) == set()


def test_a_name_other_than_the_directory_is_an_error() -> None:
    result = run({"echo": ECHO.replace('name: "echo"', 'name: "other"'), "echo_pipe": ECHO_ENSEMBLE})
    assert result.document is None
    assert of(result, ERROR) == {("echo", "name")}
    (finding,) = result.of_kind(ERROR)
    assert "'other' differs from its directory 'echo'" in finding.message


def test_a_placeholder_where_a_number_is_needed_does_not_parse() -> None:
    text = cfg(
        """
        name: "tensorrt_llm"
        backend: "tensorrtllm"
        max_batch_size: ${triton_max_batch_size}
        parameters { key: "gpt_model_path" value: { string_value: "${engine_dir}" } }
        instance_group [ { count: ${instance_count} } ]
        """
    )
    result = run({"tensorrt_llm": text, "echo": ECHO, "echo_pipe": ECHO_ENSEMBLE})
    assert result.document is None
    (finding,) = result.of_kind(ERROR)
    assert (finding.model, finding.position) == ("tensorrt_llm", (3, 17))
    assert "fill the template first, e.g. with tools/fill_template.py" in finding.message
    assert finding.message.endswith("(placeholders stand for values on lines 5 too)")  # not line 4's string


def test_a_boolean_placeholder_does_not_parse_either() -> None:
    text = 'backend: "tensorrtllm"\nmodel_transaction_policy {\n  decoupled: ${decoupled_mode}\n}\n'
    result = run({"tensorrt_llm": text})
    (finding,) = result.of_kind(ERROR)
    assert finding.position == (3, 14)
    assert "tools/fill_template.py" in finding.message


def test_an_unknown_field_names_the_schema() -> None:
    result = run({"echo": ECHO + "max_batch_sise: 4\n", "echo_pipe": ECHO_ENSEMBLE})
    (finding,) = result.of_kind(ERROR)
    assert finding.position == (6, 1)
    assert 'no field named "max_batch_sise"' in finding.message


UNCARRIED = cfg(
    """
    name: "m"
    backend: "python"
    runtime: "model.py"
    max_batch_size: 4
    input [
      { name: "A" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] is_non_linear_format_io: true },
      { name: "B" data_type: TYPE_INT32 dims: [ 1 ] }
    ]
    output [ { name: "C" data_type: TYPE_FP32 dims: [ 2 ] is_non_linear_format_io: true } ]
    batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_FP32 source_input: "A" } ]
    instance_group [ { name: "mine" kind: KIND_CPU host_policy: "numa0" } ]
    dynamic_batching { }
    model_operations { op_library_filename: [ "libops.so" ] }
    model_warmup [ { name: "w1" batch_size: 1 }, { name: "w2" batch_size: 2 } ]
    cc_model_filenames { key: "8.6" value: "model.plan" }
    response_cache { enable: true }
    default_model_filename: "model.savedmodel"
    """
)


def test_fields_the_spec_does_not_name_are_carried_whole_and_the_rest_is_reported() -> None:
    result = run(
        {
            "m": UNCARRIED,
            "p": ensemble(
                "p",
                4,
                tensor("X", "FP32", "3, 8, 8") + ", " + tensor("Z", "INT32", "1"),
                tensor("Y", "FP32", "2"),
                step("m", {"A": "X", "B": "Z"}, {"C": "Y"}),
            ),
        }
    )
    # below a field the spec renders, what it has no field for is reported
    assert of(result, NOT_CARRIED) == {
        ("m", "input[0].is_non_linear_format_io"),
        ("m", "output[0].is_non_linear_format_io"),
    }
    lines = {str(f) for f in result.of_kind(NOT_CARRIED)}
    assert "m: input[0].is_non_linear_format_io: not in the TritonPipeline spec (set to true)" in lines
    # every other field goes to extraConfig as the config has it
    expected = """
        runtime: "model.py"
        batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_FP32 source_input: "A" } ]
        model_operations { op_library_filename: [ "libops.so" ] }
        model_warmup [ { name: "w1" batch_size: 1 }, { name: "w2" batch_size: 2 } ]
        cc_model_filenames { key: "8.6" value: "model.plan" }
        response_cache { enable: true }
        default_model_filename: "model.savedmodel"
    """
    assert parse_text(only_model(result, "m")["extraConfig"]) == parse_text(expected)
    # what the spec does carry of the same config is still written
    assert only_model(result, "m")["instances"] == [
        {"name": "mine", "kind": "CPU", "count": 1, "hostPolicy": "numa0"}
    ]
    assert only_model(result, "m")["dynamicBatching"] == {}


def test_extra_config_is_rendered_into_the_models_config() -> None:
    result = run({"m": UNCARRIED})
    rendered = parse_text(compile_pipeline(parse_pipeline(result.document)).files["m/config.pbtxt"])
    assert rendered.default_model_filename == "model.savedmodel"
    assert [w.name for w in rendered.model_warmup] == ["w1", "w2"]
    assert rendered.response_cache.enable and rendered.runtime == "model.py"
    assert rendered.batch_input[0].target_name == ["N"]


def test_values_equal_to_tritons_defaults_are_not_reported() -> None:
    text = ECHO + cfg(
        """
        instance_group [ { name: "echo_0" kind: KIND_CPU }, { name: "echo_1" kind: KIND_CPU } ]
        version_policy { latest { num_versions: 1 } }
        optimization { input_pinned_memory { enable: true } output_pinned_memory { enable: true } }
        model_transaction_policy { decoupled: false }
        sequence_batching { }
        """
    )
    result = run({"echo": text, "echo_pipe": ECHO_ENSEMBLE})
    assert of(result, NOT_CARRIED) == set()
    assert only_model(result, "echo")["sequenceBatching"] == {}  # direct, 1 s idle: the spec's defaults


def test_a_value_beside_a_default_one_is_carried_with_it() -> None:
    optimization = "optimization { input_pinned_memory { enable: true } cuda { graphs: true } }\n"
    result = run({"echo": ECHO + optimization, "echo_pipe": ECHO_ENSEMBLE})
    assert of(result, NOT_CARRIED) == set()
    assert parse_text(only_model(result, "echo")["extraConfig"]) == parse_text(optimization)


SEQUENCE = cfg(
    """
    name: "seq"
    backend: "python"
    max_batch_size: 4
    input [ { name: "AUDIO" data_type: TYPE_FP32 dims: [ -1 ] } ]
    output [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
    sequence_batching {
      max_sequence_idle_microseconds: 5000000
      oldest { max_candidate_sequences: 8 preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 1000 }
      control_input [
        { name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
        { name: "E" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
        { name: "R" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } ] },
        { name: "ID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
      ]
      state [
        { input_name: "IN_S" output_name: "OUT_S" data_type: TYPE_FP32 dims: [ 16 ] },
        { input_name: "IN_T" output_name: "OUT_T" data_type: TYPE_INT32 dims: [ 1 ]
          initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zeros" } }
      ]
    }
    """
)


SEQUENCE_ENSEMBLE = ensemble(
    "asr",
    4,
    tensor("A", "FP32", "-1"),
    tensor("T", "STRING", "1"),
    step("seq", {"AUDIO": "A"}, {"TEXT": "T"}),
)


def test_sequence_batching() -> None:
    result = run({"seq": SEQUENCE, "asr": SEQUENCE_ENSEMBLE})
    assert only_model(result, "seq")["sequenceBatching"] == {
        "strategy": "oldest",
        "maxSequenceIdleMicroseconds": 5_000_000,
        "controls": {"start": "S", "end": "E", "correlationId": "ID"},
        "states": [
            {"inputName": "IN_S", "outputName": "OUT_S", "dataType": "FP32", "dims": [16]},
            {
                "inputName": "IN_T",
                "outputName": "OUT_T",
                "dataType": "INT32",
                "dims": [1],
                "initialState": {"name": "zeros", "dataType": "INT32", "dims": [1], "zeroData": True},
            },
        ],
        "maxCandidateSequences": 8,
        "preferredBatchSizes": [2, 4],
        "maxQueueDelayMicroseconds": 1000,
    }
    assert of(result, NOT_CARRIED) == {
        ("seq", "sequence_batching.control_input[2]"),  # READY as FP32 beside START and END as INT32
    }


@pytest.mark.parametrize(
    ("control", "key", "dtype"),
    [
        ("kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64", "correlationId", "UINT64"),
        ("kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT64", "correlationId", "INT64"),
        ("kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32", None, ""),
        ("kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ]", "start", "INT32"),
        ("kind: CONTROL_SEQUENCE_START int32_false_true: [ 1, 0 ]", None, ""),
        ("kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ]", "end", "FP32"),
        ("kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ]", "ready", "BOOL"),
    ],
)
def test_which_controls_are_carried(control: str, key: str | None, dtype: str) -> None:
    text = (
        ECHO
        + "sequence_batching { direct { } control_input [ "
        + f'{{ name: "C" control [ {{ {control} }} ] }} ] }}\n'
    )
    result = run({"echo": text, "echo_pipe": ECHO_ENSEMBLE})
    controls = only_model(result, "echo")["sequenceBatching"].get("controls", {})
    if key is None:  # values or a type the spec has no field for
        assert controls == {}
        assert of(result, NOT_CARRIED) == {("echo", "sequence_batching.control_input[0]")}
        return
    type_field = "correlationIdDataType" if key == "correlationId" else "flagDataType"
    default = "UINT64" if key == "correlationId" else "INT32"
    assert controls == {key: "C", **({type_field: dtype} if dtype != default else {})}
    assert of(result, NOT_CARRIED) == set()


@pytest.mark.parametrize(
    ("controls", "words"),
    [
        ("{ kind: CONTROL_SEQUENCE_READY }", "must specify either 'int32_false_true', 'fp32_false_true' or"),
        (
            "{ kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] int32_false_true: [ 0, 1 ] }",
            "specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true'",
        ),
        ("{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1, 1 ] }", "must have exactly 2 entries"),
        (
            "{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 int32_false_true: [ 0, 1 ] }",
            "must not specify",
        ),
        (
            "{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }, "
            "{ kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] }",
            "sequence batching specifies multiple CONTROL_SEQUENCE_END tensors",
        ),
    ],
)
def test_controls_triton_refuses_are_errors(controls: str, words: str) -> None:
    """What Triton refuses of a control (qa/L0_model_config's control cases) is an ERROR in its words, not
    a setting left out: the config as it stands does not load."""
    text = ECHO + f'sequence_batching {{ control_input [ {{ name: "C" control [ {controls} ] }} ] }}\n'
    result = run({"echo": text, "echo_pipe": ECHO_ENSEMBLE})
    assert result.document is None
    (finding,) = result.of_kind(ERROR)
    assert finding.field.startswith("sequence_batching.control_input[0]")
    assert "Triton refuses the config ('sequence batching " in finding.message and words in finding.message


def test_start_end_and_ready_share_one_data_type() -> None:
    controls = [
        '{ name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }',
        '{ name: "E" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] }',
    ]
    text = ECHO + f"sequence_batching {{ control_input [ {', '.join(controls)} ] }}\n"
    result = run({"echo": text, "echo_pipe": ECHO_ENSEMBLE})
    assert only_model(result, "echo")["sequenceBatching"]["controls"] == {"start": "S"}
    assert of(result, NOT_CARRIED) == {("echo", "sequence_batching.control_input[1]")}


def test_shape_tensors() -> None:
    text = cfg(
        """
        name: "engine"
        platform: "tensorrt_plan"
        max_batch_size: 4
        input [ { name: "SHAPE" data_type: TYPE_INT32 dims: [ 2 ] is_shape_tensor: true } ]
        output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] is_shape_tensor: true } ]
        """
    )
    pipe = ensemble(
        "p",
        4,
        tensor("X", "INT32", "2"),
        tensor("Y", "INT32", "2"),
        step("engine", {"SHAPE": "X"}, {"OUT": "Y"}),
    )
    result = run({"engine": text, "p": pipe})
    model = only_model(result, "engine")
    assert model["inputs"][0]["isShapeTensor"] is True
    assert model["outputs"][0]["isShapeTensor"] is True
    assert of(result, NOT_CARRIED) == set()


def test_the_strategies_fields_are_carried_and_rendered() -> None:
    """direct's queue delay and minimum slot utilization, oldest's preserve_ordering (streaming ASR
    deployments set them): carried, and rendered back as the config has them (0.1 stays 0.1, though
    protobuf keeps it in 32 bits)."""
    direct = "direct { max_queue_delay_microseconds: 100 minimum_slot_utilization: 0.1 }"
    oldest = "oldest { max_candidate_sequences: 4 preserve_ordering: true }"
    for strategy, expected in (
        (direct, {"maxQueueDelayMicroseconds": 100, "minimumSlotUtilization": 0.1}),
        (oldest, {"strategy": "oldest", "maxCandidateSequences": 4, "preserveOrdering": True}),
    ):
        text = ECHO + f"sequence_batching {{ {strategy} }}\n"
        result = run({"echo": text, "echo_pipe": ECHO_ENSEMBLE})
        assert only_model(result, "echo")["sequenceBatching"] == expected
        assert of(result, NOT_CARRIED) == set()
        rendered = parse_text(compile_pipeline(parse_pipeline(result.document)).files["echo/config.pbtxt"])
        which = rendered.sequence_batching.WhichOneof("strategy_choice")
        given = parse_text(text).sequence_batching
        assert which == given.WhichOneof("strategy_choice")
        assert getattr(rendered.sequence_batching, which) == getattr(given, which)


def test_tritons_idle_default_is_written_when_the_spec_default_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A config without max_sequence_idle_microseconds idles out after Triton's 1 s: with a spec whose
    default were different, the import must write 1000000."""
    from pydantic import Field

    from tritonpipeline.spec import SequenceBatching

    class LongerDefault(SequenceBatching):
        max_sequence_idle_microseconds: int = Field(default=5_000_000)

    text = ECHO + "sequence_batching { }\n"
    assert only_model(run({"echo": text, "echo_pipe": ECHO_ENSEMBLE}), "echo")["sequenceBatching"] == {}
    monkeypatch.setattr(section_mappers, "SequenceBatching", LongerDefault)
    written = only_model(run({"echo": text, "echo_pipe": ECHO_ENSEMBLE}), "echo")["sequenceBatching"]
    assert written == {"maxSequenceIdleMicroseconds": 1_000_000}


@pytest.mark.parametrize(
    ("lines", "expected", "reported"),
    [
        ('platform: "onnxruntime_onnx"\nbackend: "onnxruntime"', {"platform": "onnxruntime_onnx"}, set()),
        ('platform: "tensorrt_plan"', {"platform": "tensorrt_plan"}, set()),
        ('backend: "tensorrtllm"', {"backend": "tensorrtllm"}, set()),
        (
            'platform: "pytorch_libtorch"\nbackend: "python"',
            {"platform": "pytorch_libtorch"},
            {("m", "backend")},
        ),
    ],
)
def test_backend_and_platform(lines: str, expected: dict[str, str], reported: set[tuple[str, str]]) -> None:
    text = ECHO.replace('name: "echo"\nbackend: "python"', f'name: "m"\n{lines}')
    result = run({"m": text, "echo_pipe": ECHO_ENSEMBLE.replace('"echo"', '"m"')})
    model = only_model(result, "m")
    assert {k: model[k] for k in ("backend", "platform") if k in model} == expected
    assert of(result, NOT_CARRIED) == reported


def test_a_config_without_backend_or_platform_is_an_error() -> None:
    result = run({"echo": ECHO.replace('backend: "python"\n', ""), "echo_pipe": ECHO_ENSEMBLE})
    assert of(result, ERROR) == {("echo", "backend")}
    (finding,) = [f for f in result.findings if f.kind == ERROR]
    assert "no version directory" in finding.message


# Triton's pick of a backend by the model file (core's AutoCompleteBackendFields), read off its source:
# (the first subdirectory's entries as name -> is a directory, default_model_filename, what is written)
MODEL_FILE_CASES = [
    ({"model.py": False}, "", {"backend": "python"}),
    ({"model.onnx": True}, "", {"platform": "onnxruntime_onnx"}),  # a large ONNX model is a directory
    ({"model.onnx": False, "model.py": False}, "", {"platform": "onnxruntime_onnx"}),  # ONNX is checked first
    ({"model.plan": False}, "", {"platform": "tensorrt_plan"}),
    ({"model.plan": True}, "", None),  # a plan must be a file
    ({"model.pt": False}, "", {"platform": "pytorch_libtorch"}),
    ({"model.savedmodel": True}, "", {"platform": "tensorflow_savedmodel"}),
    ({"model.savedmodel": False}, "", None),  # a SavedModel must be a directory
    ({"model.savedmodel": True, "model.graphdef": False}, "", {"platform": "tensorflow_graphdef"}),
    ({"model.xml": False, "model.bin": False}, "", {"backend": "openvino"}),
    ({"weights.bin": False}, "", None),
    ({}, "model.py", {"backend": "python"}),  # default_model_filename decides, whatever is there
    ({"model.py": False}, "model.plan", {"platform": "tensorrt_plan"}),
    ({"model.py": False}, "custom.bin", None),
]


@pytest.mark.parametrize(("entries", "default_file", "written"), MODEL_FILE_CASES)
def test_without_backend_triton_picks_one_by_the_model_file(
    entries: dict[str, bool], default_file: str, written: dict[str, str] | None
) -> None:
    text = ECHO.replace('backend: "python"\n', "")
    if default_file:
        text += f'default_model_filename: "{default_file}"\n'
    result = run({"echo": text, "echo_pipe": ECHO_ENSEMBLE}, version_files={"echo": ("1", entries)})
    if written is None:
        assert of(result, ERROR) == {("echo", "backend")}
        (finding,) = [f for f in result.findings if f.kind == ERROR]
        if default_file:
            assert f"default_model_filename {default_file!r} is none of the model files" in finding.message
        else:
            assert "first subdirectory, '1', holds none of the model files" in finding.message
        assert "model.py" in finding.message
        return
    model = only_model(result, "echo")
    assert {k: model[k] for k in ("backend", "platform") if k in model} == written
    assert ("echo", "backend") not in of(result, NOT_CARRIED) | of(result, ERROR)


@pytest.mark.parametrize(
    ("directory", "written"),
    [
        ("model.dali", {"backend": "dali"}),
        ("model_gpu.dali", {"backend": "dali"}),
        ("model.identity", {"backend": "identity"}),
        ("pre", None),
    ],
)
def test_without_a_model_file_the_name_model_dot_backend_picks_it(
    directory: str, written: dict[str, str] | None
) -> None:
    """Triton's last resort (AutoCompleteBackendFields): `model.<backend>` runs on <backend>, with
    default_model_filename model.<backend>: DALI's own default, not every backend's."""
    text = f'name: "{directory}"\nmax_batch_size: 8\n'
    file = f"model.{directory.partition('.')[2]}"
    result = run({directory: text}, version_files={directory: ("1", {file: False})})
    if written is None:
        assert of(result, ERROR) == {(directory, "backend")}
        return
    model = only_model(result, directory)
    assert {k: model[k] for k in ("backend", "platform") if k in model} == written
    # DALI looks for model.dali itself; another backend is told the file Triton would name
    expected = None if written["backend"] == "dali" else f'default_model_filename: "{file}"\n'
    assert model.get("extraConfig") == expected
    assert not of(result, NOT_CARRIED) | of(result, ERROR)


def test_a_tensor_left_for_the_backend_to_complete_is_an_error_that_says_so() -> None:
    """DALI's partial auto-configuration: tensors named, their data type or dims left to the backend."""
    text = cfg(
        """
        name: "model.dali"
        backend: "dali"
        max_batch_size: 8
        input [ { name: "DALI_INPUT_0" data_type: TYPE_UINT8 } ]
        output [
          { name: "DALI_OUTPUT_0" dims: [ 3 ] },
          { name: "DALI_OUTPUT_1" data_type: TYPE_FP32 dims: [ 1 ] }
        ]
        """
    )
    result = run({"model.dali": text})
    assert result.document is None
    errors = {f.field: f.message for f in result.findings if f.kind == ERROR}
    assert set(errors) == {"input[0]", "output[0]"}  # the whole output[1] is fine
    assert errors["input[0]"].startswith("'DALI_INPUT_0' without dims: left for the backend to complete")
    assert errors["output[0]"].startswith("'DALI_OUTPUT_0' without data_type:")
    assert "GET /v2/models/model.dali/config" in errors["output[0]"]


def test_a_config_without_inputs_or_outputs_is_carried_for_the_backend_to_complete() -> None:
    vllm = cfg(
        """
        backend: "vllm"
        instance_group [ { count: 1 kind: KIND_MODEL } ]
        """
    )
    result = run({"llama-3.1-8b": vllm})
    assert result.findings == ()
    assert only_model(result, "llama-3.1-8b") == {
        "name": "llama-3.1-8b",
        "backend": "vllm",
        "decoupled": True,  # as the vllm backend completes it (DECOUPLED_BACKENDS)
        "instances": [{"kind": "MODEL", "count": 1}],
    }


def test_an_ensemble_over_a_model_its_backend_makes_decoupled_imports_as_triton_runs_it() -> None:
    """Triton runs the vLLM step decoupled (its backend completes it so): the spec says so, and compiles
    (the step's model is rendered with that policy)."""
    llm = cfg(
        f"""
        backend: "vllm"
        input [ {tensor("text_input", "STRING", "1")} ]
        output [ {tensor("text_output", "STRING", "-1")} ]
        """
    )
    pipe = ensemble(
        "generate",
        0,
        tensor("PROMPT", "STRING", "1"),
        tensor("TEXT", "STRING", "-1"),
        step("llm", {"text_input": "PROMPT"}, {"text_output": "TEXT"}),
    )
    result = run({"llm": llm, "generate": pipe})
    assert result.findings == ()
    assert only_model(result, "llm")["decoupled"] is True
    assert result.document is not None
    files = compile_pipeline(parse_pipeline(result.document)).files
    assert b"decoupled: true" in files["llm/config.pbtxt"]


# the call a Python model's auto_complete_config makes, in each form published model.py files use
SELF_DECOUPLING = {
    "dict literal": 'config.set_model_transaction_policy({"decoupled": True})',
    "dict() call": "config.set_model_transaction_policy(dict(decoupled=True))",  # JetStream's
    "a name bound once": 'policy = {"decoupled": True}\n        config.set_model_transaction_policy(policy)',
    "a keyword": 'config.set_model_transaction_policy(transaction_policy_dict={"decoupled": True})',
}


def python_model(body: str, hook: str = "auto_complete_config") -> str:
    """A model.py whose `hook` (static, taking the config) runs `body` (lines indented by 8)."""
    return textwrap.dedent(
        f"""\
        import os


        class TritonPythonModel:
            @staticmethod
            def {hook}(config):
                {{body}}
                return config
        """
    ).format(body=body)


def completed_notes(result: imp.ImportResult) -> list[str]:
    """What the import says it completed from model.py (its only findings here), the common tail cut."""
    assert {f.kind for f in result.findings} <= {imp.COMPLETED}, [str(f) for f in result.findings]
    tail = ": as model.py's auto_complete_config sets them when Triton loads the model (read, not run)"
    return [f"{f.model}: {f.message.removesuffix(tail)}" for f in result.findings]


def python_cfg(lines: str = "") -> str:
    return cfg(
        f"""
        backend: "python"
        {lines}
        input [ {tensor("INPUT", "FP32", "2")} ]
        output [ {tensor("OUTPUT", "FP32", "2")} ]
        """
    )


@pytest.mark.parametrize("form", list(SELF_DECOUPLING))
def test_a_python_model_that_makes_itself_decoupled_imports_decoupled(form: str) -> None:
    """The config says nothing; Triton loads the model decoupled because its model.py says so: the spec
    says so too, and the step compiles to that policy (before: rendered `decoupled: false`, which Triton
    refuses: 'trying to change decoupled property')."""
    pipe = ensemble("gen_p", 0, tensor("X", "FP32", "2"), tensor("Y", "FP32", "2"),
                    step("gen", {"INPUT": "X"}, {"OUTPUT": "Y"}))  # fmt: skip
    files = {"gen": {"model.py": python_model(SELF_DECOUPLING[form])}}
    result = run({"gen": python_cfg(), "gen_p": pipe}, python_files=files)
    assert completed_notes(result) == ["gen: decoupled: true"]
    assert only_model(result, "gen")["decoupled"] is True
    assert result.document is not None
    files = compile_pipeline(parse_pipeline(result.document)).files
    assert b"decoupled: true" in files["gen/config.pbtxt"]


# a model.py as JetStream's and NVIDIA's tokenizer models write it: literal lists, added in
# a loop guarded by what the config already declares, then batching and the policy
COMPLETING_MODEL = textwrap.dedent(
    """\
    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(auto_complete_model_config):
            inputs = [
                {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
                {"name": "stream", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
            ]
            outputs = [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}]
            config = auto_complete_model_config.as_dict()
            input_names = []
            for input in config["input"]:
                input_names.append(input["name"])
            for input in inputs:
                if input["name"] not in input_names:
                    auto_complete_model_config.add_input(input)
            for output in outputs:
                auto_complete_model_config.add_output(output)
            auto_complete_model_config.set_model_transaction_policy(dict(decoupled=True))
            auto_complete_model_config.set_max_batch_size(0)
            return auto_complete_model_config
    """
)


def test_a_python_model_that_completes_its_config_imports_as_triton_loads_it() -> None:
    """A config that names only the backend, in an ensemble: import carries the tensors, batching and
    policy the model.py sets, so the step maps declared tensors and the result validates (before: a
    warning per tensor, and a document `validate` refused)."""
    llm = cfg('backend: "python"')
    pipe = ensemble("generate", 0, tensor("PROMPT", "STRING", "1"), tensor("TEXT", "STRING", "-1"),
                    step("llm", {"text_input": "PROMPT"}, {"text_output": "TEXT"}))  # fmt: skip
    result = run({"llm": llm, "generate": pipe}, python_files={"llm": {"model.py": COMPLETING_MODEL}})
    assert completed_notes(result) == ["llm: inputs text_input, stream; outputs text_output; decoupled: true"]
    assert only_model(result, "llm") == {
        "name": "llm",
        "backend": "python",
        "decoupled": True,
        "inputs": [
            {"name": "text_input", "dataType": "STRING", "dims": [1]},
            {"name": "stream", "dataType": "BOOL", "dims": [1], "optional": True},
        ],
        "outputs": [{"name": "text_output", "dataType": "STRING", "dims": [-1]}],
    }
    assert result.document is not None
    compile_pipeline(parse_pipeline(result.document))  # validates


@pytest.mark.parametrize(
    ("config_lines", "files", "expected", "warning"),
    [
        # the call in another method, or setting false: Triton's default stands
        ("", {"model.py": python_model(SELF_DECOUPLING["dict literal"], hook="initialize")}, {}, None),
        (
            "",
            {"model.py": python_model('config.set_model_transaction_policy({"decoupled": False})')},
            {},
            None,
        ),
        # the model file the config names, not model.py
        (
            'default_model_filename: "gen.py"',
            {"gen.py": python_model(SELF_DECOUPLING["dict() call"])},
            {"decoupled": True},
            None,
        ),
        (
            'default_model_filename: "gen.py"',
            {"model.py": python_model(SELF_DECOUPLING["dict() call"])},
            {},
            None,
        ),
        # batching as the Python backend sets it: max_batch_size raised, dynamic batching where none is set
        (
            "max_batch_size: 4",
            {"model.py": python_model("config.set_max_batch_size(8)\n        config.set_dynamic_batching()")},
            {"maxBatchSize": 8, "dynamicBatching": {}},
            None,
        ),
        (
            "max_batch_size: 16",
            {"model.py": python_model("config.set_max_batch_size(8)")},
            {"maxBatchSize": 16},
            (
                "max_batch_size",
                "model.py's auto_complete_config (set_max_batch_size) contradicts the config: "
                "configuration specified max_batch_size 16, but in auto-complete-config function for model "
                "'gen' specified max_batch_size 8",
            ),
        ),
        # a tensor the config declares unlike the model: Triton refuses the model
        (
            "",
            {
                "model.py": python_model(
                    'config.add_input({"name": "INPUT", "data_type": "TYPE_INT32", "dims": [2]})'
                )
            },
            {},
            (
                "input",
                "model.py's auto_complete_config (add_input) contradicts the config: unable to load model "
                "'gen', configuration expects datatype TYPE_FP32 for input 'INPUT', model provides "
                "TYPE_INT32",
            ),
        ),
        # a value read from elsewhere, or a call under a condition: said, with the line
        (
            "",
            {
                "model.py": python_model(
                    'config.set_model_transaction_policy({"decoupled": os.environ["D"] == "1"})'
                )
            },
            {},
            ("", "model.py's auto_complete_config calls set_model_transaction_policy (line 7)"),
        ),
        (
            "",
            {
                "model.py": python_model(
                    'if os.environ.get("BATCH"):\n            config.set_max_batch_size(8)'
                )
            },
            {},
            ("", "model.py's auto_complete_config calls set_max_batch_size (line 8)"),
        ),
        # a list changed in place before it is added: not read
        (
            "",
            {
                "model.py": python_model(
                    'inputs = [{"name": "A", "data_type": "TYPE_FP32", "dims": [2]}]\n'
                    '        inputs.append({"name": "B", "data_type": "TYPE_FP32", "dims": [2]})\n'
                    "        for i in inputs:\n"
                    "            config.add_input(i)"
                )
            },
            {},
            ("", "model.py's auto_complete_config calls add_input (line 10)"),
        ),
        # a file that does not parse: Triton's load says why
        ("", {"model.py": "class TritonPythonModel(:\n"}, {}, None),
    ],
    ids=[
        "other-method",
        "false",
        "named-file",
        "not-the-named-file",
        "batching",
        "smaller-batch",
        "other-data-type",
        "computed",
        "conditional",
        "changed-in-place",
        "no-parse",
    ],
)
def test_what_a_python_models_auto_complete_config_sets(config_lines, files, expected, warning) -> None:
    result = run({"gen": python_cfg(config_lines)}, python_files={"gen": files})
    model = only_model(result, "gen")
    assert {k: model[k] for k in ("decoupled", "maxBatchSize", "dynamicBatching") if k in model} == expected
    assert [i["dataType"] for i in model["inputs"]] == ["FP32"]
    warnings = [(f.field, f.message) for f in result.findings if f.kind == WARNING]
    if warning is None:  # (a default_model_filename is reported not carried: the spec has no such field)
        assert warnings == []
    else:
        ((field, message),) = warnings
        assert field == warning[0] and message.startswith(warning[1]), message


def test_a_decoupled_false_its_backend_contradicts() -> None:
    """The config says false, model.py sets true: Triton refuses the model. Run by a step, the render
    writes the policy as the spec declares it, false too, so the imported model is refused as well: a
    warning. On a model no step runs, the render leaves the policy to the backend, which makes it
    decoupled: the false is not carried (counted, and --strict refuses it), and so for a vllm model."""
    config = python_cfg("model_transaction_policy { decoupled: false }")
    files = {"model.py": python_model(SELF_DECOUPLING["a name bound once"])}
    pipe = ensemble("p", 0, tensor("X", "FP32", "2"), tensor("Y", "FP32", "2"),
                    step("gen", {"INPUT": "X"}, {"OUTPUT": "Y"}))  # fmt: skip
    stepped = run({"gen": config, "p": pipe}, python_files={"gen": files})
    alone = run({"gen": config}, python_files={"gen": files})
    vllm = run({"gen": config.replace('"python"', '"vllm"')})
    refused = (
        "trying to change decoupled property in auto-complete-config for model 'gen', which is already "
        "set to 'False'."
    )
    assert [(f.kind, f.field) for f in stepped.findings] == [(WARNING, "model_transaction_policy.decoupled")]
    assert stepped.findings[0].message == (
        f"model.py's auto_complete_config (set_model_transaction_policy) contradicts the config: {refused} "
        "(line 8); Triton refuses to load the model"
    )
    for result, how, why in (
        (alone, "model.py's auto_complete_config, line 8", f": {refused}"),
        (vllm, "backend 'vllm': its auto_complete_config sets model_transaction_policy.decoupled: true", ""),
    ):
        assert [(f.kind, f.field) for f in result.findings] == [
            (NOT_CARRIED, "model_transaction_policy.decoupled")
        ]
        message = result.findings[0].message
        assert message.startswith(
            f"decoupled: false is left to the backend, which makes the model decoupled ({how}"
        )
        assert message.endswith(f"so it loads decoupled, where Triton refuses this config{why}")
        assert "decoupled" not in only_model(result, "gen")


def test_a_tensor_the_config_names_only_is_completed_by_the_model() -> None:
    """A config input with a name alone: the Python backend fills in its data type and dims from
    add_input, so it is no partial tensor for the import either."""
    partial = cfg(
        f"""
        backend: "python"
        input [ {{ name: "INPUT" }} ]
        output [ {tensor("OUTPUT", "FP32", "2")} ]
        """
    )
    body = 'config.add_input({"name": "INPUT", "data_type": "TYPE_FP32", "dims": [2]})'
    result = run({"gen": partial}, python_files={"gen": {"model.py": python_model(body)}})
    assert completed_notes(result) == ["gen: inputs INPUT"]
    assert only_model(result, "gen")["inputs"] == [{"name": "INPUT", "dataType": "FP32", "dims": [2]}]


def test_a_model_on_another_backend_is_not_read() -> None:
    onnx = cfg(
        f"""
        platform: "onnxruntime_onnx"
        input [ {tensor("INPUT", "FP32", "2")} ]
        output [ {tensor("OUTPUT", "FP32", "2")} ]
        """
    )
    files = {"model.py": python_model(SELF_DECOUPLING["dict literal"])}
    assert "decoupled" not in only_model(run({"gen": onnx}, python_files={"gen": files}), "gen")


def test_step_names_hold_no_dot() -> None:
    assert step_names(["llava-1.5", "llava-1.5"]) == ["llava-1_5", "llava-1_5_2"]
    # a model's own name stays its step's: the dotted one gives way
    assert step_names(["a.b", "a_b", "a.b"]) == ["a_b_2", "a_b", "a_b_3"]


def test_gpu_indices_set_the_pods_gpus() -> None:
    text = ECHO + "instance_group [ { kind: KIND_GPU gpus: [ 0, 2 ] } ]\n"
    result = run({"echo": text, "echo_pipe": ECHO_ENSEMBLE})
    assert result.document is not None
    assert result.document["spec"]["server"] == {"gpus": 3}
    assert "server" not in run({"echo": ECHO, "echo_pipe": ECHO_ENSEMBLE}).document["spec"]  # type: ignore[index]


# --------------------------------------------------------------------------- ensembles


def two_tensor_model(
    name: str, ins: list[tuple[str, str, str]], outs: list[tuple[str, str, str]], mbs: int = 4
) -> str:
    return cfg(
        f"""
        name: "{name}"
        backend: "python"
        max_batch_size: {mbs}
        input [ {", ".join(tensor(*t) for t in ins)} ]
        output [ {", ".join(tensor(*t) for t in outs)} ]
        """
    )


SEARCH = {
    "tok": two_tensor_model(
        "tok", [("TEXT", "STRING", "1")], [("IDS", "INT32", "-1"), ("MASK", "INT32", "-1")]
    ),
    "embed": two_tensor_model("embed", [("IDS", "INT32", "-1")], [("EMB", "FP32", "-1, 8")]),
    "score": two_tensor_model(
        "score", [("A", "FP32", "-1, 8"), ("B", "FP32", "-1, 8")], [("S", "FP32", "1")]
    ),
    "search": ensemble(
        "search",
        4,
        tensor("QUERY", "STRING", "1") + ", " + tensor("DOC", "STRING", "1"),
        tensor("SCORE", "FP32", "1"),
        ", ".join(
            [
                step("tok", {"TEXT": "QUERY"}, {"IDS": "q_ids", "MASK": "q_mask"}),  # q_mask: read by nothing
                step("tok", {"TEXT": "DOC"}, {"IDS": "d_ids"}),
                step("embed", {"IDS": "q_ids"}, {"EMB": "q_emb"}),
                step("embed", {"IDS": "d_ids"}, {"EMB": "d_emb"}),
                step("score", {"B": "d_emb", "A": "q_emb"}, {"S": "SCORE"}),
            ]
        ),
    ),
}


def test_an_ensemble_becomes_a_pipeline() -> None:
    result = run(SEARCH)
    assert result.document is not None, [str(f) for f in result.findings]
    assert result.findings == ()
    assert [m["name"] for m in result.document["spec"]["models"]] == ["tok", "embed", "score"]
    assert result.document["spec"]["pipelines"] == [
        {
            "name": "search",
            "inputs": [
                {"name": "QUERY", "dataType": "STRING", "dims": [1]},
                {"name": "DOC", "dataType": "STRING", "dims": [1]},
            ],
            "steps": [
                {"model": "tok", "inputs": {"TEXT": "inputs.QUERY"}},
                {"name": "tok_2", "model": "tok", "inputs": {"TEXT": "inputs.DOC"}},
                {"model": "embed", "inputs": {"IDS": "tok.IDS"}},
                {"name": "embed_2", "model": "embed", "inputs": {"IDS": "tok_2.IDS"}},
                {"model": "score", "inputs": {"A": "embed.EMB", "B": "embed_2.EMB"}},
            ],
            "outputs": [{"name": "SCORE", "from": "score.S"}],
            "maxBatchSize": 4,
        }
    ]


def test_step_inputs_follow_the_models_input_order() -> None:
    result = run(SEARCH)
    assert result.document is not None
    assert list(result.document["spec"]["pipelines"][0]["steps"][4]["inputs"]) == ["A", "B"]


def test_a_second_call_never_takes_an_existing_name() -> None:
    assert step_names(["a", "a_2", "a", "a"]) == ["a", "a_2", "a_3", "a_4"]


def test_models_no_ensemble_uses_are_listed_too() -> None:
    result = run({**SEARCH, "lonely": ECHO.replace('"echo"', '"lonely"')})
    assert result.document is not None
    assert [m["name"] for m in result.document["spec"]["models"]] == ["tok", "embed", "score", "lonely"]


def test_a_duplicated_ensemble_output_is_written_once() -> None:
    text = SEARCH["search"].replace("output [ ", "output [ " + tensor("SCORE", "FP32", "1") + ", ")
    result = run({**SEARCH, "search": text})
    assert result.document is not None
    assert result.document["spec"]["pipelines"][0]["outputs"] == [{"name": "SCORE", "from": "score.S"}]
    assert of(result, NOT_CARRIED) == {("search", "output[1]")}


def test_an_ensemble_output_declared_unlike_its_producer_is_reported() -> None:
    text = SEARCH["search"].replace(tensor("SCORE", "FP32", "1"), tensor("SCORE", "FP32", "-1"))
    result = run({**SEARCH, "search": text})
    assert of(result, NOT_CARRIED) == {("search", "output[0].dims")}
    (finding,) = result.of_kind(NOT_CARRIED)
    assert "score.S: dims [1]" in finding.message


def test_a_step_calling_a_version_is_carried_and_latest_left_out() -> None:
    text = ECHO_ENSEMBLE.replace("model_version: -1", "model_version: 3")
    result = run({"echo": ECHO, "echo_pipe": text})
    assert result.document is not None and result.findings == ()
    (carried,) = result.document["spec"]["pipelines"][0]["steps"]
    assert carried == {"model": "echo", "version": 3, "inputs": {"IN": "inputs.X"}}
    (latest,) = run({"echo": ECHO, "echo_pipe": ECHO_ENSEMBLE}).document["spec"]["pipelines"][0]["steps"]
    assert "version" not in latest


def test_a_step_version_the_model_does_not_serve_is_located_in_the_config() -> None:
    """A version Triton never loads (0) or one a `specific` policy leaves out: the config's field says
    where (Triton refuses both ensembles: 'depends on 'echo' whose required version ... is not loaded')."""
    zero = ECHO_ENSEMBLE.replace("model_version: -1", "model_version: 0")
    result = run({"echo": ECHO, "echo_pipe": zero})
    assert result.document is None
    ((where, message),) = [(f.field, f.message) for f in result.of_kind(ERROR)]
    assert where == "ensemble_scheduling.step[0].model_version" and "must be >= 1, got 0" in message
    specific = ECHO.replace(
        'backend: "python"', 'backend: "python"\nversion_policy { specific { versions: 1 } }'
    )
    result = run(
        {"echo": specific, "echo_pipe": ECHO_ENSEMBLE.replace("model_version: -1", "model_version: 2")}
    )
    ((where, message),) = [(f.field, f.message) for f in result.of_kind(WARNING)]
    assert where == "ensemble_scheduling.step[0].model_version"
    assert "model 'echo' serves versions 1 only" in message


def test_a_call_of_a_nested_ensemble_naming_a_version_is_reported() -> None:
    configs = nested_repository()
    configs["outer"] = configs["outer"].replace(
        'model_name: "mid" model_version: -1', 'model_name: "mid" model_version: 1', 1
    )
    result = run(configs)
    assert result.document is not None
    assert {(f.model, f.field): f.message for f in result.of_kind(NOT_CARRIED)} == {
        ("outer", "ensemble_scheduling.step[0].model_version"): (
            "1: the call of ensemble 'mid' is carried as that ensemble's steps, which call the versions "
            "its own config names"
        )
    }


@pytest.mark.parametrize(
    ("change", "field", "needle"),
    [
        (
            ('model_name: "score"', 'model_name: "scorer"'),
            "ensemble_scheduling.step[4].model_name",
            "model 'scorer' is not in the repository (models: embed, score, tok)",
        ),
        (
            ('key: "A" value: "q_emb"', 'key: "A" value: "q_emb2"'),
            'ensemble_scheduling.step[4].input_map["A"]',
            "ensemble tensor 'q_emb2': no step produces it and no ensemble input provides it",
        ),
        (
            ('value: "SCORE"', 'value: "SCORE2"'),
            "output[0].name",
            "ensemble output 'SCORE': no step writes it",
        ),
        (
            (
                'output_map { key: "IDS" value: "d_ids" }',
                'output_map { key: "IDS" value: "d_ids" } output_map { key: "MASK" value: "q_mask" }',
            ),
            'ensemble_scheduling.step[1].output_map["MASK"]',
            "ensemble tensor 'q_mask' is also written by ensemble_scheduling.step[0]",
        ),
        (
            ('{ key: "MASK" value: "q_mask" }', '{ key: "MASK" value: "DOC" }'),
            'ensemble_scheduling.step[0].output_map["MASK"]',
            "ensemble tensor 'DOC' is an ensemble input: a step cannot write it",
        ),
    ],
    ids=["missing-model", "unproduced-tensor", "unproduced-output", "two-producers", "writes-an-input"],
)
def test_broken_ensembles_are_errors(change: tuple[str, str], field: str, needle: str) -> None:
    old, new = change
    assert SEARCH["search"].count(old) == 1
    result = run({**SEARCH, "search": SEARCH["search"].replace(old, new)})
    assert result.document is None
    errors = result.of_kind(ERROR)
    assert [(f.model, f.field) for f in errors] == [("search", field)]
    assert needle in errors[0].message


def nested_repository() -> dict[str, str]:
    """`outer` calls `mid` twice; `mid` calls ensemble `echo_pipe` and model `echo` again; `mid`'s second
    output comes from a step of its own that `outer`'s first call does not map."""
    mid = ensemble(
        "mid",
        4,
        tensor("A", "FP32", "2"),
        tensor("B", "FP32", "2") + ", " + tensor("C", "FP32", "2"),
        ", ".join(
            [
                step("echo_pipe", {"X": "A"}, {"Y": "t"}),
                step("echo", {"IN": "t"}, {"OUT": "B"}),
                step("echo", {"IN": "A"}, {"OUT": "C"}),
            ]
        ),
    )
    outer = ensemble(
        "outer",
        4,
        tensor("X", "FP32", "2"),
        tensor("Y", "FP32", "2") + ", " + tensor("Z", "FP32", "2"),
        ", ".join(
            [
                step("mid", {"A": "X"}, {"B": "y1"}),  # C left out: its step goes
                step("mid", {"A": "y1"}, {"B": "Y", "C": "Z"}),
            ]
        ),
    )
    return {"echo": ECHO, "echo_pipe": ECHO_ENSEMBLE, "mid": mid, "outer": outer}


def test_a_nested_ensemble_is_inlined_as_triton_runs_it() -> None:
    """A step calling another ensemble becomes that ensemble's steps, each reading what the call maps to
    the ensemble's inputs; steps whose answers the call drops are left out."""
    result = run(nested_repository())
    assert result.findings == ()
    assert result.document is not None
    pipelines = {p["name"]: p for p in result.document["spec"]["pipelines"]}
    assert pipelines["outer"]["steps"] == [
        {"model": "echo", "inputs": {"IN": "inputs.X"}},
        {"name": "echo_2", "model": "echo", "inputs": {"IN": "echo.OUT"}},
        {"name": "echo_3", "model": "echo", "inputs": {"IN": "echo_2.OUT"}},
        {"name": "echo_4", "model": "echo", "inputs": {"IN": "echo_3.OUT"}},
        {"name": "echo_5", "model": "echo", "inputs": {"IN": "echo_2.OUT"}},
    ]
    assert pipelines["outer"]["outputs"] == [
        {"name": "Y", "from": "echo_4.OUT"},
        {"name": "Z", "from": "echo_5.OUT"},
    ]
    assert len(pipelines["mid"]["steps"]) == 3  # imported as it is too
    compile_pipeline(parse_pipeline(result.document))


def test_ensembles_calling_each_other_are_an_error() -> None:
    configs = nested_repository()
    configs["echo_pipe"] = configs["echo_pipe"].replace('model_name: "echo"', 'model_name: "mid"')
    configs["echo_pipe"] = configs["echo_pipe"].replace('"IN"', '"A"').replace('"OUT"', '"B"')
    result = run(configs)
    assert result.document is None
    errors = {(f.model, f.field): f.message for f in result.of_kind(ERROR)}
    assert errors[("mid", "ensemble_scheduling.step[0].model_name")] == (
        "ensemble 'mid' calls itself through mid -> echo_pipe -> mid: Triton refuses such an ensemble"
    )
    assert errors[("outer", "ensemble_scheduling.step[0].model_name")] == (
        "ensemble 'mid' calls itself through mid -> echo_pipe -> mid: Triton refuses such an ensemble"
    )
    assert set(errors) == {  # and nothing else: what the circle's calls write is not reported as missing
        ("mid", "ensemble_scheduling.step[0].model_name"),
        ("echo_pipe", "ensemble_scheduling.step[0].model_name"),
        ("outer", "ensemble_scheduling.step[0].model_name"),
        ("outer", "ensemble_scheduling.step[1].model_name"),
    }


def test_an_ensemble_calling_an_unparsable_config_is_not_reported_twice() -> None:
    result = run(
        {"echo": ECHO.replace("max_batch_size: 4", "max_batch_size: four"), "echo_pipe": ECHO_ENSEMBLE}
    )
    assert of(result, ERROR) == {("echo", "")}


def test_all_errors_are_reported_together() -> None:
    result = run(
        {
            **SEARCH,
            "score": "oops",
            "embed": SEARCH["embed"].replace('"embed"', '"other"'),
            "search": SEARCH["search"].replace('value: "SCORE"', 'value: "SCORE2"'),
        }
    )
    assert of(result, ERROR) == {("score", ""), ("embed", "name"), ("search", "output[0].name")}


def test_spec_problems_name_the_model_and_field() -> None:
    """What Triton takes but the spec refuses: reported at the config's field, nothing written."""
    text = ECHO.replace("max_batch_size: 4", "max_batch_size: 2000000") + "instance_group [ { count: 65 } ]\n"
    result = run({"echo": text, "echo_pipe": ECHO_ENSEMBLE})
    assert result.document is None
    assert {(f.model, f.field, f.message) for f in result.of_kind(ERROR)} == {
        ("echo", "max_batch_size", "must be <= 1048576, got 2000000"),
        ("echo", "instance_group[0].count", "must be <= 64, got 65"),
    }


def test_compiler_problems_are_warnings() -> None:
    """dynamic_batching with max_batch_size 0: Triton loads it, the compiler refuses it."""
    text = ECHO.replace("max_batch_size: 4", "max_batch_size: 0") + "dynamic_batching { }\n"
    pipe = ECHO_ENSEMBLE.replace("max_batch_size: 4", "max_batch_size: 0")
    result = run({"echo": text, "echo_pipe": pipe})
    assert result.document is not None
    assert of(result, WARNING) == {("echo", "dynamic_batching")}


def test_directories_without_a_config() -> None:
    """Triton loads a model directory without config.pbtxt from an empty config it completes, the backend
    picked by the model file (tests/component/test_import_side_by_side.py serves one): carried so. One whose
    files
    give no backend, or with no version directory, Triton cannot load: left out, and said why."""
    files = {"resnet_onnx": ("1", {"model.onnx": False}), "weights": ("1", {"weights.bin": False})}
    no_config = {"resnet_onnx": True, "weights": True, "notes": False}
    result = run({"echo": ECHO, "echo_pipe": ECHO_ENSEMBLE}, no_config, version_files=files)
    assert result.document is not None
    assert of(result, NOT_CARRIED) == {("weights", ""), ("notes", "")}
    messages = {f.model: f.message for f in result.findings}
    assert "'1', holds none of the model files Triton picks a backend by" in messages["weights"]
    assert "no version directory" in messages["notes"]
    assert of(result, imp.COMPLETED) == {("resnet_onnx", "")}
    assert "platform onnxruntime_onnx by 1/model.onnx" in messages["resnet_onnx"]
    (resnet,) = [m for m in result.document["spec"]["models"] if m["name"] == "resnet_onnx"]
    assert resnet == {"name": "resnet_onnx", "platform": "onnxruntime_onnx"}  # the rest Triton completes


def test_no_configs_is_not_a_repository() -> None:
    result = run({}, {"resnet_onnx": True}, source="models/")
    assert result.document is None
    assert [str(f) for f in result.of_kind(ERROR)] == [
        "not a Triton model repository: no <model>/config.pbtxt under models/"
    ]


def test_a_repository_without_ensembles_gives_no_pipelines() -> None:
    result = run({"echo": ECHO})
    assert result.document is not None, [str(f) for f in result.findings]
    assert result.document["spec"]["pipelines"] == []


@pytest.mark.parametrize(
    ("directory", "name"),
    [
        ("model_repository", "model-repository"),
        ("Inflight_Batcher_LLM", "inflight-batcher-llm"),
        ("2024-models", "models"),
        ("__", "imported"),
        ("a" * 80, "a" * 63),
        ("a" * 62 + "_b", "a" * 62),
    ],
)
def test_pipeline_name(directory: str, name: str) -> None:
    assert pipeline_name(directory) == name


def test_the_yaml_parses_to_the_document_with_a_header() -> None:
    text = SEARCH["search"].replace("output [ ", "output [ " + tensor("SCORE", "FP32", "1") + ", ")
    result = run({**SEARCH, "search": text})
    out = imp.document_yaml(result, "repo/")
    assert out.startswith("# Imported by `tritonpipeline import` from repo/: 3 model(s), 1 ensemble(s).\n")
    assert "# 1 setting(s) not carried" in out
    assert yaml.safe_load(out) == result.document
    assert "- {name: QUERY, dataType: STRING, dims: [1]}" in out  # tensors on one line, as in the examples


def test_every_hard_error_at_once(echo_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_repo(echo_repo, {"echo": "max_batch_size: x\n", "other": 'name: "nope"\nbackend: "python"\n'})
    before = snapshot(echo_repo.parent)
    assert cli.main(["import", str(echo_repo), "-o", str(echo_repo.parent / "no" / "p.yaml")]) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines), lines
    assert f"{echo_repo}/echo/config.pbtxt:1:17:" in lines[0]
    assert "other/config.pbtxt: name: 'nope' differs" in lines[1]
    assert "does not exist" in lines[2]
    assert out == ""
    assert snapshot(echo_repo.parent) == before


def test_strict_counts_warnings_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = ECHO.replace("max_batch_size: 4", "max_batch_size: 0") + "dynamic_batching { }\n"
    repo = write_repo(
        tmp_path / "m",
        {"echo": text, "echo_pipe": ECHO_ENSEMBLE.replace("max_batch_size: 4", "max_batch_size: 0")},
    )
    assert cli.main(["import", str(repo), "--strict"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("warning: echo: dynamic_batching: dynamic batching needs maxBatchSize > 0")
    assert cli.main(["import", str(repo)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["spec"]["models"][0]["dynamicBatching"] == {}


def test_a_setting_of_an_ensembles_own_inputs_is_named() -> None:
    """TensorRT-LLM's ensemble sets allow_ragged_batch on its own inputs, which a pipeline's inputs do not
    carry: the import names it, and the header counts it (issue 56: it was dropped without a word)."""
    ragged = tensor("X", "FP32", "2", "allow_ragged_batch: true")
    result = run({"echo": ECHO, "echo_pipe": ECHO_ENSEMBLE.replace(tensor("X", "FP32", "2"), ragged)})
    assert of(result, NOT_CARRIED) == {("echo_pipe", "input[0].allow_ragged_batch")}
    assert "# 1 setting(s) not carried (also printed" in imp.document_yaml(result, "models")


UNREAD_THREE = python_model(  # three calls whose values import cannot read
    'config.set_max_batch_size(int(os.environ["B"]))\n'
    '        config.set_model_transaction_policy({"decoupled": os.environ["D"] == "1"})\n'
    '        if os.environ.get("Q"):\n'
    "            config.set_dynamic_batching()"
)


def test_the_summary_and_the_header_count_every_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model.py setting three things import cannot read: three warnings on stderr, and the summary line
    and the YAML header count and list them (issue 56: both said that nothing was left out)."""
    pipe = ensemble(
        "pipe",
        0,
        tensor("X", "FP32", "2"),
        tensor("Y", "FP32", "2"),
        step("gen", {"INPUT": "X"}, {"OUTPUT": "Y"}),
    )
    repo = write_repo(tmp_path / "m", {"gen": python_cfg(), "pipe": pipe}, {"gen/1/model.py": UNREAD_THREE})
    out = tmp_path / "p.yaml"
    assert cli.main(["import", str(repo), "-o", str(out)]) == 0
    printed, err = capsys.readouterr()
    warned = [line.removeprefix("warning: ") for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 3 and all("import cannot read what it sets" in w for w in warned), err
    assert printed == f"wrote {out}: 1 model(s), 1 pipeline(s), 0 setting(s) not carried, 3 warning(s)\n"
    header = [line for line in out.read_text().splitlines() if line.startswith("#")]
    assert "# 3 warning(s) (also printed on stderr by the import):" in header
    assert [line.removeprefix("#   ") for line in header if line.startswith("#   ")] == [
        " ".join(w.split()) for w in warned
    ]
    assert "# Every setting of the configs is carried." not in header


def test_an_error_of_a_model_without_config_names_its_directory_not_a_missing_file(tmp_path: Path) -> None:
    repo = write_repo(tmp_path / "repo", {}, {"mödel/1/model.py": "", "ok/1/model.py": ""})
    proc = run_import(repo)
    assert proc.returncode == 1
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: {repo / 'mödel'}/: name: invalid model name 'mödel'"), line
    assert not (repo / "mödel" / "config.pbtxt").exists()


def test_a_config_larger_than_a_configmap_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    from tritonpipeline.settings import MAX_CONFIGMAP_BYTES

    comment = "# " + "x" * 98 + "\n"
    text = 'name: "big"\nbackend: "python"\n' + comment * (MAX_CONFIGMAP_BYTES // len(comment) + 1)
    repo = write_repo(tmp_path / "repo", {"big": text}, {"big/1/model.py": ""})
    proc = run_import(repo)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"error: {repo / 'big' / 'config.pbtxt'}: {len(text)} bytes; a model's config is rendered into a "
        f"ConfigMap, which holds at most {MAX_CONFIGMAP_BYTES} bytes"
    )


def test_too_many_tensors_are_named_at_the_config_list_that_holds_them(tmp_path: Path) -> None:
    from tritonpipeline.spec.base import MAX_TENSORS

    inputs = "".join(
        f'input [{{name: "I{i}", data_type: TYPE_FP32, dims: [1]}}]\n' for i in range(MAX_TENSORS + 1)
    )
    text = (
        f'name: "wide"\nbackend: "python"\n{inputs}output [{{name: "O", data_type: TYPE_FP32, dims: [1]}}]\n'
    )
    repo = write_repo(tmp_path / "repo", {"wide": text}, {"wide/1/model.py": ""})
    proc = run_import(repo)
    assert proc.returncode == 1
    assert (
        proc.stderr.strip()
        == f"error: {repo / 'wide' / 'config.pbtxt'}: input: allows at most {MAX_TENSORS} item(s)"
    )


def test_a_config_link_to_nothing_is_read_as_no_config_and_said(tmp_path: Path) -> None:
    repo = write_repo(tmp_path / "repo", {}, {"dang/1/model.py": ""})
    (repo / "dang" / "config.pbtxt").symlink_to(tmp_path / "gone" / "config.pbtxt")
    proc = run_import(repo, "-o", tmp_path / "out.yaml")
    assert proc.returncode == 0, proc.stderr
    link = repo / "dang" / "config.pbtxt"
    assert (
        f"warning: {link} is a link to {tmp_path / 'gone' / 'config.pbtxt'}, which does not exist: "
        "read as no config.pbtxt, as Triton reads it"
    ) in proc.stderr.splitlines()
    assert "backend python by 1/model.py" in proc.stderr
