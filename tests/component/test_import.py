"""`tritonpipeline import`: a Triton model repository's config.pbtxt files -> one TritonPipeline.

The mapper (importer/) without any server or process, then the command as a real process:
hard errors (one line, exit 1, nothing written), --strict, stdout and -o, the repository uri, and a round
trip through the compiler that compares every rendered config with its original. Expected values come
from the hand-written configs below, never from the code under test.
Here the tests on real components; the pure ones are in tests/unit/test_import.py."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import text_format
from google.protobuf.message import Message

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
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.compiler.triton_config import mc, parse_text
from tritonpipeline.local.repository import local_model_root
from tritonpipeline.spec import load_file, parse_pipeline


@pytest.mark.cli
def test_a_config_one_level_down_is_named(tmp_path: Path) -> None:
    """Triton's Data_Pipelines tutorial keeps its ensemble's config in ensemble_model/1/: Triton reads
    only <model>/config.pbtxt."""
    files = {"ensemble_model/1/config.pbtxt": ECHO_ENSEMBLE}
    repo = write_repo(tmp_path / "repo", {"echo": ECHO}, {"echo/1/model.py": "#\n", **files})
    result = run_import(repo, "-o", tmp_path / "out.yaml")
    assert result.returncode == 0, result.stderr
    assert (
        "ensemble_model: no config.pbtxt, but ensemble_model/1/config.pbtxt: Triton reads only "
        "ensemble_model/config.pbtxt and ignores that one; move it up" in result.stderr
    )


def stderr_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return result.stderr.strip().splitlines()


def not_carried_lines(stderr: str) -> list[tuple[str, str, str]]:
    """`MODEL: field: why` lines as (model, field, why)."""
    out = []
    for line in stderr.splitlines():
        if line.startswith(("error:", "warning:", "note:")):
            continue
        model, field, why = line.split(": ", 2)
        out.append((model, field, why))
    return out


SECONDARY = (
    "echo: instance_group[0].secondary_devices[0]: not in the TritonPipeline spec (set to { device_id: 1 })"
)


HARD_ERRORS: dict[str, tuple[dict[str, str], str]] = {
    # id: (configs written into models/ (beside the echo repository), needle of the one error line)
    "placeholder": (
        {
            "tensorrt_llm": 'name: "tensorrt_llm"\nbackend: "tensorrtllm"\n'
            + "max_batch_size: ${triton_max_batch_size}\n"
        },
        "tensorrt_llm/config.pbtxt:3:17: 'max_batch_size: ${triton_max_batch_size}': Couldn't parse integer",
    ),
    "missing-model": (
        {"echo_pipe": ECHO_ENSEMBLE.replace('model_name: "echo"', 'model_name: "gone"')},
        "echo_pipe/config.pbtxt: ensemble_scheduling.step[0].model_name: model 'gone' is not in the "
        "repository (models: echo)",
    ),
    "name-mismatch": (
        {"echo": ECHO.replace('name: "echo"', 'name: "echo2"')},
        "echo/config.pbtxt: name: 'echo2' differs from its directory 'echo'",
    ),
    "unproduced-tensor": (
        {"echo_pipe": ECHO_ENSEMBLE.replace('value: "X"', 'value: "W"')},
        "ensemble tensor 'W': no step produces it and no ensemble input provides it",
    ),
    "spec-refuses": (
        {"echo": ECHO.replace("max_batch_size: 4", "max_batch_size: 2000000")},
        "echo/config.pbtxt: max_batch_size: must be <= 1048576, got 2000000",
    ),
}


@pytest.mark.cli
@pytest.mark.parametrize("case", list(HARD_ERRORS))
def test_hard_errors_print_one_line_and_write_nothing(echo_repo: Path, case: str) -> None:
    configs, needle = HARD_ERRORS[case]
    write_repo(echo_repo, configs)
    before = snapshot(echo_repo.parent)
    result = run_import(echo_repo, "-o", echo_repo.parent / "out.yaml")
    assert result.returncode == 1, result.stderr
    (line,) = stderr_lines(result)
    assert line.startswith("error: ") and "Traceback" not in line
    assert needle in line, line
    assert result.stdout == ""
    assert snapshot(echo_repo.parent) == before


@pytest.mark.cli
@pytest.mark.parametrize(
    ("where", "needle"),
    [
        ("missing", "not a Triton model repository: 'missing' does not exist"),
        ("a-file", "not a Triton model repository: 'a-file' is not a directory"),
        ("empty", "not a Triton model repository: no <model>/config.pbtxt under empty"),
    ],
)
def test_not_a_repository(tmp_path: Path, where: str, needle: str) -> None:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "empty" / ".git").mkdir(parents=True)
    (tmp_path / "empty" / "README.md").write_text("x")
    before = snapshot(tmp_path)
    result = run_import(where, "-o", "out.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert stderr_lines(result) == [f"error: {needle}"]
    assert snapshot(tmp_path) == before


@pytest.mark.cli
def test_output_in_a_missing_directory(echo_repo: Path) -> None:
    before = snapshot(echo_repo.parent)
    result = run_import("models", "-o", "nowhere/p.yaml", cwd=echo_repo.parent)
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "error: cannot write output file 'nowhere/p.yaml': directory 'nowhere' does not exist"
    ]
    assert snapshot(echo_repo.parent) == before


@pytest.mark.cli
@pytest.mark.parametrize("target", ["echo/config.pbtxt", "echo/p.yaml", "echo_pipe/1/p.yaml"])
def test_never_writes_into_a_model_directory(echo_repo: Path, target: str) -> None:
    (echo_repo / "echo_pipe" / "1").mkdir()
    before = snapshot(echo_repo.parent)
    result = run_import(echo_repo, "-o", echo_repo / target)
    assert result.returncode == 1
    (line,) = stderr_lines(result)
    assert "lies inside the model source" in line
    assert snapshot(echo_repo.parent) == before


@pytest.mark.cli
def test_stdout_and_output_file(echo_repo: Path) -> None:
    root = echo_repo.parent
    printed = run_import("models", cwd=root)
    assert printed.returncode == 0, printed.stderr
    assert printed.stderr == SECONDARY + "\n"
    doc = yaml.safe_load(printed.stdout)
    assert doc["metadata"] == {"name": "models"}
    assert doc["spec"]["modelRepository"] == {"uri": "models"}
    assert [m["name"] for m in doc["spec"]["models"]] == ["echo"]
    written = run_import("models", "-o", "p.yaml", "--name", "echo-app", cwd=root)
    assert written.returncode == 0, written.stderr
    assert written.stdout == "wrote p.yaml: 1 model(s), 1 pipeline(s), 1 setting(s) not carried\n"
    assert written.stderr == printed.stderr
    text = (root / "p.yaml").read_text()
    assert text == printed.stdout.replace("name: models", "name: echo-app")
    assert (root / "p.yaml").stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert sorted(p.name for p in root.iterdir()) == ["models", "p.yaml"]  # no temporary file left


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.cli
def test_an_existing_output_is_replaced_only_with_force(echo_repo: Path) -> None:
    """import, hand-edit, import again: the edits were lost without a word (and a link was replaced by a
    file). Now an existing file needs --force, and a link's target is written."""
    out = echo_repo.parent / "p.yaml"
    out.write_text("my edits")
    out.chmod(0o600)
    result = run_import(echo_repo, "-o", out)
    assert result.returncode == 1
    assert f"output file '{out}' exists (perhaps edited since it was written): pass --force" in result.stderr
    assert out.read_text() == "my edits"
    result = run_import(echo_repo, "-o", out, "--force")
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(out.read_text())["kind"] == "TritonPipeline"
    assert out.stat().st_mode & 0o777 == 0o600
    link = echo_repo.parent / "link.yaml"
    link.symlink_to(out.name)
    out.write_text("again")
    assert run_import(echo_repo, "-o", link).returncode == 1 and out.read_text() == "again"
    assert run_import(echo_repo, "-o", link, "--force").returncode == 0
    assert link.is_symlink() and yaml.safe_load(out.read_text())["kind"] == "TritonPipeline"


