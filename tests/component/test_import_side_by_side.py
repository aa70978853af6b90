"""`tritonpipeline import` proved side by side on the real tritonserver: each published-style repository of
examples/published/ (written here after Triton's documented configs, numpy stand-in models) is served as
it is, and imported, rendered by the compiler and served again; the same requests must get the same
answers, response for response.

- tensorrtllm: TensorRT-LLM's inflight-batcher ensemble (preprocessing -> decoupled tensorrt_llm ->
  postprocessing; every input optional but text_input and max_tokens; scalars reshaped to []) and its
  `tensorrt_llm_bls` model, which has no ensemble. Requests with only the inputs a client needs, with the
  sampling settings, and streamed (one answer per token).
- asr: wenet's streaming ASR (a feature extractor, then a stateful decoder with FP32 START/READY/END
  controls): sequences interleaved on one gRPC stream, with string and numeric IDs.
- tutorials: configs that leave Triton to complete them. vLLM's sample model (no inputs or outputs: the
  vllm backend declares them, served by the stand-in backend of tests/backends/vllm), the tutorials'
  simple-gpt2 (its model.py's auto_complete_config declares its interface) and llava-1.5 (no backend:
  Triton picks python by 1/model.py; a '.' in its name). Triton's completed configs must be the same too.
- nested: an ensemble calling another ensemble twice (written here), which the import inlines.

Each answer is also checked against the stand-ins' definitions for one request, so that two servers
answering alike cannot both be wrong in the same way unnoticed.
"""

from __future__ import annotations

import queue
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml

from component.test_triton_loads import SELF_DECOUPLING, model_states, serving
from helpers import CLI, EXAMPLES, completed, served_config, tree_with_stand_in_backends
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.local.repository import write_repository
from tritonpipeline.local.tritonserver import LocalTriton
from tritonpipeline.spec import parse_pipeline

pytestmark = pytest.mark.tritonserver

PUBLISHED = EXAMPLES / "published"
Answer = list[dict[str, list[Any]]]  # the responses to one request, each output as a list