@pytest.mark.cli
def test_strict(echo_repo: Path) -> None:
    root = echo_repo.parent
    before = snapshot(root)
    result = run_import("models", "--strict", "-o", "p.yaml", cwd=root)
    assert result.returncode == 1
    assert stderr_lines(result) == [
        SECONDARY,
        "error: --strict: 1 setting(s) not carried or not valid as imported (listed above); nothing written",
    ]
    assert snapshot(root) == before
    (echo_repo / "echo" / "config.pbtxt").write_text(ECHO)
    result = run_import("models", "--strict", "-o", "p.yaml", cwd=root)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert (root / "p.yaml").is_file()


@pytest.mark.cli
@pytest.mark.parametrize(
    ("repo", "output", "uri", "note"),
    [
        ("models", "p.yaml", "models", False),  # the output file sits where the path was given
        ("models", "out/p.yaml", "../models", True),
        ("./models/", "out/deeper/p.yaml", "../../models", True),
        ("models", "models/p.yaml", ".", True),  # beside the model directories, in the repository root
        ("ABS", "out/p.yaml", "ABS", False),
        ("models", None, "models", False),  # stdout: the path as given
    ],
)
def test_the_repository_uri_resolves_from_the_output_file(
    echo_repo: Path, repo: str, output: str | None, uri: str, note: bool
) -> None:
    root = echo_repo.parent
    (root / "out" / "deeper").mkdir(parents=True)
    repo = repo.replace("ABS", str(echo_repo))
    uri = uri.replace("ABS", str(echo_repo))
    result = run_import(repo, *(["-o", output] if output else []), cwd=root)
    assert result.returncode == 0, result.stderr
    notes = [line for line in stderr_lines(result) if line.startswith("note:")]
    assert notes == (
        [
            f"note: spec.modelRepository.uri is {uri!r}, the repository {repo!r} relative to the "
            "output file's directory (relative paths in the spec resolve against the file's directory)"
        ]
        if note
        else []
    )
    if output is None:
        assert yaml.safe_load(result.stdout)["spec"]["modelRepository"]["uri"] == uri
        return
    (tp,) = load_file(root / output)
    assert tp.spec.model_repository.uri == uri
    assert local_model_root(tp, root / output) == echo_repo.resolve()


# --------------------------------------------------------------------------- round trip

# a published-style repository: TensorRT-LLM's ensemble of python pre/postprocessing around the
# tensorrtllm backend (string parameters left as template placeholders), a stateful sequence model behind
# an ensemble of its own, an ONNX model without any model file, and a decoupled BLS model no ensemble uses
ROUND_TRIP = {
    "preprocessing": cfg(
        """
        backend: "python"
        max_batch_size: 8
        input [
          { name: "QUERY" data_type: TYPE_STRING dims: [ 1 ] },
          { name: "REQUEST_OUTPUT_LEN" data_type: TYPE_INT32 dims: [ 1 ] }
        ]
        output [
          { name: "INPUT_ID" data_type: TYPE_INT32 dims: [ -1 ] },
          { name: "REQUEST_INPUT_LEN" data_type: TYPE_INT32 dims: [ 1 ] },
          { name: "EMBEDDING_BIAS" data_type: TYPE_FP32 dims: [ -1 ] },
          { name: "OUT_REQUEST_OUTPUT_LEN" data_type: TYPE_INT32 dims: [ 1 ] }
        ]
        parameters { key: "tokenizer_dir" value: { string_value: "${tokenizer_dir}" } }
        parameters { key: "add_special_tokens" value: { string_value: "${add_special_tokens}" } }
        instance_group [ { count: 2 kind: KIND_CPU } ]
        version_policy { latest { num_versions: 1 } }
        """
    ),
    "tensorrt_llm": cfg(
        """
        name: "tensorrt_llm"
        backend: "tensorrtllm"
        max_batch_size: 8
        model_transaction_policy { decoupled: true }
        dynamic_batching {
            preferred_batch_size: [ 8 ]
            max_queue_delay_microseconds: 100
        }
        input [
          { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] allow_ragged_batch: true },
          { name: "input_lengths" data_type: TYPE_INT32 dims: [ 1 ] reshape: { shape: [ ] } },
          { name: "request_output_len" data_type: TYPE_INT32 dims: [ 1 ] reshape: { shape: [ ] } },
          { name: "temperature" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } optional: true }
        ]
        output [
          { name: "output_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] },
          { name: "sequence_length" data_type: TYPE_INT32 dims: [ -1 ] }
        ]
        instance_group [ { count: 1 kind : KIND_GPU gpus: [ 0 ] } ]
        parameters: { key: "gpt_model_path" value: { string_value: "${engine_dir}" } }
        parameters: { key: "max_beam_width" value: { string_value: "${max_beam_width}" } }
        parameters: { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "no" } }
        """
    ),
    "postprocessing": cfg(
        """
        name: "postprocessing"
        backend: "python"
        max_batch_size: 8
        input [
          { name: "TOKENS_BATCH" data_type: TYPE_INT32 dims: [ -1, -1 ] },
          { name: "SEQUENCE_LENGTH" data_type: TYPE_INT32 dims: [ -1 ] }
        ]
        output [ { name: "OUTPUT" data_type: TYPE_STRING dims: [ -1 ] } ]
        parameters { key: "tokenizer_dir" value: { string_value: "${tokenizer_dir}" } }
        instance_group [ { count: 1 kind: KIND_CPU } ]
        """
    ),
    "ensemble": cfg(
        """
        name: "ensemble"
        platform: "ensemble"
        max_batch_size: 8
        input [
          { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
          { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] },
          { name: "temperature" data_type: TYPE_FP32 dims: [ 1 ] optional: true }
        ]
        output [
          { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] },
          { name: "sequence_length" data_type: TYPE_INT32 dims: [ -1 ] },
          { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }
        ]
        ensemble_scheduling {
          step [
            {
              model_name: "preprocessing"
              model_version: -1
              input_map { key: "QUERY" value: "text_input" }
              input_map { key: "REQUEST_OUTPUT_LEN" value: "max_tokens" }
              output_map { key: "INPUT_ID" value: "_INPUT_ID" }
              output_map { key: "REQUEST_INPUT_LEN" value: "_REQUEST_INPUT_LEN" }
              output_map { key: "EMBEDDING_BIAS" value: "_EMBEDDING_BIAS" }
              output_map { key: "OUT_REQUEST_OUTPUT_LEN" value: "_REQUEST_OUTPUT_LEN" }
            },
            {
              model_name: "tensorrt_llm"
              model_version: -1
              input_map { key: "input_ids" value: "_INPUT_ID" }
              input_map { key: "input_lengths" value: "_REQUEST_INPUT_LEN" }
              input_map { key: "request_output_len" value: "_REQUEST_OUTPUT_LEN" }
              input_map { key: "temperature" value: "temperature" }
              output_map { key: "output_ids" value: "_TOKENS_BATCH" }
              output_map { key: "sequence_length" value: "sequence_length" }
            },
            {
              model_name: "postprocessing"
              model_version: -1
              input_map { key: "TOKENS_BATCH" value: "_TOKENS_BATCH" }
              input_map { key: "SEQUENCE_LENGTH" value: "sequence_length" }
              output_map { key: "OUTPUT" value: "text_output" }
            }
          ]
        }
        """
    ),
    "streaming_asr": cfg(
        """
        name: "streaming_asr"
        platform: "onnxruntime_onnx"
        max_batch_size: 4
        input [ { name: "AUDIO" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "TRANSCRIPT" data_type: TYPE_STRING dims: [ 1 ] } ]
        instance_group [ { kind: KIND_GPU count: 1 } ]
        sequence_batching {
          max_sequence_idle_microseconds: 5000000
          oldest {
            max_candidate_sequences: 8
            preferred_batch_size: [ 2, 4 ]
            max_queue_delay_microseconds: 1000
            preserve_ordering: true
          }
          control_input [
            { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
            { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } ] },
            { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
            { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
          ]
          state [
            {
              input_name: "STATE_IN"
              output_name: "STATE_OUT"
              data_type: TYPE_FP32
              dims: [ 16 ]
              initial_state { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true name: "zeros" }
            }
          ]
        }
        """
    ),
    "asr": ensemble(
        "asr",
        4,
        tensor("AUDIO_IN", "FP32", "-1"),
        tensor("TRANSCRIPT", "STRING", "1"),
        step("streaming_asr", {"AUDIO": "AUDIO_IN"}, {"TRANSCRIPT": "TRANSCRIPT"}),
    ),
    "classifier": cfg(
        """
        platform: "onnxruntime_onnx"
        backend: "onnxruntime"
        max_batch_size: 16
        input [ { name: "input.1" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] format: FORMAT_NCHW } ]
        output [ { name: "1519" data_type: TYPE_FP32 dims: [ 1000 ] label_filename: "labels.txt" } ]
        instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]
        dynamic_batching {
          priority_levels: 2 default_priority_level: 2
          priority_queue_policy { key: 1 value { max_queue_size: 4 timeout_action: DELAY } }
        }
        version_policy { all { } }
        optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" } ] } }
        response_cache { enable: true }
        """
    ),
    "bls_stream": cfg(
        """
        name: "bls_stream"
        backend: "python"
        model_transaction_policy { decoupled: true }
        input [ { name: "PROMPT" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "TOKEN" data_type: TYPE_STRING dims: [ 1 ] } ]
        instance_group [ { kind: KIND_CPU } ]
        parameters {
          key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" }
        }
        """
    ),
    # vLLM's own config (its sample repository): the backend completes inputs, outputs and the rest
    "llama-3.1-8b": cfg(
        """
        backend: "vllm"
        instance_group [ { count: 1 kind: KIND_MODEL } ]
        """
    ),
    # no backend: Triton picks python by 1/model.py (the tutorials' LLaVA models are written so)
    "llava-1.5": cfg(
        """
        max_batch_size: 0
        model_transaction_policy { decoupled: True }
        input [ { name: "prompt" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "text" data_type: TYPE_STRING dims: [ 1 ] } ]
        instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]
        """
    ),
}