def imported(repo: Path, tmp_path: Path) -> Path:
    """`tritonpipeline import` as a user runs it, then the compiled repository beside the model files."""
    out = tmp_path / "imported.yaml"
    result = subprocess.run(
        [str(CLI), "import", str(repo), "-o", str(out)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "0 setting(s) not carried" in result.stdout + result.stderr, result.stderr
    doc = yaml.safe_load(out.read_text())
    artifacts = compile_pipeline(parse_pipeline(doc), cpu_only=True)
    return write_repository(artifacts, tmp_path / "rendered", repo)


def side_by_side(name: str, tmp_path: Path, ask: Any, *args: str) -> tuple[Any, Any]:
    """`ask(server)` on the repository as published and on its import (tritonserver `args` for both);
    both results."""
    repo = tmp_path / name
    shutil.copytree(PUBLISHED / name, repo)  # Triton's Python backend may write beside the models
    with serving(repo, tmp_path / "original.log", *args) as server:
        original = ask(server)
    with serving(imported(repo, tmp_path), tmp_path / "imported.log", *args) as server:
        again = ask(server)
    return original, again


def streamed_both(repo: Path, tmp_path: Path, model: str, x: np.ndarray) -> tuple[list[Answer], list[Answer]]:
    """One request (input X) to `model` of the repository as written, then of its import: both answers."""
    request = [(model, {"X": x}, {})]
    with serving(repo, tmp_path / "original.log") as server:
        original = stream(server, request)
    with serving(imported(repo, tmp_path), tmp_path / "imported.log") as server:
        return original, stream(server, request)


# Triton's Python backend refuses a request with "Stub process ... is not healthy" when its message to the
# model's stub process waited over a second in the stub's queue and the stub had not marked itself healthy
# meanwhile (python_backend's SendMessageToStub and IsStubProcessAlive), and then restarts the stub. A live
# stub that got no CPU for that second (2 cores building images beside the tests, as `make test` does) is
# refused so. The request is sent once more; a stub that cannot come back refuses it again and the test fails.
STUB_BUSY = "is not healthy"


def stream(
    server: LocalTriton, requests: list[tuple[str, dict[str, np.ndarray], dict[str, Any]]]
) -> list[Answer]:
    """Each request on one gRPC stream, one at a time: all of its responses until Triton's final flag."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    got: list[Answer] = []
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for model, tensors, options in requests:
            inputs = []
            for name, array in tensors.items():
                datatype = (
                    "BYTES" if array.dtype == np.object_ else grpcclient.np_to_triton_dtype(array.dtype)
                )
                t = grpcclient.InferInput(name, list(array.shape), datatype)
                t.set_data_from_numpy(array)
                inputs.append(t)
            client.async_stream_infer(model, inputs, enable_empty_final_response=True, **options)
            responses: Answer = []
            again = 1  # a Python model's request refused once with STUB_BUSY is sent again
            while True:
                result, error = answers.get(timeout=60)
                if error is not None and STUB_BUSY in str(error) and again:
                    again, responses = 0, []
                    time.sleep(1)
                    client.async_stream_infer(model, inputs, enable_empty_final_response=True, **options)
                    continue
                assert error is None, f"{model}: {error}"
                response = result.get_response()
                outputs = {o.name: result.as_numpy(o.name).tolist() for o in response.outputs}
                if outputs:
                    responses.append(outputs)
                if response.parameters["triton_final_response"].bool_param:
                    break
            got.append(responses)
    finally:
        client.stop_stream()
        client.close()
    return got


def text(value: str) -> np.ndarray:
    return np.array([[value.encode()]], dtype=np.object_)


def llm_request(model: str, **extra: np.ndarray) -> tuple[str, dict[str, np.ndarray], dict[str, Any]]:
    tensors = {"text_input": text("hi"), "max_tokens": np.array([[3]], dtype=np.int32), **extra}
    return model, tensors, {}


def llm(server: LocalTriton) -> list[Answer]:
    requests = []
    for model in ("ensemble", "tensorrt_llm_bls"):
        requests += [
            llm_request(model),  # only what a client needs: every optional input left out
            llm_request(
                model,
                temperature=np.array([[0.5]], dtype=np.float32),
                end_id=np.array([[219]], dtype=np.int32),
            ),
            llm_request(model, stream=np.array([[True]], dtype=np.bool_)),
        ]
    return stream(server, requests)


def test_tensorrt_llm_ensemble_and_bls_answer_alike(tmp_path: Path) -> None:
    original, again = side_by_side("tensorrtllm", tmp_path, llm)
    assert again == original
    # the stand-ins' arithmetic: "hi" is bytes 104 + 105 = 209; tokens 209 + k * step
    plain, sampled, streamed = original[:3]
    assert plain == [{"text_output": [[b"209 210 211"]]}]
    assert sampled == [{"text_output": [[b"209 214 219"]]}]  # step round(10 * 0.5), stops at end_id 219
    assert streamed == [{"text_output": [[t]]} for t in (b"209", b"210", b"211")]
    assert original[3:] == original[:3]  # the BLS model answers as the ensemble does


def asr(server: LocalTriton) -> list[Answer]:
    """Two streams interleaved per target, string IDs through the ensemble, numbers directly."""
    requests = []
    for model, ids, name in (
        ("asr", ("caller-7/ü", "caller-7/b"), "WAV"),
        ("streaming_asr", (11, 12), "speech"),
    ):
        a, b = ids
        for sequence_id, chunk, start, end in (
            (a, 1.0, True, False),
            (b, 5.0, True, False),
            (a, 2.0, False, False),
        ):
            requests.append(
                (
                    model,
                    {name: np.full((1, 3), chunk, dtype=np.float32)},
                    {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end},
                )
            )
        for sequence_id, chunk in ((b, 6.0), (a, 3.0)):
            requests.append(
                (
                    model,
                    {name: np.full((1, 3), chunk, dtype=np.float32)},
                    {"sequence_id": sequence_id, "sequence_start": False, "sequence_end": True},
                )
            )
    return stream(server, requests)


def test_streaming_asr_answers_alike(tmp_path: Path) -> None:
    original, again = side_by_side("asr", tmp_path, asr)
    assert again == original
    # through the ensemble the features are 2 * wav: chunk sums 6, 30, 12, 36, 18
    transcripts = [answer[0]["TRANSCRIPTS"][0][0].decode() for answer in original[:5]]
    assert transcripts == [
        "caller-7/ü: 6",
        "caller-7/b: 30",
        "caller-7/ü: 6 12",
        "caller-7/b: 30 36",
        "caller-7/ü: 6 12 18",
    ]
    direct = [answer[0]["transcript"][0][0].decode() for answer in original[5:]]
    assert direct == ["11: 3", "12: 15", "11: 3 6", "12: 15 18", "11: 3 6 9"]


def stand_in_backends(tmp_path: Path) -> str:
    """--backend-directory (tritonserver takes the last one given): the wheel's backends with the stand-in
    vllm backend beside them."""
    return f"--backend-directory={tree_with_stand_in_backends(tmp_path / 'tree') / 'backends'}"


def tutorials(server: LocalTriton) -> tuple[list[Answer], dict[str, Any]]:
    requests = [
        ("vllm_model", {"text_input": np.array([b"hi"], dtype=np.object_)}, {}),
        (
            "vllm_model",
            {
                "text_input": np.array([b"hi"], dtype=np.object_),
                "stream": np.array([True]),
                "sampling_parameters": np.array([b'{"max_tokens": 2}'], dtype=np.object_),
            },
            {},
        ),
        ("simple-gpt2", {"text_input": text("hello big world")}, {}),
        (
            "llava-1.5",
            {
                "prompt": np.array([b"what is here"], dtype=np.object_),
                "image": np.array([b"png-1", b"png-2"], dtype=np.object_),
            },
            {},
        ),
    ]
    models = ("vllm_model", "simple-gpt2", "llava-1.5")
    return stream(server, requests), {m: completed(server, m) for m in models}


def test_configs_triton_completes_answer_alike(tmp_path: Path) -> None:
    original, again = side_by_side("tutorials", tmp_path, tutorials, stand_in_backends(tmp_path))
    assert again == original
    answers, configs = original
    # the stand-ins' definitions: the engine model of vllm_model/1/model.json, the prompt's words
    whole, streamed, gpt2, llava = answers
    assert whole == [{"text_output": [b"hi facebook/opt-125m:0 facebook/opt-125m:1 facebook/opt-125m:2"]}]
    assert streamed == [{"text_output": [t]} for t in (b" facebook/opt-125m:0", b" facebook/opt-125m:1")]
    assert gpt2 == [{"text_output": [[t]]} for t in (b"hello#0", b"big#1", b"world#2")]
    assert llava == [
        {
            "text": [b"what is here [2 image(s)]"],
            "finish_reason": [b"length"],
            "prompt_tokens": [3],
            "completion_tokens": [2],
            "total_tokens": [5],
        }
    ]
    # what the backends completed, as Triton reports it for the published configs (and the imported)
    assert configs["vllm_model"]["backend"] == "vllm"
    names = [i["name"] for i in configs["vllm_model"]["input"]]
    assert names == ["text_input", "stream", "sampling_parameters", "exclude_input_in_output"]
    assert configs["vllm_model"]["model_transaction_policy"] == {"decoupled": True}
    assert configs["simple-gpt2"]["max_batch_size"] == 8
    assert configs["simple-gpt2"]["dynamic"]
    assert configs["llava-1.5"]["backend"] == "python"


ECHO_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]) for x in out]
"""
NO_BACKEND = 'max_batch_size: 0\ninput [{ name: "IN" data_type: TYPE_FP32 dims: [1] }]\n' + (
    'output [{ name: "OUT" data_type: TYPE_FP32 dims: [1] }]\n'
)


def test_triton_picks_the_backend_where_import_does(tmp_path: Path) -> None:
    """Configs without a backend, served as they are: Triton looks in the first subdirectory in byte
    order ('10' before '2'), and names `model.<backend>` run on <backend> with default_model_filename
    model.<backend>; `import` reports each the same way (tests/component/test_import.py holds its side)."""
    repo = tmp_path / "repo"
    files = {
        "first/2/model.py": ECHO_PY,  # not looked at: '10' comes first
        "first/10/weights.bin": "0",
        "later/1/model.py": ECHO_PY,
        "model.python/1/model.python": ECHO_PY,  # python, told to read model.python (it refuses)
    }
    for model in ("first", "later", "model.python"):
        (repo / model).mkdir(parents=True)
        (repo / model / "config.pbtxt").write_text(NO_BACKEND)
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    args = ("--exit-on-error=false", "--strict-readiness=false")
    with serving(repo, tmp_path / "triton.log", *args) as server:
        states, log = model_states(server), server.logs()
    assert states["later"][0] == "READY"
    assert "Could not determine backend for model 'first'" in log  # refused as it is read: not indexed
    assert "Model name must end with '.py'" in states["model.python"][1]  # the python backend, model.python
    result = subprocess.run(
        [str(CLI), "import", str(repo), "-o", str(tmp_path / "out.yaml")], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "first/config.pbtxt: backend: neither backend nor platform is set" in result.stderr
    assert "first subdirectory, '10', holds none" in result.stderr
    (repo / "first" / "2" / "model.py").rename(repo / "first" / "10" / "model.py")
    result = subprocess.run(
        [str(CLI), "import", str(repo), "-o", str(tmp_path / "out.yaml")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    models = yaml.safe_load((tmp_path / "out.yaml").read_text())["spec"]["models"]
    backends = {m["name"]: m["backend"] for m in models}
    assert backends == {"first": "python", "later": "python", "model.python": "python"}
    # the file name Triton gives a model named model.<backend>, which the written backend alone would not
    extra = {m["name"]: m.get("extraConfig") for m in models}
    assert extra == {"first": None, "later": None, "model.python": 'default_model_filename: "model.python"\n'}
    with serving(repo, tmp_path / "again.log", *args) as server:
        assert model_states(server)["first"][0] == "READY"  # Triton agrees once model.py is in '10'


OPS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

OPS = {"add1": lambda x: x + 1, "times2": lambda x: x * 2, "neg": lambda x: -x}


class TritonPythonModel:
    def initialize(self, args):
        self.op = OPS[args["model_name"]]

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", self.op(x))]) for x in xs]
"""
TENSOR = "data_type: TYPE_FP32 dims: [2]"


def ensemble_config(inputs: list[str], outputs: list[str], steps: list[tuple[str, dict[str, str]]]) -> str:
    """An ensemble of FP32 [2] tensors; each step (model, {its input or output: ensemble tensor}) maps IN
    and OUT for a model, A, B and C for `inner`."""

    def tensors(names: list[str]) -> str:
        return ", ".join(f'{{ name: "{n}" {TENSOR} }}' for n in names)

    text = [f'platform: "ensemble"\ninput [{tensors(inputs)}]\noutput [{tensors(outputs)}]']
    text.append("ensemble_scheduling { step [")
    calls = []
    for model, maps in steps:
        kinds = {k: "input_map" if k in ("IN", "A") else "output_map" for k in maps}
        body = " ".join(f'{kinds[k]} {{ key: "{k}" value: "{v}" }}' for k, v in maps.items())
        calls.append(f'{{ model_name: "{model}" model_version: -1 {body} }}')
    return "\n".join(text) + ", ".join(calls) + "] }\n"


def test_nested_ensembles_answer_alike(tmp_path: Path) -> None:
    """Triton runs an ensemble that calls another ensemble (twice here, one call leaving an output out);
    the import inlines the called ensemble's steps, and the answers are the same."""
    repo = tmp_path / "nested"
    for model in ("add1", "times2", "neg"):
        (repo / model / "1").mkdir(parents=True)
        (repo / model / "1" / "model.py").write_text(OPS_PY)
        (repo / model / "config.pbtxt").write_text(
            f'backend: "python"\ninput [{{ name: "IN" {TENSOR} }}]\noutput [{{ name: "OUT" {TENSOR} }}]\n'
        )
    inner = [
        ("add1", {"IN": "A", "OUT": "t"}),
        ("times2", {"IN": "t", "OUT": "B"}),
        ("neg", {"IN": "A", "OUT": "C"}),
    ]
    outer = [("inner", {"A": "X", "B": "y1"}), ("inner", {"A": "y1", "B": "Y", "C": "Z"})]
    for name, (inputs, outputs, steps) in {
        "inner": (["A"], ["B", "C"], inner),
        "outer": (["X"], ["Y", "Z"], outer),
    }.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(ensemble_config(inputs, outputs, steps))
    original, again = streamed_both(repo, tmp_path, "outer", np.array([1.0, 2.0], dtype=np.float32))
    assert original == again == [[{"Y": [10.0, 14.0], "Z": [-4.0, -6.0]}]]
    steps = yaml.safe_load((tmp_path / "imported.yaml").read_text())["spec"]["pipelines"][1]["steps"]
    assert [s["model"] for s in steps] == ["add1", "times2", "add1", "times2", "neg"]  # the first neg went


VERSIONED_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.add = 10 * int(args["model_version"])

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x + self.add)]) for x in xs]
"""


def test_steps_calling_a_version_answer_alike(tmp_path: Path) -> None:
    """A model served in two versions (adding 10 and 20), called by one step at version 1 and by
    another at the latest: the import carries the pinned version, and both steps answer as before. Before,
    the import reported the version not carried and its steps called the latest."""
    repo = tmp_path / "versions"
    for version in (1, 2):
        (repo / "add" / str(version)).mkdir(parents=True)
        (repo / "add" / str(version) / "model.py").write_text(VERSIONED_PY)
    (repo / "add" / "config.pbtxt").write_text(
        f'backend: "python"\ninput [{{ name: "IN" {TENSOR} }}]\noutput [{{ name: "OUT" {TENSOR} }}]\n'
        "version_policy { all {} }\n"
    )
    (repo / "both" / "1").mkdir(parents=True)
    (repo / "both" / "config.pbtxt").write_text(
        f'platform: "ensemble"\ninput [{{ name: "X" {TENSOR} }}]\n'
        f'output [{{ name: "OLD" {TENSOR} }}, {{ name: "NEW" {TENSOR} }}]\n'
        'ensemble_scheduling { step [{ model_name: "add" model_version: 1 '
        'input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "OLD" } }, '
        '{ model_name: "add" model_version: -1 '
        'input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "NEW" } }] }\n'
    )
    original, again = streamed_both(repo, tmp_path, "both", np.array([1.0, 2.0], dtype=np.float32))
    assert original == again == [[{"OLD": [11.0, 12.0], "NEW": [21.0, 22.0]}]]
    steps = yaml.safe_load((tmp_path / "imported.yaml").read_text())["spec"]["pipelines"][0]["steps"]
    assert [s.get("version") for s in steps] == [1, None]


@pytest.mark.parametrize("config", ["interface", "backend only", "none"])
def test_a_python_model_that_completes_its_config_answers_alike(tmp_path: Path, config: str) -> None:
    """A Python model whose model.py completes its config in auto_complete_config (decoupled; with
    `backend only`, its tensors too; with `none`, no config.pbtxt at all: Triton picks python by
    1/model.py), its config silent on it, as a step of an ensemble: Triton runs it so, and so does the
    import, which reads (never runs) the literal calls. Before, the render pinned the step's model to
    `decoupled: false` and Triton refused to load it ('trying to change decoupled property'), a config
    without tensors gave a document `validate` refused, and a model without config.pbtxt was left out
    (its ensemble then refused: a step's model not in the repository)."""
    repo = tmp_path / "completing"
    (repo / "gen" / "1").mkdir(parents=True)
    shutil.copy(SELF_DECOUPLING, repo / "gen" / "1" / "model.py")
    interface = f'input [{{ name: "INPUT" {TENSOR} }}]\noutput [{{ name: "OUTPUT" {TENSOR} }}]\n'
    if config != "none":
        (repo / "gen" / "config.pbtxt").write_text(
            'backend: "python"\n' + (interface if config == "interface" else "")
        )
    (repo / "gen_p" / "1").mkdir(parents=True)
    (repo / "gen_p" / "config.pbtxt").write_text(
        f'platform: "ensemble"\ninput [{{ name: "X" {TENSOR} }}]\noutput [{{ name: "Y" {TENSOR} }}]\n'
        'ensemble_scheduling { step [{ model_name: "gen" model_version: -1 '
        'input_map { key: "INPUT" value: "X" } output_map { key: "OUTPUT" value: "Y" } }] }\n'
    )
    request = [("gen_p", {"X": np.array([1.0, 2.0], dtype=np.float32)}, {})]
    with serving(repo, tmp_path / "original.log") as server:
        original = stream(server, request)
        completed_original = completed(server, "gen")
    rendered = imported(repo, tmp_path)
    with serving(rendered, tmp_path / "imported.log") as server:
        again = stream(server, request)
        completed_again = completed(server, "gen")
    assert original == again == [[{"Y": [2.0, 3.0]}]]
    assert completed_again == completed_original
    assert completed_again["model_transaction_policy"] == {"decoupled": True}


def test_fields_the_spec_does_not_name_answer_alike(tmp_path: Path) -> None:
    """A model whose config names its model file (`default_model_filename`, as k2-fsa/sherpa's repositories
    do for every model) and warms it up: the import carries both in extraConfig, so the rendered
    repository loads the same file and warms up alike. Before, the import reported them not carried and
    Triton could not load the model ('model.py' not found)."""
    repo = tmp_path / "named_files"
    (repo / "add1" / "1").mkdir(parents=True)
    (repo / "add1" / "1" / "add_one.py").write_text(OPS_PY)
    warmup = (
        'model_warmup [{ name: "zeros" batch_size: 1 inputs { key: "IN" value { '
        + TENSOR
        + " zero_data: true } } }]"
    )
    (repo / "add1" / "config.pbtxt").write_text(
        f'backend: "python"\ndefault_model_filename: "add_one.py"\n{warmup}\n'
        f'input [{{ name: "IN" {TENSOR} }}]\noutput [{{ name: "OUT" {TENSOR} }}]\n'
    )
    (repo / "add1_p" / "1").mkdir(parents=True)
    (repo / "add1_p" / "config.pbtxt").write_text(
        ensemble_config(["X"], ["Y"], [("add1", {"IN": "X", "OUT": "Y"})])
    )
    request = [("add1_p", {"X": np.array([1.0, 2.0], dtype=np.float32)}, {})]
    with serving(repo, tmp_path / "original.log") as server:
        original, config = stream(server, request), served_config(server, "add1")
    with serving(imported(repo, tmp_path), tmp_path / "imported.log") as server:
        again, config_again = stream(server, request), served_config(server, "add1")
    assert original == again == [[{"Y": [2.0, 3.0]}]]
    assert config["default_model_filename"] == config_again["default_model_filename"] == "add_one.py"
    assert config["model_warmup"] == config_again["model_warmup"]
    assert config_again["model_warmup"][0]["name"] == "zeros"


def test_instance_group_settings_answer_alike(tmp_path: Path) -> None:
    """An instance group's name, rate limiter, host policy and passive instances (Triton's rate-limiter
    documentation; NUMA deployments): carried by the import (0 settings not carried), so the rendered
    repository loads the model with the same groups, and it answers alike through its active instance."""
    repo = tmp_path / "groups"
    (repo / "add1" / "1").mkdir(parents=True)
    (repo / "add1" / "1" / "model.py").write_text(OPS_PY)
    groups = (
        'instance_group [{ name: "first" kind: KIND_CPU count: 1 host_policy: "policy_a" '
        'rate_limiter { resources [{ name: "R1" count: 2 }, { name: "R2" global: true count: 1 }] '
        "priority: 2 } }, "
        "{ kind: KIND_CPU count: 1 passive: true }]"
    )
    (repo / "add1" / "config.pbtxt").write_text(
        f'backend: "python"\n{groups}\n'
        f'input [{{ name: "IN" {TENSOR} }}]\noutput [{{ name: "OUT" {TENSOR} }}]\n'
    )
    request = [("add1", {"IN": np.array([1.0, 2.0], dtype=np.float32)}, {})]
    args = ("--rate-limit=execution_count",)
    with serving(repo, tmp_path / "original.log", *args) as server:
        original, config = stream(server, request), served_config(server, "add1")
    with serving(imported(repo, tmp_path), tmp_path / "imported.log", *args) as server:
        again, config_again = stream(server, request), served_config(server, "add1")
    assert original == again == [[{"OUT": [2.0, 3.0]}]]
    assert config["instance_group"] == config_again["instance_group"]
    first, second = config_again["instance_group"]
    assert first["name"] == "first" and second["name"] == "add1_1"  # Triton names a group without one
    assert first["host_policy"] == "policy_a" and second["passive"] is True
    assert first["rate_limiter"]["priority"] == 2
    assert [(r["name"], r["global"], r["count"]) for r in first["rate_limiter"]["resources"]] == [
        ("R1", False, 2),
        ("R2", True, 1),
    ]