MODEL_FILES = {"bls_stream/1/model.py": "# BLS\n", "llava-1.5/1/model.py": "# LLaVA\n"}


ENSEMBLES = ("ensemble", "asr")


# read off the configs above: each setting the spec has no field for
ROUND_TRIP_NOT_CARRIED = {
    ("ensemble", "output[2]"),  # text_output listed twice
    ("streaming_asr", "sequence_batching.control_input[1]"),  # READY as FP32, START and END as INT32
}  # classifier's optimization and response_cache: carried in extraConfig


PLATFORM_BACKEND = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
}


def triton_defaults(config: Any, directory: str) -> None:
    """What Triton makes of a config as it loads it (NormalizeModelConfig), for the fields the
    render writes out: the documented normalisations, applied by hand."""
    if not config.name:
        config.name = directory
    if not config.backend and not config.platform:
        config.backend = "python"  # picked by the model file that MODEL_FILES writes for it
    if config.platform and PLATFORM_BACKEND.get(config.platform) == config.backend:
        config.ClearField("backend")
    if config.backend == "vllm" and not config.HasField("model_transaction_policy"):
        config.model_transaction_policy.decoupled = True  # the vllm backend's auto-complete
    for i, group in enumerate(config.instance_group):
        group.count = max(1, group.count)
        if group.name == f"{directory}_{i}":
            group.ClearField("name")
    if config.version_policy == mc.ModelVersionPolicy(latest=mc.ModelVersionPolicy.Latest(num_versions=1)):
        config.ClearField("version_policy")
    if config.HasField("sequence_batching"):
        sb = config.sequence_batching
        sb.max_sequence_idle_microseconds = sb.max_sequence_idle_microseconds or 1_000_000
        if not sb.HasField("oldest"):
            sb.direct.SetInParent()
        elif not sb.oldest.max_candidate_sequences:
            sb.oldest.max_candidate_sequences = max(1, config.max_batch_size)


def clear(message: Message, path: str, *, elements: bool = True) -> None:
    """Clear a reported field (`a.b[2].c`, `a.m["key"]`) where it exists, and the messages it leaves
    empty. `elements`: also delete a reported list element (`a.b[2]`); indices name the original's
    elements, so a rendered config only has its fields cleared."""
    parts = re.findall(r"[^.\[]+|\[[^\]]*\]", path)
    chain: list[tuple[Any, str]] = []  # (container, part) from the top
    target: Any = message
    for part in parts[:-1]:
        chain.append((target, part))
        if part.startswith("["):
            index = int(part[1:-1])
            if index >= len(target):
                return
            target = target[index]
        else:
            target = getattr(target, part)
    last = parts[-1]
    if last.startswith("["):
        if not elements:
            return
        key = json.loads(last[1:-1])
        if (key in target) if isinstance(key, str) else (key < len(target)):
            del target[key]
    else:
        target.ClearField(last)
    for container, part in reversed(chain):  # a singular message left empty goes too
        if part.startswith("[") or container.DESCRIPTOR.fields_by_name[part].is_repeated:
            break
        if getattr(container, part).ByteSize() or not container.HasField(part):
            break
        container.ClearField(part)


def canonical(config: Any) -> None:
    """Order Triton does not care about: control inputs are found by their kind. And a transaction policy
    set or left out loads alike, decoupled false, for a backend that does not complete it (the render writes
    it for a step's model: test_triton_loads shows what that changes for one that does)."""
    config.model_transaction_policy.SetInParent()
    if config.HasField("sequence_batching"):
        sb = config.sequence_batching
        controls = sorted(sb.control_input, key=lambda c: c.name)
        del sb.control_input[:]
        sb.control_input.extend(controls)


def dataflow(config: Any, models: set[str]) -> tuple[dict[str, Any], Counter[Any]]:
    """An ensemble's dataflow with tensor names and routers abstracted away: each output as the tree of
    (model, {input: source}) that computes it, and every step so (routers are steps whose model is not
    in `models`: a router's output is its input)."""
    steps = list(config.ensemble_scheduling.step)
    producer = {tensor: (j, out) for j, s in enumerate(steps) for out, tensor in s.output_map.items()}

    def source(tensor: str) -> Any:
        if tensor not in producer:
            return ("inputs", tensor)
        j, out = producer[tensor]
        if steps[j].model_name not in models:
            (routed,) = steps[j].input_map.values()
            return source(routed)
        return (node(j), out)

    @functools.cache
    def node(j: int) -> Any:
        return (steps[j].model_name, tuple(sorted((k, source(t)) for k, t in steps[j].input_map.items())))

    outputs = {o.name: source(o.name) for o in config.output}
    return outputs, Counter(node(j) for j, s in enumerate(steps) if s.model_name in models)


@pytest.mark.cli
def test_round_trip_through_the_compiler(tmp_path: Path) -> None:
    repo = write_repo(tmp_path / "llm_repo", ROUND_TRIP, MODEL_FILES)
    result = run_import(repo, "-o", tmp_path / "llm.yaml")
    assert result.returncode == 0, result.stderr
    reported = not_carried_lines(result.stderr)
    assert {(model, field) for model, field, _ in reported} == ROUND_TRIP_NOT_CARRIED
    assert not [line for line in stderr_lines(result) if line.startswith(("error:", "warning:"))]
    doc = yaml.safe_load((tmp_path / "llm.yaml").read_text())
    assert doc["metadata"] == {"name": "llm-repo"}
    assert doc["spec"]["server"] == {"gpus": 2}  # classifier's GPU 1
    files = compile_pipeline(parse_pipeline(doc), cpu_only=False).files
    models = {m for m in ROUND_TRIP if m not in ENSEMBLES}
    for name, text in ROUND_TRIP.items():
        original, rendered = parse_text(text), parse_text(files[f"{name}/config.pbtxt"])
        for model, field, _ in sorted(reported, reverse=True):  # later list elements first
            if model == name:
                clear(original, field)
                clear(rendered, field, elements=False)
        if name in ENSEMBLES:
            # dataflow, not the literal ensemble: intermediate tensors are renamed, routers inserted
            assert dataflow(rendered, models) == dataflow(original, models), name
            for c in (original, rendered):
                c.ClearField("ensemble_scheduling")
        else:
            triton_defaults(original, name)
        canonical(original)
        canonical(rendered)
        assert text_format.MessageToString(rendered) == text_format.MessageToString(original), name
        assert rendered == original, name
    # the parameters' template placeholders are kept verbatim
    assert (
        parse_text(files["tensorrt_llm/config.pbtxt"]).parameters["gpt_model_path"].string_value
        == "${engine_dir}"
    )
    # a router was inserted for sequence_length (read by postprocessing and an ensemble output)
    assert any("__router" in path for path in files)
